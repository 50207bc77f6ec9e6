package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/test/localcluster/endpoints"
	"kruntimes.io/kruntimes/test/localcluster/localpath"
	"kruntimes.io/kruntimes/test/localcluster/nodeagent"
	"kruntimes.io/kruntimes/test/localcluster/podbinder"
	"kruntimes.io/kruntimes/test/localcluster/realnode"
)

// DefaultNodeName is the name of the local node.
const DefaultNodeName = "local-node"

// serviceCIDR is the cluster's Service network; 10.0.0.1 is the kubernetes
// Service, which kube-apiserver's serving certificate names.
const serviceCIDR = "10.0.0.0/24"

// Config says where the cluster keeps its state and what it runs.
type Config struct {
	// RepoRoot is the repository checkout; bin/ and artifacts/ are found there.
	RepoRoot string
	// StateDir holds etcd data, certificates, logs and Pod directories.
	StateDir string
	// KubeconfigPath is where the cluster-admin kubeconfig is written.
	// Defaults to StateDir/admin.kubeconfig.
	KubeconfigPath string
	// NodeName is the name of the local node.
	NodeName string
	// PodIPBase is the first address of the 127.x.0.0/16 block Pod IPs come
	// from; two clusters on one machine should use different blocks.
	PodIPBase net.IP
	// Kruntimes controls the kruntimes-apiserver step.
	Kruntimes KruntimesMode
	// KruntimesStorage is kruntimes-apiserver's --storage-backend:
	// "embedded" (the default) or "etcd3", the cluster's etcd under the
	// prefix /kruntimes.
	KruntimesStorage string
	// KruntimesReplicas is how many kruntimes-apiserver processes run
	// (default 1), behind a Service front that hands each new connection to
	// the next ready one. More than one needs KruntimesStorage etcd3.
	KruntimesReplicas int
	// RuntimedThroughAggregation makes runtimed reach the kruntimes.io API
	// through kube-apiserver's aggregation proxy, as it does without
	// --runtimed-kruntimes-api-server; by default it reaches
	// kruntimes-apiserver (or its Service front) directly.
	RuntimedThroughAggregation bool
	// KruntimesArgs are extra flags of kruntimes-apiserver, after the ones
	// the cluster sets, e.g. a short --recovery-heartbeat-grace-period.
	KruntimesArgs []string
	// Progress receives one human-readable line per step; may be nil.
	Progress io.Writer
	// KeepPodLogs writes container logs to StateDir/logs/pods/ and keeps
	// them after their Pod is deleted, for a test suite to scan at the end.
	KeepPodLogs bool
	// Node is what runs Pods: NodeProcess (the default) or NodeContainerd.
	Node NodeMode
	// PodCIDR is the real node's Pod network (default
	// realnode.DefaultPodCIDR); NodeContainerd only.
	PodCIDR string
}

// NodeMode says what runs the cluster's Pods.
type NodeMode string

const (
	// NodeProcess is the node agent: each container a host process,
	// images mapped to binaries in bin/, no root needed.
	NodeProcess NodeMode = "process"
	// NodeContainerd is a real node (root only): kubelet, containerd and
	// runc, kube-scheduler, kube-proxy and a CNI bridge of the cluster's
	// own, images pulled from the cluster's loopback registry.
	NodeContainerd NodeMode = "containerd"
)

// KruntimesMode says whether to run kruntimes-apiserver.
type KruntimesMode string

const (
	// KruntimesRequired fails the start when it does not build or come up.
	KruntimesRequired KruntimesMode = "required"
	// KruntimesDisabled never runs it.
	KruntimesDisabled KruntimesMode = "disabled"
	// KruntimesChart installs charts/kruntimes with bin/helm instead of
	// running a host process: the chart's Deployment, Service, PVC, RBAC,
	// Secrets and APIService. Embedded storage, one replica. On the
	// process-Pod node the node agent runs its Pods from bin/ with
	// local-only values, reached through Service endpoints
	// (--enable-aggregator-routing); on the real node containerd runs the
	// images make images built, installed with the chart's defaults, and
	// kube-apiserver reaches the Service's ClusterIP through kube-proxy,
	// as on kind.
	KruntimesChart KruntimesMode = "chart"
)

