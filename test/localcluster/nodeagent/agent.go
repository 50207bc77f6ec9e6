package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"kruntimes.io/kruntimes/client/tombstone"
)

const (
	// leaseDuration is what the Lease promises; it is renewed every quarter of it.
	leaseDuration = 40 * time.Second
	// nodeStatusPeriod is how often the Ready condition's heartbeat is refreshed.
	nodeStatusPeriod = 30 * time.Second
	// kubeletVersion is reported in the Node's status.
	kubeletVersion = "v1.37.2-kruntimes-local"
)

// Config configures an Agent.
type Config struct {
	// NodeName is the Node this agent registers and runs Pods for.
	NodeName string
	// ClientConfig carries the node's identity (system:node:<name>).
	ClientConfig *rest.Config
	// PodDir holds one directory per Pod: volumes, logs, tokens.
	PodDir string
	// PodLogDir, when set, holds the containers' logs instead of the Pod's
	// directory, as <PodLogDir>/<namespace>_<name>_<uid>/<container>/<restart>.log
	// like the kubelet's /var/log/pods, and keeps them after the Pod is
	// deleted, so that a test suite can read what every process wrote.
	PodLogDir string
	// BinDir holds the binaries container images map to.
	BinDir string
	// PodIPBase is the first address of the /16 block Pod IPs come from.
	PodIPBase net.IP
	// APIServerHost and APIServerPort are given to Pods as
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT.
	APIServerHost string
	APIServerPort int
	// APIServerCA is the CA file Pods use to verify kube-apiserver.
	APIServerCA string
	// KubeletPort is the loopback port of the kubelet API (container logs).
	KubeletPort int
	// ServingCert and ServingKey are the kubelet API's serving pair.
	ServingCert, ServingKey string
	// ClientCAFile verifies clients of the kubelet API.
	ClientCAFile string
	// AllowedClients are the certificate CNs allowed to call the kubelet API.
	AllowedClients []string
}

// Agent runs the Pods bound to one Node.
type Agent struct {
	cfg     Config
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	pods    corelisters.PodLister
	synced  cache.InformerSynced
	ips     *podIPAllocator
	// events are reported as the kubelet reports them, so kubectl describe
	// pod tells the story.
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorderLogger

	mu      sync.Mutex
	runners map[types.UID]*podRunner
	wg      sync.WaitGroup
}

// New returns an Agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" || cfg.ClientConfig == nil || cfg.PodDir == "" || cfg.BinDir == "" || cfg.PodIPBase.To4() == nil {
		return nil, errors.New("nodeagent: NodeName, ClientConfig, PodDir, BinDir and an IPv4 PodIPBase are required")
	}
	client, err := kubernetes.NewForConfig(cfg.ClientConfig)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()
	broadcaster := record.NewBroadcaster()
	a := &Agent{
		broadcaster: broadcaster,
		recorder:    broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: cfg.NodeName}),
		cfg:         cfg,
		client:      client,
		factory:     factory,
		pods:        podInformer.Lister(),
		synced:      podInformer.Informer().HasSynced,
		ips:         newPodIPAllocator(cfg.PodIPBase),
		runners:     map[types.UID]*podRunner{},
	}
	_, err = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.podChanged(obj) },
		UpdateFunc: func(_, obj any) { a.podChanged(obj) },
		DeleteFunc: a.podDeleted,
	})
	return a, err
}

// Run registers the Node and runs Pods until ctx is done; then it stops
// every Pod's processes before returning.
func (a *Agent) Run(ctx context.Context) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithName("nodeagent").WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)

	a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer a.broadcaster.Shutdown()
	if err := a.registerNode(ctx); err != nil {
		return err
	}
	server, err := a.startKubeletAPI(ctx)
	if err != nil {
		return err
	}
	defer server.Close()
	go wait.UntilWithContext(ctx, a.renewLease, leaseDuration/4)
	go wait.UntilWithContext(ctx, a.updateNodeStatus, nodeStatusPeriod)

	a.factory.Start(ctx.Done())
	defer a.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		return ctx.Err()
	}
	logger.Info("Node agent running", "kubeletPort", a.cfg.KubeletPort)
	<-ctx.Done()

	logger.Info("Stopping all Pods")
	a.mu.Lock()
	for _, r := range a.runners {
		r.shutdown(shutdownGrace)
	}
	a.mu.Unlock()
	a.wg.Wait()
	return nil
}

