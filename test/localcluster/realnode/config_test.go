package realnode

import (
	"encoding/json"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

func testNode(t *testing.T) *Node {
	_, cidr, err := net.ParseCIDR("10.245.0.0/24")
	require.NoError(t, err)
	n, err := New(Config{
		StateDir: t.TempDir(), BinDir: "/bin", CNIBinDir: "/usr/lib/cni", NodeName: "n",
		PodCIDR: cidr, ServiceCIDR: "10.0.0.0/24", ClusterDomain: "cluster.local",
		KubeletPort: 10250, KubeletHealthzPort: 10248, KubeProxyHealthzPort: 10256, KubeProxyMetrics: 10249,
		SandboxImage: "127.0.0.1:5000/kruntimes/pause:local", Registry: "127.0.0.1:5000",
		Mirrored: []string{"kruntimes.io"},
	})
	require.NoError(t, err)
	return n
}

func TestNamesAreStablePerStateDirAndFitLinux(t *testing.T) {
	n := testNode(t)
	again, err := New(n.Config())
	require.NoError(t, err)
	assert.Equal(t, n.BridgeName(), again.BridgeName(), "a later run finds what a killed one left")
	assert.LessOrEqual(t, len(n.BridgeName()), 15, "IFNAMSIZ")
	assert.LessOrEqual(t, len(n.guardChain()), 28, "iptables chain name limit")
	assert.Equal(t, "10.245.0.1", n.NodeIP().String(), "the bridge's address is the Pod CIDR's first")
}

func TestWriteConfigs(t *testing.T) {
	n := testNode(t)
	require.NoError(t, n.WriteConfigs())

	t.Run("containerd keeps its state, netns and runc state under the state directory", func(t *testing.T) {
		var cfg map[string]any
		data, err := os.ReadFile(n.ContainerdConfigPath())
		require.NoError(t, err)
		require.NoError(t, toml.Unmarshal(data, &cfg))
		assert.EqualValues(t, 4, cfg["version"])
		plugins := cfg["plugins"].(map[string]any)
		runtime := plugins["io.containerd.cri.v1.runtime"].(map[string]any)
		assert.Equal(t, true, runtime["netns_mounts_under_state_dir"])
		runc := runtime["containerd"].(map[string]any)["runtimes"].(map[string]any)["runc"].(map[string]any)
		assert.Equal(t, n.runcRoot(), runc["options"].(map[string]any)["Root"])
		images := plugins["io.containerd.cri.v1.images"].(map[string]any)
		assert.Equal(t, "overlayfs", images["snapshotter"])
		assert.Equal(t, "127.0.0.1:5000/kruntimes/pause:local", images["pinned_images"].(map[string]any)["sandbox"])
		for _, host := range []string{"127.0.0.1:5000", "kruntimes.io"} {
			var hosts registryHosts
			data, err := os.ReadFile(filepath.Join(n.registryHostsDir(), host, "hosts.toml"))
			require.NoError(t, err)
			require.NoError(t, toml.Unmarshal(data, &hosts))
			assert.Equal(t, "http://127.0.0.1:5000", hosts.Server, "%s's images come from the loopback registry", host)
			assert.Equal(t, []string{"http://127.0.0.1:5000"}, slices.Collect(maps.Keys(hosts.Host)), host)
		}
	})

	t.Run("CNI: the cluster's bridge, no masquerade, no default route", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(n.cniConfDir(), "10-kruntimes.conflist"))
		require.NoError(t, err)
		var list struct {
			Plugins []map[string]any `json:"plugins"`
		}
		require.NoError(t, json.Unmarshal(data, &list))
		bridge := list.Plugins[0]
		assert.Equal(t, n.BridgeName(), bridge["bridge"])
		assert.Equal(t, false, bridge["ipMasq"])
		assert.Equal(t, false, bridge["isGateway"])
		routes := bridge["ipam"].(map[string]any)["routes"].([]any)
		assert.Equal(t, []any{map[string]any{"dst": "10.0.0.0/24", "gw": "10.245.0.1"}}, routes)
	})

	t.Run("kubelet: cgroupfs on cgroup v1, its own cgroup root, API on the bridge", func(t *testing.T) {
		data, err := os.ReadFile(n.KubeletConfigPath())
		require.NoError(t, err)
		var cfg kubeletconfigv1beta1.KubeletConfiguration
		require.NoError(t, yaml.UnmarshalStrict(data, &cfg))
		assert.Equal(t, "KubeletConfiguration", cfg.Kind)
		assert.Equal(t, "cgroupfs", cfg.CgroupDriver)
		assert.Equal(t, false, *cfg.FailCgroupV1)
		assert.Equal(t, n.CgroupRoot(), cfg.CgroupRoot)
		assert.Equal(t, "10.245.0.1", cfg.Address)
		assert.Equal(t, "unix://"+n.ContainerdSocket(), cfg.ContainerRuntimeEndpoint)
		assert.Equal(t, false, *cfg.Authentication.Anonymous.Enabled)
	})
}
