package realnode

import (
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	kubeproxyconfigv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// cniNetworkName names the node's CNI network.
const cniNetworkName = "kruntimes"

// cniConfList is a CNI network configuration list (the spec's
// "conflist"), with the plugins the node chains.
type cniConfList struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

type cniBridge struct {
	Type        string  `json:"type"`
	Bridge      string  `json:"bridge"`
	IsGateway   bool    `json:"isGateway"`
	IPMasq      bool    `json:"ipMasq"`
	HairpinMode bool    `json:"hairpinMode"`
	IPAM        cniIPAM `json:"ipam"`
}

type cniIPAM struct {
	Type    string       `json:"type"`
	DataDir string       `json:"dataDir"`
	Ranges  [][]cniRange `json:"ranges"`
	Routes  []cniRoute   `json:"routes"`
}

type cniRange struct {
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway"`
}

type cniRoute struct {
	Dst string `json:"dst"`
	GW  string `json:"gw"`
}

type cniPortMap struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
}

// cniConfig is the node's network: the cluster's own bridge with the Pod
// CIDR from host-local IPAM (state under the node's directory), no
// masquerade, and routes to the Pod and Service networks only — a Pod has
// no default route, so nothing it sends leaves this machine.
func (n *Node) cniConfig() cniConfList {
	return cniConfList{
		CNIVersion: "1.0.0",
		Name:       cniNetworkName,
		Plugins: []any{
			cniBridge{
				Type:        "bridge",
				Bridge:      n.BridgeName(),
				IsGateway:   false,
				IPMasq:      false,
				HairpinMode: true,
				IPAM: cniIPAM{
					Type:    "host-local",
					DataDir: n.ipamDir(),
					Ranges:  [][]cniRange{{{Subnet: n.cfg.PodCIDR.String(), Gateway: n.NodeIP().String()}}},
					Routes:  []cniRoute{{Dst: n.cfg.ServiceCIDR, GW: n.NodeIP().String()}},
				},
			},
			cniPortMap{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
		},
	}
}

func (n *Node) writeCNIConfig() error {
	data, err := json.MarshalIndent(n.cniConfig(), "", "  ")
	if err != nil {
		return err
	}
	return writeFile(n.path("cni", "net.d", "10-"+cniNetworkName+".conflist"), data)
}

// kubeletConfig is kubelet's configuration: the cgroupfs driver on the
// machine's cgroup v1 hierarchies (failCgroupV1: false), every Pod under
// the node's own cgroup root, its API on the bridge address with client
// certificates and webhook authorization, and no eviction on a nearly
// full development disk.
func (n *Node) kubeletConfig() *kubeletconfigv1beta1.KubeletConfiguration {
	return &kubeletconfigv1beta1.KubeletConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: kubeletconfigv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},
		Address:            n.NodeIP().String(),
		Port:               int32(n.cfg.KubeletPort),
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To(int32(n.cfg.KubeletHealthzPort)),
		TLSCertFile:        n.cfg.ServingCert,
		TLSPrivateKeyFile:  n.cfg.ServingKey,
		Authentication: kubeletconfigv1beta1.KubeletAuthentication{
			X509:      kubeletconfigv1beta1.KubeletX509Authentication{ClientCAFile: n.cfg.ClientCAFile},
			Webhook:   kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletconfigv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:            kubeletconfigv1beta1.KubeletAuthorization{Mode: kubeletconfigv1beta1.KubeletAuthorizationModeWebhook},
		ContainerRuntimeEndpoint: "unix://" + n.ContainerdSocket(),
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               n.CgroupRoot(),
		CgroupsPerQOS:            ptr.To(true),
		FailCgroupV1:             ptr.To(false),
		FailSwapOn:               ptr.To(false),
		ClusterDomain:            n.cfg.ClusterDomain,
		ClusterDNS:               n.cfg.ClusterDNS,
		// No host resolv.conf: a Pod resolves only cluster names.
		ResolverConfig: ptr.To(""),
		PodLogsDir:     n.PodLogsDir(),
		// A development disk is often over 85 % full; evicting Pods or
		// images for it would only confuse.
		EvictionHard:                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
		SerializeImagePulls:         ptr.To(false),
		NodeStatusReportFrequency:   metav1.Duration{Duration: 10 * time.Second},
		NodeStatusUpdateFrequency:   metav1.Duration{Duration: 10 * time.Second},
		RuntimeRequestTimeout:       metav1.Duration{Duration: 2 * time.Minute},
	}
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode, health and
// metrics on loopback, NodePorts on no routable address, and no change to
// the machine's conntrack table size.
func (n *Node) kubeProxyConfig() *kubeproxyconfigv1alpha1.KubeProxyConfiguration {
	return &kubeproxyconfigv1alpha1.KubeProxyConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: kubeproxyconfigv1alpha1.SchemeGroupVersion.String(), Kind: "KubeProxyConfiguration"},
		ClientConnection:   componentbaseconfigv1alpha1.ClientConnectionConfiguration{Kubeconfig: n.cfg.KubeProxyKubeconfig},
		HostnameOverride:   n.cfg.NodeName,
		BindAddress:        "127.0.0.1",
		HealthzBindAddress: fmt.Sprintf("127.0.0.1:%d", n.cfg.KubeProxyHealthzPort),
		MetricsBindAddress: fmt.Sprintf("127.0.0.1:%d", n.cfg.KubeProxyMetrics),
		Mode:               kubeproxyconfigv1alpha1.ProxyMode("iptables"),
		IPTables: kubeproxyconfigv1alpha1.KubeProxyIPTablesConfiguration{
			LocalhostNodePorts: ptr.To(false),
		},
		ClusterCIDR:       n.cfg.PodCIDR.String(),
		NodePortAddresses: []string{n.NodeIP().String() + "/32"},
		Conntrack: kubeproxyconfigv1alpha1.KubeProxyConntrackConfiguration{
			MaxPerCore: ptr.To(int32(0)),
			Min:        ptr.To(int32(0)),
		},
	}
}

func writeYAML(path string, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return writeFile(path, data)
}

// WriteConfigs writes every generated configuration file of the node.
func (n *Node) WriteConfigs() error {
	if err := n.writeContainerdConfig(); err != nil {
		return err
	}
	if err := n.writeCNIConfig(); err != nil {
		return err
	}
	if err := writeYAML(n.KubeletConfigPath(), n.kubeletConfig()); err != nil {
		return err
	}
	return writeYAML(n.KubeProxyConfigPath(), n.kubeProxyConfig())
}
