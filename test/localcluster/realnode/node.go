package realnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultPodCIDR is the Pod network of make run's real node. A second
// cluster on the machine (an e2e run beside make run) takes another.
const DefaultPodCIDR = "10.244.0.0/24"

// Config describes one real node.
type Config struct {
	// StateDir holds everything the node writes: containerd's root and
	// state, kubelet's root directory, CNI configuration and IPAM state, the
	// registry's blobs. Every mount and network namespace of the node is
	// below it.
	StateDir string
	// BinDir holds containerd, containerd-shim-runc-v2, runc, kubelet,
	// kube-proxy and kube-scheduler (hack/build-node.sh).
	BinDir string
	// CNIBinDir holds the CNI plugins bridge, host-local, loopback and
	// portmap (Debian's containernetworking-plugins: /usr/lib/cni).
	CNIBinDir string
	// NodeName is the Node's name.
	NodeName string
	// PodCIDR is the node's Pod network; its first address is the bridge's
	// and the Node's InternalIP.
	PodCIDR *net.IPNet
	// ServiceCIDR is the cluster's Service network.
	ServiceCIDR string
	// ClusterDomain is the Services' DNS domain.
	ClusterDomain string
	// ClusterDNS, when set, is the nameserver kubelet gives Pods.
	ClusterDNS []string
	// KubeletKubeconfig and KubeProxyKubeconfig are the components'
	// client configurations.
	KubeletKubeconfig   string
	KubeProxyKubeconfig string
	// ClientCAFile verifies clients of kubelet's API (kube-apiserver's
	// kubelet client certificate).
	ClientCAFile string
	// ServingCert and ServingKey are kubelet's serving pair; it must name
	// the bridge address.
	ServingCert, ServingKey string
	// KubeletPort, KubeletHealthzPort and KubeProxy{Healthz,Metrics}Port are
	// free ports.
	KubeletPort, KubeletHealthzPort        int
	KubeProxyHealthzPort, KubeProxyMetrics int
	// SandboxImage is the pause image, in the loopback registry.
	SandboxImage string
	// Registry is the loopback registry's host:port, which containerd
	// reaches over plain HTTP.
	Registry string
	// Mirrored are registry hosts the node pulls from the loopback
	// registry instead, as a cluster's mirror configuration would:
	// kruntimes.io/runtimed:latest is Registry's runtimed:latest.
	Mirrored []string
}

// Node is the real node's derived names and paths.
type Node struct {
	cfg Config
	// id is unique per state directory and stable across runs, so a run
	// finds what a killed one left: the bridge, the cgroup root, the chain.
	id string
}

// New returns the node cfg describes.
func New(cfg Config) (*Node, error) {
	if cfg.PodCIDR == nil || cfg.PodCIDR.IP.To4() == nil {
		return nil, fmt.Errorf("the real node needs an IPv4 Pod CIDR, got %v", cfg.PodCIDR)
	}
	if ones, _ := cfg.PodCIDR.Mask.Size(); ones > 28 {
		return nil, fmt.Errorf("Pod CIDR %s is too small: it needs room for a bridge and Pods", cfg.PodCIDR)
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	cfg.StateDir = abs
	sum := sha256.Sum256([]byte(abs))
	return &Node{cfg: cfg, id: hex.EncodeToString(sum[:])[:8]}, nil
}

// Config returns the node's configuration.
func (n *Node) Config() Config { return n.cfg }

// BridgeName is the cluster's own bridge (15 bytes at most, a Linux limit).
func (n *Node) BridgeName() string { return "krt" + n.id }

// CgroupRoot is the cgroup every Pod of the node is created under, in
// every hierarchy.
func (n *Node) CgroupRoot() string { return "/kruntimes-" + n.id }

// guardChain is the iptables chain that keeps Pod traffic on this machine.
func (n *Node) guardChain() string { return "KRUNTIMES-" + n.id }

// NodeIP is the bridge's address: the Node's InternalIP, where kubelet
// serves. kubelet refuses a loopback node IP.
func (n *Node) NodeIP() net.IP { return NodeIPOf(n.cfg.PodCIDR) }

// NodeIPOf is the node IP of a node with the IPv4 Pod CIDR podCIDR: its
// first address. kube-apiserver advertises it before the node exists.
func NodeIPOf(podCIDR *net.IPNet) net.IP {
	ip := podCIDR.IP.Mask(podCIDR.Mask).To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).To4()
}

func (n *Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.cfg.StateDir}, elem...)...)
}

// ContainerdConfigPath is containerd's config.toml.
func (n *Node) ContainerdConfigPath() string { return n.path("containerd", "config.toml") }

