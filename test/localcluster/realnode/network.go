package realnode

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"

	"k8s.io/klog/v2"
)

// setUpBridge creates the cluster's own bridge with the Node's address
// before kubelet starts (kubelet serves on it; the CNI bridge plugin finds
// it and attaches Pods), and the iptables guard that drops any routed
// packet from the bridge to another interface. Idempotent.
func (n *Node) setUpBridge(ctx context.Context) error {
	if err := n.checkPodCIDRFree(); err != nil {
		return err
	}
	br := n.BridgeName()
	if _, err := net.InterfaceByName(br); err != nil {
		if err := run(ctx, "ip", "link", "add", "name", br, "type", "bridge"); err != nil {
			return err
		}
	}
	ones, _ := n.cfg.PodCIDR.Mask.Size()
	if err := run(ctx, "ip", "addr", "replace", fmt.Sprintf("%s/%d", n.NodeIP(), ones), "dev", br); err != nil {
		return err
	}
	if err := run(ctx, "ip", "link", "set", br, "up"); err != nil {
		return err
	}
	chain := n.guardChain()
	if run(ctx, "iptables", "-w", "-n", "-L", chain) != nil {
		if err := run(ctx, "iptables", "-w", "-N", chain); err != nil {
			return err
		}
	}
	if err := run(ctx, "iptables", "-w", "-F", chain); err != nil {
		return err
	}
	if err := run(ctx, "iptables", "-w", "-A", chain, "-i", br, "!", "-o", br, "-m", "comment", "--comment", "kruntimes: Pod traffic stays on this machine", "-j", "DROP"); err != nil {
		return err
	}
	if run(ctx, "iptables", "-w", "-C", "FORWARD", "-j", chain) != nil {
		return run(ctx, "iptables", "-w", "-I", "FORWARD", "-j", chain)
	}
	return nil
}

// checkPodCIDRFree refuses a Pod CIDR that overlaps an address of another
// interface: two clusters, or the machine's own network.
func (n *Node) checkPodCIDRFree() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, iface := range ifaces {
		if iface.Name == n.BridgeName() {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipnet, ok := a.(*net.IPNet)
			if !ok || ipnet.IP.To4() == nil {
				continue
			}
			if ipnet.Contains(n.cfg.PodCIDR.IP) || n.cfg.PodCIDR.Contains(ipnet.IP) {
				return fmt.Errorf("Pod CIDR %s overlaps %s on %s: choose another (--pod-cidr)", n.cfg.PodCIDR, ipnet, iface.Name)
			}
		}
	}
	return nil
}

// tearDownBridge removes the guard chain and the bridge. Idempotent.
func (n *Node) tearDownBridge(ctx context.Context) error {
	var errs []string
	chain := n.guardChain()
	for run(ctx, "iptables", "-w", "-C", "FORWARD", "-j", chain) == nil {
		if err := run(ctx, "iptables", "-w", "-D", "FORWARD", "-j", chain); err != nil {
			errs = append(errs, err.Error())
			break
		}
	}
	if run(ctx, "iptables", "-w", "-n", "-L", chain) == nil {
		if err := run(ctx, "iptables", "-w", "-F", chain); err != nil {
			errs = append(errs, err.Error())
		}
		if err := run(ctx, "iptables", "-w", "-X", chain); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if _, err := net.InterfaceByName(n.BridgeName()); err == nil {
		if err := run(ctx, "ip", "link", "del", n.BridgeName()); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing the node's network: %s", strings.Join(errs, "; "))
	}
	return nil
}

// run runs a system command, its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	klog.FromContext(ctx).V(4).Info("Ran", "command", name, "args", args)
	return nil
}
