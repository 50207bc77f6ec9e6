package realnode

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"
)

// containerdConfig is the part of containerd 2.4's config.toml (version 4:
// the servers are plugins) the node sets; containerd's defaults fill in the
// rest.
type containerdConfig struct {
	Version         int                     `toml:"version"`
	Root            string                  `toml:"root"`
	State           string                  `toml:"state"`
	DisabledPlugins []string                `toml:"disabled_plugins"`
	Plugins         containerdPluginConfigs `toml:"plugins"`
}

// containerdServer is the address of containerd's gRPC or ttrpc server.
type containerdServer struct {
	Address string `toml:"address"`
}

type containerdPluginConfigs struct {
	GRPC    containerdServer `toml:"io.containerd.server.v1.grpc"`
	TTRPC   containerdServer `toml:"io.containerd.server.v1.ttrpc"`
	Images  criImages        `toml:"io.containerd.cri.v1.images"`
	Runtime criRuntime       `toml:"io.containerd.cri.v1.runtime"`
	CRI     criServer        `toml:"io.containerd.grpc.v1.cri"`
}

type criImages struct {
	Snapshotter  string            `toml:"snapshotter"`
	PinnedImages map[string]string `toml:"pinned_images"`
	Registry     criRegistry       `toml:"registry"`
}

type criRegistry struct {
	// ConfigPath holds a hosts.toml per registry host.
	ConfigPath string `toml:"config_path"`
}

type criRuntime struct {
	NetNSMountsUnderStateDir bool `toml:"netns_mounts_under_state_dir"`
	// RestrictOOMScoreAdj keeps a container's oom_score_adj at or above
	// containerd's own: lowering it needs CAP_SYS_RESOURCE, which a VM's
	// or container's root may lack (runc: "nsexec: failed to update
	// /proc/self/oom_score_adj").
	RestrictOOMScoreAdj bool `toml:"restrict_oom_score_adj"`
	// The VM's cgroup v1 hierarchies have no hugetlb controller.
	TolerateMissingHugetlbController bool          `toml:"tolerate_missing_hugetlb_controller"`
	DisableHugetlbController         bool          `toml:"disable_hugetlb_controller"`
	Containerd                       criContainerd `toml:"containerd"`
	CNI                              criCNI        `toml:"cni"`
}

type criContainerd struct {
	DefaultRuntimeName string                       `toml:"default_runtime_name"`
	Runtimes           map[string]criRuntimeHandler `toml:"runtimes"`
}

type criRuntimeHandler struct {
	RuntimeType string      `toml:"runtime_type"`
	Options     runcOptions `toml:"options"`
}

// runcOptions are io.containerd.runc.v2's options.
type runcOptions struct {
	// Root is runc's state directory (default /run/containerd/runc).
	Root          string `toml:"Root"`
	SystemdCgroup bool   `toml:"SystemdCgroup"`
}

type criCNI struct {
	BinDirs []string `toml:"bin_dirs"`
	ConfDir string   `toml:"conf_dir"`
}

type criServer struct {
	StreamServerAddress string `toml:"stream_server_address"`
	StreamServerPort    string `toml:"stream_server_port"`
}

// registryHosts is a hosts.toml of containerd's registry config_path.
type registryHosts struct {
	Server string                  `toml:"server"`
	Host   map[string]registryHost `toml:"host"`
}

type registryHost struct {
	Capabilities []string `toml:"capabilities"`
}

// containerdDisabledPlugins write outside the state directory or serve on
// host paths the node does not need: NRI's socket in /var/run/nri, the opt
// plugin's /opt/containerd, and the snapshotters other than overlayfs.
var containerdDisabledPlugins = []string{
	"io.containerd.nri.v1.nri",
	"io.containerd.internal.v1.opt",
	"io.containerd.snapshotter.v1.blockfile",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.erofs",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.native",
}

func (n *Node) containerdConfig() containerdConfig {
	return containerdConfig{
		Version:         4,
		Root:            n.containerdRoot(),
		State:           n.containerdState(),
		DisabledPlugins: containerdDisabledPlugins,
		Plugins: containerdPluginConfigs{
			GRPC:  containerdServer{Address: n.ContainerdSocket()},
			TTRPC: containerdServer{Address: n.ContainerdSocket() + ".ttrpc"},
			Images: criImages{
				Snapshotter:  "overlayfs",
				PinnedImages: map[string]string{"sandbox": n.cfg.SandboxImage},
				Registry:     criRegistry{ConfigPath: n.registryHostsDir()},
			},
			Runtime: criRuntime{
				NetNSMountsUnderStateDir:         true,
				RestrictOOMScoreAdj:              true,
				TolerateMissingHugetlbController: true,
				DisableHugetlbController:         true,
				Containerd: criContainerd{
					DefaultRuntimeName: "runc",
					Runtimes: map[string]criRuntimeHandler{
						"runc": {RuntimeType: "io.containerd.runc.v2", Options: runcOptions{Root: n.runcRoot()}},
					},
				},
				CNI: criCNI{BinDirs: []string{n.cfg.CNIBinDir}, ConfDir: n.cniConfDir()},
			},
			// kubelet proxies exec, attach and port-forward to this
			// server; loopback only.
			CRI: criServer{StreamServerAddress: "127.0.0.1", StreamServerPort: "0"},
		},
	}
}

// writeContainerdConfig writes config.toml and a hosts.toml that sends
// pulls to the loopback registry (plain HTTP) for it and for each mirrored
// host; the mirrored hosts themselves are never dialled.
func (n *Node) writeContainerdConfig() error {
	if err := writeTOML(n.ContainerdConfigPath(), n.containerdConfig()); err != nil {
		return err
	}
	hosts := registryHosts{
		Server: "http://" + n.cfg.Registry,
		Host: map[string]registryHost{
			"http://" + n.cfg.Registry: {Capabilities: []string{"pull", "resolve"}},
		},
	}
	for _, host := range append([]string{n.cfg.Registry}, n.cfg.Mirrored...) {
		if err := writeTOML(filepath.Join(n.registryHostsDir(), host, "hosts.toml"), hosts); err != nil {
			return err
		}
	}
	return nil
}

func writeTOML(path string, v any) error {
	var buf bytes.Buffer
	buf.WriteString("# Generated by the kruntimes local cluster; rewritten at every start.\n")
	enc := toml.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return writeFile(path, buf.Bytes())
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