// ContainerdSocket is containerd's gRPC socket, kubelet's CRI endpoint.
func (n *Node) ContainerdSocket() string { return n.path("containerd", "containerd.sock") }

func (n *Node) containerdRoot() string  { return n.path("containerd", "root") }
func (n *Node) containerdState() string { return n.path("containerd", "state") }
func (n *Node) runcRoot() string        { return n.path("containerd", "runc") }
func (n *Node) registryHostsDir() string {
	return n.path("containerd", "certs.d")
}
func (n *Node) cniConfDir() string { return n.path("cni", "net.d") }
func (n *Node) ipamDir() string    { return n.path("cni", "networks") }

// KubeletRootDir is kubelet's --root-dir.
func (n *Node) KubeletRootDir() string { return n.path("kubelet") }

// KubeletConfigPath is kubelet's --config.
func (n *Node) KubeletConfigPath() string { return n.path("kubelet-config.yaml") }

// PodLogsDir is where kubelet keeps container logs.
func (n *Node) PodLogsDir() string { return n.path("pod-logs") }

// KubeProxyConfigPath is kube-proxy's --config.
func (n *Node) KubeProxyConfigPath() string { return n.path("kube-proxy-config.yaml") }

// RegistryDir holds the loopback registry's blobs.
func (n *Node) RegistryDir() string { return n.path("registry") }

// ContainerdArgs are containerd's flags.
func (n *Node) ContainerdArgs() []string {
	return []string{"--config=" + n.ContainerdConfigPath()}
}

// ContainerdEnv is containerd's environment: its shim and runc next to it
// (first in PATH), the CNI plugins' iptables from the system.
func (n *Node) ContainerdEnv() []string {
	return append(os.Environ(), "PATH="+n.cfg.BinDir+":"+os.Getenv("PATH"))
}

// KubeletArgs are kubelet's flags: what KubeletConfiguration cannot say.
func (n *Node) KubeletArgs() []string {
	return []string{
		"--config=" + n.KubeletConfigPath(),
		"--kubeconfig=" + n.cfg.KubeletKubeconfig,
		"--root-dir=" + n.KubeletRootDir(),
		"--hostname-override=" + n.cfg.NodeName,
		"--node-ip=" + n.NodeIP().String(),
		"--v=2",
	}
}

// KubeProxyArgs are kube-proxy's flags.
func (n *Node) KubeProxyArgs() []string {
	return []string{"--config=" + n.KubeProxyConfigPath(), "--v=2"}
}

// machineLockPath serializes real nodes on one machine: kube-proxy owns the
// host's KUBE-* iptables chains, which two kube-proxies would overwrite.
const machineLockPath = "/run/kruntimes-realnode.lock"

// Lock takes the machine-wide real-node lock; release it after CleanUp.
func (n *Node) Lock() (release func(), err error) {
	f, err := os.OpenFile(machineLockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := io.ReadAll(f)
		f.Close()
		return nil, fmt.Errorf("another real node runs on this machine (pid %s, lock %s): kube-proxy's iptables rules are machine-wide, so only one can", strings.TrimSpace(string(owner)), machineLockPath)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
	return func() { f.Close() }, nil
}

// CheckBinaries reports the first of names missing from BinDir.
func (n *Node) CheckBinaries(names ...string) error {
	for _, b := range names {
		if !fileExists(filepath.Join(n.cfg.BinDir, b)) {
			return fmt.Errorf("%s is missing from %s: run hack/build-node.sh", b, n.cfg.BinDir)
		}
	}
	return nil
}

// Prepare makes the node ready for its components: it removes what an
// earlier run left (CleanUp), then creates the bridge and guard chain and
// writes every configuration file. It needs root.
func (n *Node) Prepare(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the real node needs root: it runs containerd, mounts file systems and creates network namespaces")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: run hack/build-node.sh", tool)
		}
	}
	if err := n.CheckBinaries("containerd", "containerd-shim-runc-v2", "runc"); err != nil {
		return err
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if !fileExists(filepath.Join(n.cfg.CNIBinDir, plugin)) {
			return fmt.Errorf("CNI plugin %s is missing from %s: run hack/build-node.sh", plugin, n.cfg.CNIBinDir)
		}
	}
	if err := n.CleanUp(ctx); err != nil {
		return fmt.Errorf("removing what an earlier run left: %w", err)
	}
	for _, dir := range []string{n.containerdRoot(), n.containerdState(), n.KubeletRootDir(), n.PodLogsDir(), n.ipamDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := n.createCgroupRoot(); err != nil {
		return err
	}
	if err := n.setUpBridge(ctx); err != nil {
		return err
	}
	return n.WriteConfigs()
}
