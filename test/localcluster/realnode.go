package localcluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/proto/pki"
	"kruntimes.io/kruntimes/test/localcluster/localpath"
	"kruntimes.io/kruntimes/test/localcluster/realnode"
)

// Pairs of the real node.
const (
	pairKubeProxy = "kube-proxy"
)

// kubeletServingPair is the file stem of the real node's kubelet serving
// pair, which names the bridge address kube-apiserver dials.
func kubeletServingPair(node string) string { return "node-" + node + "-kubelet-serving" }

// realNode is the real node's running parts, stopped in reverse order.
type realNode struct {
	node       *realnode.Node
	registry   *realnode.Registry
	release    func()
	components []*component
	// apiServerForward carries the kubernetes Service's endpoint, the node
	// IP, to kube-apiserver on loopback.
	apiServerForward     *serviceFront
	stopAPIServerForward context.CancelFunc
	// imageTag is the release tag (not latest) of the kruntimes-apiserver
	// image pushed from _output/images, "" when there is none.
	imageTag string
}

// SandboxImageRepository is the pause image's repository in the loopback
// registry.
const SandboxImageRepository = "kruntimes/pause"

// RegistryHost is the loopback registry of a real-node cluster (host:port,
// plain HTTP), "" for the process-Pod node.
func (c *Cluster) RegistryHost() string {
	if c.realNode == nil || c.realNode.registry == nil {
		return ""
	}
	return c.realNode.registry.Host
}

// RealNode is the real node of a NodeContainerd cluster, nil otherwise.
func (c *Cluster) RealNode() *realnode.Node {
	if c.realNode == nil {
		return nil
	}
	return c.realNode.node
}