// shutdownGrace bounds how long Pods get to stop when the agent stops.
const shutdownGrace = 5 * time.Second

func (a *Agent) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.runners[pod.UID]
	if !ok {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			if pod.DeletionTimestamp != nil {
				// Nothing runs for it here; finish the deletion.
				go a.finalizeDeletion(context.Background(), pod)
			}
			return
		}
		r = newPodRunner(a, pod)
		a.runners[pod.UID] = r
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			r.run()
			a.mu.Lock()
			delete(a.runners, pod.UID)
			a.mu.Unlock()
		}()
		return
	}
	r.observe(pod)
}

func (a *Agent) podDeleted(obj any) {
	pod, ok := tombstone.As[*corev1.Pod](obj)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.runners[pod.UID]; ok {
		// Deleted without grace (e.g. --force): stop at once and clean up.
		r.requestStop(0, true)
	}
}

// finalizeDeletion removes a Pod whose processes are gone, as the kubelet
// does once a Pod's containers have stopped.
func (a *Agent) finalizeDeletion(ctx context.Context, pod *corev1.Pod) {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Error(err, "Deleting stopped Pod", "pod", klog.KObj(pod))
	}
}

func (a *Agent) registerNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.cfg.NodeName,
			Labels: map[string]string{
				corev1.LabelHostname:   a.cfg.NodeName,
				corev1.LabelOSStable:   runtime.GOOS,
				corev1.LabelArchStable: runtime.GOARCH,
			},
		},
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, nil
		}
		klog.FromContext(ctx).V(2).Info("Registering Node failed; retrying", "err", err)
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("registering Node %s: %w", a.cfg.NodeName, err)
	}
	a.updateNodeStatus(ctx)
	a.renewLease(ctx)
	return nil
}

func (a *Agent) updateNodeStatus(ctx context.Context) {
	logger := klog.FromContext(ctx)
	node, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		logger.Error(err, "Reading own Node")
		return
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(totalMemory(), resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(110, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	node.Status.Capacity = capacity
	node.Status.Allocatable = capacity
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: a.cfg.NodeName},
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(a.cfg.KubeletPort)
	node.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:          kubeletVersion,
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
		ContainerRuntimeVersion: "kruntimes-local://processes",
		KernelVersion:           kernelRelease(),
		OSImage:                 "local processes",
	}
	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "local node agent is posting ready status",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}
	conditions := []corev1.NodeCondition{ready}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		conditions = append(conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse,
			Reason: "KubeletHasSufficient" + string(t)[:len(t)-len("Pressure")], LastHeartbeatTime: now, LastTransitionTime: now})
	}
	for i := range conditions {
		for _, old := range node.Status.Conditions {
			if old.Type == conditions[i].Type && old.Status == conditions[i].Status {
				conditions[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	node.Status.Conditions = conditions
	if _, err := a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		logger.Error(err, "Updating Node status")
	}
}

func (a *Agent) renewLease(ctx context.Context) {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node, nerr := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if nerr != nil {
			klog.FromContext(ctx).Error(nerr, "Reading own Node for the Lease owner")
			return
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: a.cfg.NodeName, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.cfg.NodeName),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration.Seconds())),
				RenewTime:            &now,
			},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	case err == nil:
		lease.Spec.RenewTime = &now
		lease.Spec.HolderIdentity = ptr.To(a.cfg.NodeName)
		lease.Spec.LeaseDurationSeconds = ptr.To(int32(leaseDuration.Seconds()))
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Renewing node Lease")
	}
}

func totalMemory() int64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil {
		return 8 << 30
	}
	return int64(info.Totalram) * int64(info.Unit)
}

func kernelRelease() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "unknown"
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