// Cluster is a running local cluster.
type Cluster struct {
	cfg        Config
	pki        pkiFiles
	lock       *os.File
	components []*component
	cancel     context.CancelFunc
	agentDone  chan struct{}
	// front is the Service front of several kruntimes-apiserver replicas.
	front       *serviceFront
	stopFront   context.CancelFunc
	kruntimesUp []*component
	// kruntimesStarts are how each of kruntimesUp was started.
	kruntimesStarts []replicaStart

	// APIServerURL is the secure URL of kube-apiserver.
	APIServerURL string
	// EtcdURL is the client URL of the cluster's etcd.
	EtcdURL string
	// AdminConfig is a cluster-admin client configuration.
	AdminConfig *rest.Config
	// KruntimesRunning reports whether kruntimes-apiserver was started and
	// its APIService registered.
	KruntimesRunning bool
	// KruntimesSkipReason says why kruntimes-apiserver is not running.
	KruntimesSkipReason string
	// KruntimesURL is kruntimes-apiserver's own secure URL, the direct
	// entry point (its serving certificate is signed by the cluster CA).
	KruntimesURL string

	// The real node (Config.Node NodeContainerd).
	realNode *realNode
	// podCIDR is the real node's Pod network, parsed.
	podCIDR *net.IPNet
}

// ErrAlreadyRunning is returned when another process holds the state directory.
var ErrAlreadyRunning = errors.New("a local cluster is already running with this state directory")

func (c *Cluster) progress(format string, args ...any) {
	if c.cfg.Progress != nil {
		fmt.Fprintf(c.cfg.Progress, "==> "+format+"\n", args...)
	}
}

// Start brings up the whole cluster and returns once kube-apiserver is ready,
// the node is Ready and (when enabled) the kruntimes APIService is Available.
// On error everything already started is stopped again.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(cfg.RepoRoot, ".local", "cluster")
	}
	if cfg.KubeconfigPath == "" {
		cfg.KubeconfigPath = filepath.Join(cfg.StateDir, "admin.kubeconfig")
	}
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if cfg.PodIPBase == nil {
		cfg.PodIPBase = net.IPv4(127, 100, 0, 0)
	}
	if cfg.Kruntimes == "" {
		cfg.Kruntimes = KruntimesRequired
	}
	if cfg.KruntimesReplicas == 0 {
		cfg.KruntimesReplicas = 1
	}
	if cfg.Node == "" {
		cfg.Node = NodeProcess
	}
	if cfg.Node != NodeProcess && cfg.Node != NodeContainerd {
		return nil, fmt.Errorf("node mode must be %s or %s, got %q", NodeProcess, NodeContainerd, cfg.Node)
	}
	if cfg.Node == NodeContainerd && cfg.PodCIDR == "" {
		cfg.PodCIDR = realnode.DefaultPodCIDR
	}
	if cfg.Node == NodeContainerd && cfg.Kruntimes == KruntimesChart && len(cfg.KruntimesArgs) > 0 {
		return nil, fmt.Errorf("chart mode on the real node installs the chart's defaults: no extra kruntimes-apiserver flags, got %q", cfg.KruntimesArgs)
	}
	if cfg.Kruntimes == KruntimesChart && (cfg.KruntimesReplicas > 1 || (cfg.KruntimesStorage != "" && cfg.KruntimesStorage != "embedded")) {
		return nil, fmt.Errorf("chart mode runs the chart's defaults: one replica on embedded storage, not %d on %q", cfg.KruntimesReplicas, cfg.KruntimesStorage)
	}
	if cfg.KruntimesReplicas > 1 && cfg.KruntimesStorage != "etcd3" {
		return nil, fmt.Errorf("%d kruntimes-apiserver replicas need etcd3 storage: the embedded backend's data file has one writer", cfg.KruntimesReplicas)
	}
	c := &Cluster{cfg: cfg}
	if cfg.Node == NodeContainerd {
		_, cidr, err := net.ParseCIDR(cfg.PodCIDR)
		if err != nil {
			return nil, fmt.Errorf("Pod CIDR: %w", err)
		}
		c.podCIDR = cidr
	}
	if err := c.start(ctx); err != nil {
		c.Stop(ctx)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) binary(name string) string { return filepath.Join(c.cfg.RepoRoot, "bin", name) }