// startRealNode brings up the real node: the loopback registry with the
// pause image, the bridge, containerd, kubelet, kube-scheduler and
// kube-proxy, and the local-path provisioner, which runs until agentCtx
// ends.
func (c *Cluster) startRealNode(ctx, agentCtx context.Context, logDir string, adminClient kubernetes.Interface) error {
	logger := klog.FromContext(ctx)
	cidr := c.podCIDR
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	kubeletPort, kubeletHealthz, proxyHealthz, proxyMetrics, schedulerPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	stateDir := filepath.Join(c.cfg.StateDir, "node")
	binDir := filepath.Join(c.cfg.RepoRoot, "bin")
	cfg := realnode.Config{
		StateDir:             stateDir,
		BinDir:               binDir,
		CNIBinDir:            "/usr/lib/cni",
		NodeName:             c.cfg.NodeName,
		PodCIDR:              cidr,
		ServiceCIDR:          serviceCIDR,
		ClusterDomain:        "cluster.local",
		KubeletKubeconfig:    filepath.Join(c.cfg.StateDir, "kubelet.kubeconfig"),
		KubeProxyKubeconfig:  filepath.Join(c.cfg.StateDir, "kube-proxy.kubeconfig"),
		ClientCAFile:         c.pki.clusterCA(),
		ServingCert:          c.pki.cert(kubeletServingPair(c.cfg.NodeName)),
		ServingKey:           c.pki.key(kubeletServingPair(c.cfg.NodeName)),
		KubeletPort:          kubeletPort,
		KubeletHealthzPort:   kubeletHealthz,
		KubeProxyHealthzPort: proxyHealthz,
		KubeProxyMetrics:     proxyMetrics,
		Mirrored:             []string{ImageHost},
	}
	node, err := realnode.New(cfg)
	if err != nil {
		return err
	}
	if err := node.CheckBinaries("kubelet", "kube-proxy", "kube-scheduler"); err != nil {
		return err
	}
	release, err := node.Lock()
	if err != nil {
		return err
	}
	rn := &realNode{node: node, release: release}
	c.realNode = rn

	c.progress("loopback registry (pause image built from ./test/localcluster/cmd/pause)")
	if rn.registry, err = realnode.StartRegistry(ctx, node.RegistryDir()); err != nil {
		return err
	}
	pause := filepath.Join(binDir, "pause")
	if err := realnode.BuildStatic(ctx, c.cfg.RepoRoot, "./test/localcluster/cmd/pause", pause); err != nil {
		return err
	}
	sandboxImage, err := rn.registry.PushBinary(ctx, SandboxImageRepository, "local", pause, "65535:65535")
	if err != nil {
		return err
	}
	cfg.Registry = rn.registry.Host
	if c.cfg.Kruntimes != KruntimesDisabled {
		if err := c.pushImages(ctx, rn.registry); err != nil {
			return err
		}
	}
	cfg.SandboxImage = sandboxImage
	if node, err = realnode.New(cfg); err != nil {
		return err
	}
	rn.node = node

	if err := c.issueRealNodePKI(node.NodeIP()); err != nil {
		return err
	}
	for path, pair := range map[string]string{
		cfg.KubeletKubeconfig:   nodePair(c.cfg.NodeName, "client"),
		cfg.KubeProxyKubeconfig: pairKubeProxy,
		c.schedulerKubeconfig(): pairScheduler,
	} {
		if err := writeKubeconfig(path, c.clientConfig(pair), "kruntimes-local", pair); err != nil {
			return err
		}
	}

	c.progress("real node: removing what an earlier run left, bridge %s (%s, node IP %s)", node.BridgeName(), cidr, node.NodeIP())
	if err := node.Prepare(ctx); err != nil {
		return err
	}

	if err := c.startAPIServerForward(ctx, node.NodeIP()); err != nil {
		return err
	}
	if err := bindClusterAdmins(ctx, adminClient); err != nil {
		return err
	}

	c.progress("containerd (socket %s, registry %s)", node.ContainerdSocket(), cfg.Registry)
	containerd, err := rn.start(ctx, logDir, "containerd", filepath.Join(binDir, "containerd"), node.ContainerdEnv(), node.ContainerdArgs()...)
	if err != nil {
		return err
	}
	if err := waitSocket(ctx, containerd, node.ContainerdSocket()); err != nil {
		return err
	}

	c.progress("kubelet (API on https://%s:%d, root %s)", node.NodeIP(), kubeletPort, node.KubeletRootDir())
	kubelet, err := rn.start(ctx, logDir, "kubelet", filepath.Join(binDir, "kubelet"), nil, node.KubeletArgs()...)
	if err != nil {
		return err
	}

	c.progress("kube-scheduler (secure port 127.0.0.1:%d)", schedulerPort)
	scheduler, err := rn.start(ctx, logDir, "kube-scheduler", filepath.Join(binDir, "kube-scheduler"), nil,
		"--kubeconfig="+c.schedulerKubeconfig(),
		"--authentication-kubeconfig="+c.schedulerKubeconfig(),
		"--authorization-kubeconfig="+c.schedulerKubeconfig(),
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(schedulerPort),
		"--leader-elect=false",
	)
	if err != nil {
		return err
	}

	c.progress("kube-proxy (iptables mode)")
	if _, err := rn.start(ctx, logDir, "kube-proxy", filepath.Join(binDir, "kube-proxy"), nil, node.KubeProxyArgs()...); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, kubelet, fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeletHealthz), nil); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, scheduler, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort), insecureTLS()); err != nil {
		return err
	}

	provisioner, err := localpath.New(adminClient, c.VolumeRoot())
	if err != nil {
		return err
	}
	c.progress("local-path provisioner (default StorageClass %s, volumes in %s)", localpath.StorageClassName, c.VolumeRoot())
	c.agentDone = make(chan struct{})
	go func() {
		defer close(c.agentDone)
		var helpers sync.WaitGroup
		helpers.Go(func() {
			if err := provisioner.Run(agentCtx); err != nil && agentCtx.Err() == nil {
				logger.Error(err, "Local-path provisioner stopped")
			}
		})
		helpers.Wait()
	}()
	return nil
}

// start runs one of the node's components, stopped by stopRealNode.
func (rn *realNode) start(ctx context.Context, logDir, name, binary string, env []string, args ...string) (*component, error) {
	comp, err := startComponentEnv(ctx, logDir, name, binary, env, args...)
	if err != nil {
		return nil, err
	}
	rn.components = append(rn.components, comp)
	return comp, nil
}

// stopRealNode stops kube-proxy, kube-scheduler, kubelet and containerd in
// that order, removes everything the node created (containers, mounts,
// network namespaces, the bridge, iptables rules, cgroups) and stops the
// registry.
func (c *Cluster) stopRealNode(ctx context.Context) {
	rn := c.realNode
	if rn == nil {
		return
	}
	for i := len(rn.components) - 1; i >= 0; i-- {
		c.progress("stopping %s", rn.components[i].name)
		rn.components[i].stop(ctx)
	}
	rn.components = nil
	if rn.stopAPIServerForward != nil {
		rn.stopAPIServerForward()
		rn.apiServerForward.wait()
	}
	c.progress("removing the node's containers, mounts, network namespaces, bridge, iptables rules and cgroups")
	if err := rn.node.CleanUp(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Cleaning up the real node")
	}
	rn.registry.Stop()
	if rn.release != nil {
		rn.release()
	}
	c.realNode = nil
}

