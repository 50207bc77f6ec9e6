package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// cgroupFS is where the machine's cgroup hierarchies are mounted.
const cgroupFS = "/sys/fs/cgroup"

// shimSocketDir is where containerd-shim-runc-v2 puts its sockets
// (containerd's defaults.DefaultStateDir + "/s"), whatever containerd's own
// state directory.
const shimSocketDir = "/run/containerd/s"

// CleanUp removes everything a run of this node left, in the reverse order
// of its creation: container processes (every process under the node's
// cgroup root), the containerd shims serving the node's socket, every mount
// below the state directory (container root file systems, /dev/shm,
// kubelet's volumes, network-namespace bind mounts — which frees the
// namespaces and the Pods' veths), stale shim sockets, the cgroups,
// kube-proxy's iptables rules, the guard chain and the bridge, and the
// per-run state (containerd's state, CNI IPAM). Idempotent: a clean stop
// calls it after stopping the components, a start calls it first for what
// a killed run left. containerd's root (the image store) is kept.
func (n *Node) CleanUp(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var errs []error
	if err := n.killCgroupProcesses(ctx); err != nil {
		errs = append(errs, err)
	}
	if killed := n.killShims(); killed > 0 {
		logger.V(2).Info("Killed containerd shims of the node", "count", killed)
	}
	if err := n.unmountAll(); err != nil {
		errs = append(errs, err)
	}
	removeStaleShimSockets()
	if err := n.removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	if proxy := filepath.Join(n.cfg.BinDir, "kube-proxy"); fileExists(proxy) && n.hasKubeProxyRules(ctx) {
		// kube-proxy's own cleanup removes its chains in every mode.
		if out, err := exec.CommandContext(ctx, proxy, "--cleanup").CombinedOutput(); err != nil {
			logger.V(2).Info("kube-proxy --cleanup reported errors", "output", string(out))
		}
	}
	if err := n.tearDownBridge(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, dir := range []string{n.containerdState(), n.runcRoot(), n.ipamDir()} {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hasKubeProxyRules reports whether kube-proxy's iptables chains exist.
func (n *Node) hasKubeProxyRules(ctx context.Context) bool {
	for _, table := range []string{"nat", "filter"} {
		out, err := exec.CommandContext(ctx, "iptables", "-w", "-t", table, "-S").Output()
		if err == nil && strings.Contains(string(out), "KUBE-") {
			return true
		}
	}
	return false
}

// cgroupDirs lists the node's cgroup root in every mounted hierarchy.
func (n *Node) cgroupDirs() []string {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		dir := filepath.Join(cgroupFS, e.Name(), n.CgroupRoot())
		if fileExists(dir) {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// killCgroupProcesses SIGKILLs every process below the node's cgroup root
// until none is left.
func (n *Node) killCgroupProcesses(ctx context.Context) error {
	dirs := n.cgroupDirs()
	if len(dirs) == 0 {
		return nil
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		pids := map[int]bool{}
		for _, dir := range dirs {
			_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				for _, pid := range readPIDs(path) {
					pids[pid] = true
				}
				return nil
			})
		}
		for pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("killing the processes under cgroup %s: %w", n.CgroupRoot(), err)
	}
	return nil
}

func readPIDs(path string) []int {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killShims SIGKILLs the containerd shims started for this node's
// containerd: their command line names its socket.
func (n *Node) killShims() int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	killed := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && args[i+1] == n.ContainerdSocket() {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	return killed
}

// Mounts returns the mount points at or below the state directory, deepest
// first.
func (n *Node) Mounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []string
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == n.cfg.StateDir || strings.HasPrefix(mp, n.cfg.StateDir+"/") {
			mounts = append(mounts, mp)
		}
	}
	slices.SortStableFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	return mounts, scanner.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll lazily unmounts every mount below the state directory,
// deepest first, until none is left (mounts may be stacked).
func (n *Node) unmountAll() error {
	for range 10 {
		mounts, err := n.Mounts()
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, mp := range mounts {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("unmounting %s: %w", mp, err)
			}
		}
	}
	mounts, _ := n.Mounts()
	return fmt.Errorf("mounts left below %s after 10 rounds: %v", n.cfg.StateDir, mounts)
}

// removeStaleShimSockets removes shim sockets nothing listens on any more:
// a killed shim leaves its socket behind.
func removeStaleShimSockets() {
	entries, err := os.ReadDir(shimSocketDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(shimSocketDir, e.Name())
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(path)
		}
	}
}

// createCgroupRoot creates the node's cgroup root in every cgroup v1
// hierarchy: kubelet refuses a cgroupRoot that does not exist. A new
// cpuset cgroup has no CPUs or memory nodes until given its parent's.
func (n *Node) createCgroupRoot() error {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return err
	}
	for _, e := range entries {
		hierarchy := filepath.Join(cgroupFS, e.Name())
		if !fileExists(filepath.Join(hierarchy, "cgroup.procs")) || fileExists(filepath.Join(hierarchy, "cgroup.controllers")) {
			continue // not a mounted v1 hierarchy (or the unified one)
		}
		dir := filepath.Join(hierarchy, n.CgroupRoot())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(hierarchy, file))
			if err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, file), parent, 0o644); err != nil {
				return fmt.Errorf("setting %s of cgroup %s: %w", file, dir, err)
			}
		}
	}
	return nil
}

// removeCgroups removes the node's cgroups, children first.
func (n *Node) removeCgroups() error {
	var errs []error
	for _, root := range n.cgroupDirs() {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for _, dir := range slices.Backward(dirs) {
			if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dir, err))
			}
		}
	}
	return errors.Join(errs...)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