func (c *Cluster) start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := os.MkdirAll(c.cfg.StateDir, 0o755); err != nil {
		return err
	}
	if err := c.acquireLock(); err != nil {
		return err
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if _, err := os.Stat(c.binary(b)); err != nil {
			return fmt.Errorf("%s is missing from bin/: run hack/build-kube.sh first", b)
		}
	}
	logDir := filepath.Join(c.cfg.StateDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	c.progress("state in %s, component logs in %s", c.cfg.StateDir, logDir)

	c.progress("certificates and service-account keys")
	pki, err := ensurePKI(filepath.Join(c.cfg.StateDir, "pki"), c.cfg.NodeName)
	if err != nil {
		return fmt.Errorf("creating PKI: %w", err)
	}
	c.pki = pki

	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, kasPort, kcmPort, agentPort := ports[0], ports[1], ports[2], ports[3], ports[4]

	c.progress("etcd on 127.0.0.1:%d", etcdClient)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	c.EtcdURL = etcdURL
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := startComponent(ctx, logDir, "etcd", c.binary("etcd"),
		"--name=local",
		"--data-dir="+filepath.Join(c.cfg.StateDir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=local="+peerURL,
		"--listen-metrics-urls=",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	c.components = append(c.components, etcd)
	if err := c.waitHTTP(ctx, etcd, etcdURL+"/health", nil); err != nil {
		return err
	}

	c.progress("kube-apiserver on https://127.0.0.1:%d (audit log of runs/invoke: %s)", kasPort, c.AuditLogPath())
	c.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", kasPort)
	if err := os.WriteFile(c.auditPolicyPath(), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	kas, err := startComponent(ctx, logDir, "kube-apiserver", c.binary("kube-apiserver"), c.apiServerArgs(etcdURL, kasPort)...)
	if err != nil {
		return err
	}
	c.components = append(c.components, kas)
	c.AdminConfig = c.clientConfig(pairAdmin)
	if err := writeKubeconfig(c.cfg.KubeconfigPath, c.AdminConfig, "kruntimes-local", "kubernetes-admin"); err != nil {
		return err
	}
	adminClient, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	if err := c.waitAPIServerReady(ctx, kas, adminClient); err != nil {
		return err
	}

	c.progress("kube-controller-manager (secure port 127.0.0.1:%d)", kcmPort)
	kcmKubeconfig := filepath.Join(c.cfg.StateDir, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kcmKubeconfig, c.clientConfig(pairControllerMgr), "kruntimes-local", "system:kube-controller-manager"); err != nil {
		return err
	}
	controllers := "*,-node-ipam-controller,-persistentvolume-attach-detach-controller"
	if c.chart() && c.cfg.Node == NodeProcess {
		// EndpointSlice validation refuses loopback IPv4 addresses, which
		// every Pod IP here is: the endpoints publisher writes FQDN slices
		// instead (test/localcluster/endpoints).
		controllers += ",-endpointslice-controller"
	}
	kcm, err := startComponent(ctx, logDir, "kube-controller-manager", c.binary("kube-controller-manager"),
		"--kubeconfig="+kcmKubeconfig,
		"--authentication-kubeconfig="+kcmKubeconfig,
		"--authorization-kubeconfig="+kcmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(kcmPort),
		"--cert-dir="+filepath.Join(c.cfg.StateDir, "controller-manager"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.pki.saKey(),
		"--root-ca-file="+c.pki.clusterCA(),
		"--controllers="+controllers,
		"--concurrent-deployment-syncs=5",
		"--concurrent-replicaset-syncs=5",
	)
	if err != nil {
		return err
	}
	c.components = append(c.components, kcm)
	if err := c.waitHTTP(ctx, kcm, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), insecureTLS()); err != nil {
		return err
	}

	agentCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	c.cancel = cancel
	if c.cfg.Node == NodeContainerd {
		if err := c.startRealNode(ctx, agentCtx, logDir, adminClient); err != nil {
			return err
		}
	} else if err := c.startNodeAgent(ctx, agentCtx, kasPort, agentPort, logDir); err != nil {
		return err
	}
	if err := c.waitNodeReady(ctx, adminClient); err != nil {
		return err
	}
	c.progress("waiting for the default ServiceAccount (controller-manager up)")
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := kcm.running(); err != nil {
			return false, err
		}
		_, err := adminClient.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount: %w", err)
	}

	if err := c.startKruntimes(ctx, logDir, adminClient); err != nil {
		return err
	}
	c.progress("cluster ready; kubeconfig %s", c.cfg.KubeconfigPath)
	return nil
}

// startNodeAgent runs the process-Pod node: the node agent, the Pod binder
// standing in for kube-scheduler, the local-path provisioner and, in chart
// mode, the endpoints publisher, until agentCtx ends.
func (c *Cluster) startNodeAgent(ctx, agentCtx context.Context, kasPort, agentPort int, logDir string) error {
	logger := klog.FromContext(ctx)
	c.progress("node agent %s (kubelet API on https://127.0.0.1:%d, Pod IPs from %s)", c.cfg.NodeName, agentPort, c.cfg.PodIPBase)
	nodeConfig := c.clientConfig(nodePair(c.cfg.NodeName, "client"))
	var podLogDir string
	if c.cfg.KeepPodLogs {
		podLogDir = filepath.Join(logDir, "pods")
	}
	agent, err := nodeagent.New(nodeagent.Config{
		NodeName:       c.cfg.NodeName,
		ClientConfig:   nodeConfig,
		PodDir:         filepath.Join(c.cfg.StateDir, "pods"),
		PodLogDir:      podLogDir,
		BinDir:         filepath.Join(c.cfg.RepoRoot, "bin"),
		PodIPBase:      c.cfg.PodIPBase,
		APIServerHost:  "127.0.0.1",
		APIServerPort:  kasPort,
		APIServerCA:    c.pki.clusterCA(),
		KubeletPort:    agentPort,
		ServingCert:    c.pki.cert(nodePair(c.cfg.NodeName, "serving")),
		ServingKey:     c.pki.key(nodePair(c.cfg.NodeName, "serving")),
		ClientCAFile:   c.pki.clusterCA(),
		AllowedClients: []string{"kube-apiserver-kubelet-client"},
	})
	if err != nil {
		return err
	}
	binder, err := podbinder.New(c.clientConfig(pairScheduler), c.cfg.NodeName)
	if err != nil {
		return err
	}
	adminForControllers, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	provisioner, err := localpath.New(adminForControllers, c.VolumeRoot())
	if err != nil {
		return err
	}
	c.progress("local-path provisioner (default StorageClass %s, volumes in %s)", localpath.StorageClassName, c.VolumeRoot())
	var publisher *endpoints.Publisher
	if c.chart() {
		c.progress("endpoints publisher (one FQDN EndpointSlice per Service)")
		publisher = endpoints.New(adminForControllers)
	}
	c.agentDone = make(chan struct{})
	go func() {
		defer close(c.agentDone)
		var helpers sync.WaitGroup
		helpers.Go(func() { binder.Run(agentCtx) })
		helpers.Go(func() {
			if err := provisioner.Run(agentCtx); err != nil && agentCtx.Err() == nil {
				logger.Error(err, "Local-path provisioner stopped")
			}
		})
		if publisher != nil {
			helpers.Go(func() {
				if err := publisher.Run(agentCtx); err != nil && agentCtx.Err() == nil {
					logger.Error(err, "Endpoints publisher stopped")
				}
			})
		}
		if err := agent.Run(agentCtx); err != nil {
			logger.Error(err, "Node agent stopped")
		}
		helpers.Wait()
	}()
	return nil
}

// chart reports whether kruntimes-apiserver is installed by the chart.
func (c *Cluster) chart() bool { return c.cfg.Kruntimes == KruntimesChart }

func (c *Cluster) apiServerArgs(etcdURL string, port int) []string {
	p := c.pki
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p.cert(pairAPIServer),
		"--tls-private-key-file=" + p.key(pairAPIServer),
		"--client-ca-file=" + p.clusterCA(),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPubKey(),
		"--service-account-signing-key-file=" + p.saKey(),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--requestheader-client-ca-file=" + p.frontProxyCA(),
		"--requestheader-allowed-names=" + frontProxyClientCN,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.cert(pairFrontProxyClient),
		"--proxy-client-key-file=" + p.key(pairFrontProxyClient),
		"--kubelet-client-certificate=" + p.cert(pairKubeletClient),
		"--kubelet-client-key=" + p.key(pairKubeletClient),
		"--kubelet-certificate-authority=" + p.clusterCA(),
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=true", // for profiling kube-apiserver under the benchmarks
		"--audit-policy-file=" + c.auditPolicyPath(),
		"--audit-log-path=" + c.AuditLogPath(),
		"--audit-log-maxsize=100",
		"--audit-log-maxbackup=1",
	}
	if c.cfg.Node == NodeContainerd {
		// Pods reach kube-apiserver through the kubernetes Service, whose
		// endpoint is the node IP: the real node forwards it to loopback
		// (apiServerForward).
		args = append(args, "--advertise-address="+realnode.NodeIPOf(c.podCIDR).String())
	} else {
		// The default reconciler refuses a loopback advertise address, and
		// no process Pod needs the kubernetes Service's endpoints.
		args = append(args, "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none")
	}
	if c.chart() && c.cfg.Node == NodeProcess {
		// The aggregator dials an endpoint of the APIService's Service
		// rather than its ClusterIP, which nothing here routes. The real
		// node's kube-proxy routes ClusterIPs on this host too, so there
		// kube-apiserver runs without it, as kind's does.
		args = append(args, "--enable-aggregator-routing=true")
	}
	return args
}

// auditPolicy records every invocation and every write of a Run's status
// (which way runtimed's came), with its user, Run and response
// code, and nothing else: invoke is the call users most need to account
// for, and the one no peer audits per call.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: kruntimes.io
    resources: ["runs/invoke"]
- level: Metadata
  verbs: ["update", "patch"]
  resources:
  - group: kruntimes.io
    resources: ["runs/status"]
- level: None
`

func (c *Cluster) auditPolicyPath() string { return filepath.Join(c.cfg.StateDir, "audit-policy.yaml") }

// AuditLogPath is kube-apiserver's audit log: one JSON event per invocation.
func (c *Cluster) AuditLogPath() string { return filepath.Join(c.cfg.StateDir, "logs", "audit.log") }

// KruntimesAuditLogPath is kruntimes-apiserver's own audit log: one JSON
// event per invocation, through aggregation or direct, annotated with
// kruntimes.io/entry-point.
func (c *Cluster) KruntimesAuditLogPath() string {
	return filepath.Join(c.cfg.StateDir, "logs", "kruntimes-audit.log")
}

// clientConfig is a client-certificate configuration for one of the pairs.
func (c *Cluster) clientConfig(pair string) *rest.Config {
	return &rest.Config{
		Host: c.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile:   c.pki.clusterCA(),
			CertFile: c.pki.cert(pair),
			KeyFile:  c.pki.key(pair),
		},
		QPS:   100,
		Burst: 200,
	}
}

func (c *Cluster) waitAPIServerReady(ctx context.Context, kas *component, client kubernetes.Interface) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := kas.running(); err != nil {
			return false, err
		}
		if err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
			return false, nil
		}
		_, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err == nil, nil
	})
}

func (c *Cluster) waitNodeReady(ctx context.Context, client kubernetes.Interface) error {
	timeout := time.Minute
	if c.cfg.Node == NodeContainerd {
		// kubelet's first sync, containerd's CNI readiness.
		timeout = 3 * time.Minute
		c.progress("waiting for Node %s to be Ready", c.cfg.NodeName)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// waitHTTP polls url until it answers 200 or the component exits.
func (c *Cluster) waitHTTP(ctx context.Context, comp *component, url string, tlsConfig *tls.Config) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := comp.running(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s at %s: %w (log: %s)", comp.name, url, err, comp.logPath)
	}
	return nil
}

// Stop stops the node agent (which stops every Pod process) and then the
// control plane in reverse start order, and releases the state directory.
func (c *Cluster) Stop(ctx context.Context) {
	if c.cancel != nil {
		if c.realNode == nil {
			c.progress("stopping node agent and Pods")
		}
		c.cancel()
		if c.agentDone != nil {
			<-c.agentDone
		}
	}
	c.stopRealNode(ctx)
	for i := len(c.components) - 1; i >= 0; i-- {
		c.progress("stopping %s", c.components[i].name)
		c.components[i].stop(ctx)
	}
	c.components = nil
	if c.stopFront != nil {
		c.stopFront()
		c.front.wait()
		c.stopFront = nil
	}
	if c.lock != nil {
		_ = os.Remove(c.lockPath())
		c.lock.Close()
		c.lock = nil
	}
}

func (c *Cluster) lockPath() string { return filepath.Join(c.cfg.StateDir, "lock") }

// acquireLock takes an exclusive flock on the state directory so that a
// second instance refuses to start instead of sharing etcd data.
func (c *Cluster) acquireLock() error {
	f, err := os.OpenFile(c.lockPath(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := io.ReadAll(f)
		f.Close()
		return fmt.Errorf("%w (%s, held by pid %s)", ErrAlreadyRunning, c.cfg.StateDir, string(owner))
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		f.Close()
		return err
	}
	c.lock = f
	return nil
}

// RunningPID reports the pid of a cluster that holds stateDir, if any.
func RunningPID(stateDir string) (string, bool) {
	f, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_RDONLY, 0)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := io.ReadAll(f)
		return string(owner), true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return "", false
}

// Config returns the configuration the cluster runs with, defaults applied.
func (c *Cluster) Config() Config { return c.cfg }

// PIDs returns the process ID of each running control-plane component by
// name (etcd, kube-apiserver, kube-controller-manager, kruntimes-apiserver),
// for benchmarks that read their memory and CPU from /proc.
func (c *Cluster) PIDs() map[string]int {
	pids := map[string]int{}
	for _, comp := range c.components {
		if comp.running() == nil {
			pids[comp.name] = comp.cmd.Process.Pid
		}
	}
	return pids
}

func writeKubeconfig(path string, cfg *rest.Config, clusterName, userName string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[clusterName] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos[userName] = &clientcmdapi.AuthInfo{
		ClientCertificate: cfg.CertFile,
		ClientKey:         cfg.KeyFile,
		Token:             cfg.BearerToken,
	}
	kc.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: userName}
	kc.CurrentContext = clusterName
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*kc, path)
}

func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func insecureTLS() *tls.Config {
	// Only health endpoints of components this process just started.
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec
}

// Err reports the first control-plane process that has exited. Of several
// kruntimes-apiserver replicas only the last one counts: losing one is what
// replicas are for.
func (c *Cluster) Err() error {
	replicasUp := 0
	for _, comp := range c.kruntimesUp {
		if comp.running() == nil {
			replicasUp++
		}
	}
	for _, comp := range c.components {
		if err := comp.running(); err != nil {
			if len(c.kruntimesUp) > 1 && replicasUp > 0 && slices.Contains(c.kruntimesUp, comp) {
				continue
			}
			return err
		}
	}
	return nil
}