// startAPIServerForward serves kube-apiserver's port on the node IP too, the
// kubernetes Service's endpoint (--advertise-address), so that Pods reach
// it: kube-apiserver binds one address, loopback, where every host client
// of the cluster dials it. TLS passes through.
func (c *Cluster) startAPIServerForward(ctx context.Context, nodeIP net.IP) error {
	u, err := url.Parse(c.APIServerURL)
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(c.pki.clusterCA())
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	address := net.JoinHostPort(nodeIP.String(), u.Port())
	c.progress("kube-apiserver for Pods: %s (the kubernetes Service's endpoint) forwarded to %s", address, u.Host)
	fwdCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	front, err := startServiceFront(fwdCtx, address, []string{u.Host}, tlsWithRoots(pool))
	if err != nil {
		cancel()
		return fmt.Errorf("serving kube-apiserver on the node IP %s: %w", address, err)
	}
	c.realNode.apiServerForward, c.realNode.stopAPIServerForward = front, cancel
	return nil
}

// ImageHost is the registry host of the images make images builds; the real
// node pulls it from the loopback registry.
const ImageHost = "kruntimes.io"

// pushImages pushes every image make images and make image-python left in
// _output/images to the loopback registry, so that kruntimes.io/<image>:<tag>
// pulls as on a cluster that can reach its registry.
func (c *Cluster) pushImages(ctx context.Context, registry *realnode.Registry) error {
	dir := filepath.Join(c.cfg.RepoRoot, "_output", "images")
	layouts, _ := filepath.Glob(filepath.Join(dir, "*", "index.json"))
	if len(layouts) == 0 {
		c.progress("no images in %s: Runtime Pods need make images (and make image-python for bash and python)", dir)
		return nil
	}
	var pushed []string
	for _, index := range layouts {
		refs, err := registry.PushLayout(ctx, filepath.Dir(index), ImageHost)
		if err != nil {
			return err
		}
		pushed = append(pushed, refs...)
		for _, ref := range refs {
			if tag, ok := strings.CutPrefix(ref, ImageHost+"/kruntimes-apiserver:"); ok && tag != "latest" {
				c.realNode.imageTag = tag
			}
		}
	}
	c.progress("images from %s in the loopback registry: %s", dir, strings.Join(pushed, ", "))
	return nil
}

// bindClusterAdmins binds cluster-admin to the group kubeadm:cluster-admins,
// as kubeadm init does: kube-apiserver's kubelet client pair is in that
// group, and kubelet authorizes its API (logs, exec, port-forward) with a
// SubjectAccessReview.
func bindClusterAdmins(ctx context.Context, client kubernetes.Interface) error {
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:cluster-admins"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "kubeadm:cluster-admins"}},
	}
	_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding cluster-admin to kube-apiserver's kubelet client: %w", err)
	}
	return nil
}

func (c *Cluster) schedulerKubeconfig() string {
	return filepath.Join(c.cfg.StateDir, "scheduler.kubeconfig")
}

// issueRealNodePKI issues kubelet's serving pair for the node IP and
// kube-proxy's client pair (system:kube-proxy, bound to
// system:node-proxier), at every start: the node IP follows the Pod CIDR.
func (c *Cluster) issueRealNodePKI(nodeIP net.IP) error {
	ca, err := c.loadClusterCA()
	if err != nil {
		return err
	}
	serving := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	pair := kubeletServingPair(c.cfg.NodeName)
	if err := issueFiles(ca, c.pki.cert(pair), c.pki.key(pair), pki.Leaf{
		CommonName: "system:node:" + c.cfg.NodeName, Usages: serving,
		IPs: []net.IP{nodeIP, net.ParseIP("127.0.0.1")}, DNSNames: []string{c.cfg.NodeName},
	}); err != nil {
		return err
	}
	return issueFiles(ca, c.pki.cert(pairKubeProxy), c.pki.key(pairKubeProxy), pki.Leaf{
		CommonName: "system:kube-proxy", Usages: client,
	})
}

// waitSocket waits until a unix socket accepts connections.
func waitSocket(ctx context.Context, comp *component, path string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if err := comp.running(); err != nil {
			return false, err
		}
		if _, err := os.Stat(path); err != nil {
			return false, nil
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s's socket %s: %w (log: %s)", comp.name, path, err, comp.logPath)
	}
	return nil
}

// PushBinaryImage pushes an image of one static binary (its entrypoint) to
// a real-node cluster's loopback registry and returns its reference.
func (c *Cluster) PushBinaryImage(ctx context.Context, repository, tag, binary, user string) (string, error) {
	if c.realNode == nil || c.realNode.registry == nil {
		return "", fmt.Errorf("the cluster has no loopback registry: it is not a real-node cluster")
	}
	return c.realNode.registry.PushBinary(ctx, repository, tag, binary, user)
}
