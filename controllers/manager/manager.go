package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	kruntimesscheme "kruntimes.io/kruntimes/client/clientset/versioned/scheme"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	"kruntimes.io/kruntimes/controllers/gc"
	"kruntimes.io/kruntimes/controllers/recovery"
	runtimecontroller "kruntimes.io/kruntimes/controllers/runtime"
	"kruntimes.io/kruntimes/controllers/scheduler"
)

// Defaults of the leader election: the Lease every replica competes for,
// and client-go's usual timing.
const (
	DefaultLeaseNamespace = "kruntimes-system"
	DefaultLeaseName      = "kruntimes-controllers"
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
)

// userAgent names the controllers in API server logs and audit.
const userAgent = "kruntimes-controllers"

// LeaderElection says whether and how replicas elect the one that runs the
// controllers.
type LeaderElection struct {
	// Enabled turns election on; off, this process runs the controllers
	// unconditionally, which is safe only with a single replica.
	Enabled bool
	// Namespace and Name of the coordination Lease.
	Namespace, Name string
	// Identity of this replica; empty means <hostname>_<random UUID>.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's
	// leaderelection.LeaderElectionConfig.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Validate checks the Lease's name and timings when election is on; it
// changes nothing, so flags can be checked at startup with it.
func (le LeaderElection) Validate() error {
	if !le.Enabled {
		return nil
	}
	if le.Namespace == "" || le.Name == "" {
		return errors.New("leader election needs the namespace and name of its Lease (--leader-elect-resource-namespace, --leader-elect-resource-name)")
	}
	if le.LeaseDuration <= le.RenewDeadline || le.RenewDeadline <= le.RetryPeriod || le.RetryPeriod <= 0 {
		return fmt.Errorf("leader election needs --leader-elect-lease-duration (%s) > --leader-elect-renew-deadline (%s) > --leader-elect-retry-period (%s) > 0",
			le.LeaseDuration, le.RenewDeadline, le.RetryPeriod)
	}
	return nil
}

// Config is what the manager needs.
type Config struct {
	// KubeConfig reaches the cluster: Deployments, RBAC, Pods, Leases,
	// events.
	KubeConfig *rest.Config
	// KruntimesConfig reaches the kruntimes.io API: through kube-apiserver's
	// aggregation, or the API server's own loopback when hosted there.
	KruntimesConfig *rest.Config
	LeaderElection  LeaderElection
	// Workers per controller.
	RuntimeWorkers, SchedulerWorkers, RecoveryWorkers, GCWorkers int
	// HeartbeatGracePeriod is how long a Runtime Pod's runtimed heartbeat
	// may stay stale, past its Lease, before recovery deletes the Pod and
	// moves its Runs.
	HeartbeatGracePeriod time.Duration
	// RuntimedTLS, when set, gives Runtime Pods the invoke hop's TLS.
	RuntimedTLS *runtimecontroller.RuntimedTLS
	// RuntimedKruntimesAPI, when set, is where runtimed reaches the
	// kruntimes.io API directly.
	RuntimedKruntimesAPI *runtimecontroller.KruntimesAPI
}

// NewConfig returns a Config with leader election on and default workers;
// the client configs are left to the caller.
func NewConfig() Config {
	return Config{
		LeaderElection: LeaderElection{
			Enabled:       true,
			Namespace:     DefaultLeaseNamespace,
			Name:          DefaultLeaseName,
			LeaseDuration: DefaultLeaseDuration,
			RenewDeadline: DefaultRenewDeadline,
			RetryPeriod:   DefaultRetryPeriod,
		},
		RuntimeWorkers:       2,
		SchedulerWorkers:     4,
		RecoveryWorkers:      4,
		GCWorkers:            2,
		HeartbeatGracePeriod: recovery.DefaultHeartbeatGracePeriod,
	}
}

// Manager runs the controllers while it leads.
type Manager struct {
	cfg       Config
	kube      kubernetes.Interface
	kruntimes versioned.Interface
	// leaderElection and events are clients of their own, each with its
	// own client-side rate limiter, as kube-controller-manager and
	// kube-scheduler build them: a burst of controller writes must not hold
	// a Lease renewal past its deadline, nor starve the Event sink until
	// its queue drops what it was given.
	leaderElection kubernetes.Interface
	events         kubernetes.Interface
}

// New checks cfg and builds the clients.
func New(cfg Config) (*Manager, error) {
	if cfg.KubeConfig == nil {
		return nil, errors.New("the controllers need a client config for the cluster's API (--kubeconfig, or in-cluster config)")
	}
	if cfg.KruntimesConfig == nil {
		return nil, errors.New("the controllers need a client config for the kruntimes.io API")
	}
	if cfg.HeartbeatGracePeriod < 0 {
		return nil, fmt.Errorf("the heartbeat grace period must not be negative, got %s", cfg.HeartbeatGracePeriod)
	}
	le := &cfg.LeaderElection
	if err := le.Validate(); err != nil {
		return nil, err
	}
	if le.Enabled {
		if le.Identity == "" {
			host, err := os.Hostname()
			if err != nil {
				return nil, fmt.Errorf("naming this replica for leader election: %w", err)
			}
			le.Identity = host + "_" + uuid.NewString()
		}
	}
	kube, err := kubernetes.NewForConfig(clientConfig(cfg.KubeConfig, userAgent, 20, 30))
	if err != nil {
		return nil, fmt.Errorf("building the cluster client: %w", err)
	}
	leaderElection, err := kubernetes.NewForConfig(clientConfig(cfg.KubeConfig, userAgent+"-leader-election", 5, 10))
	if err != nil {
		return nil, fmt.Errorf("building the leader election client: %w", err)
	}
	events, err := kubernetes.NewForConfig(clientConfig(cfg.KubeConfig, userAgent+"-events", 20, 30))
	if err != nil {
		return nil, fmt.Errorf("building the Event client: %w", err)
	}
	// Binding is one status write per Run, so the kruntimes client gets far
	// more room than client-go's default of 5 QPS or the loopback's 50: the
	// scheduler's rate is the cluster's rate of starting Runs.
	kr, err := versioned.NewForConfig(clientConfig(cfg.KruntimesConfig, userAgent, 1000, 2000))
	if err != nil {
		return nil, fmt.Errorf("building the kruntimes client: %w", err)
	}
	return &Manager{cfg: cfg, kube: kube, kruntimes: kr, leaderElection: leaderElection, events: events}, nil
}

// clientConfig names c's clients agent, raises their client-side rate
// limit to at least qps and burst, and makes them prefer protobuf.
func clientConfig(c *rest.Config, agent string, qps float32, burst int) *rest.Config {
	c = rest.AddUserAgent(rest.CopyConfig(c), agent)
	// Protobuf on the wire, as Kubernetes' own controllers: a tenth of
	// JSON's decode cost, on the scheduler's hot path.
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.QPS < qps {
		c.QPS = qps
	}
	if c.Burst < burst {
		c.Burst = burst
	}
	return c
}

// Run runs the controllers until ctx is done. With leader election it runs
// them only while it holds the Lease; when it loses the Lease it stops them
// completely before campaigning again, so two replicas never schedule at
// once. It releases the Lease when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("controllers")
	ctx = klog.NewContext(ctx, logger)
	le := m.cfg.LeaderElection
	if !le.Enabled {
		return m.runControllers(ctx)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     m.leaderElection.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	for {
		leading := make(chan context.Context, 1)
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   le.LeaseDuration,
			RenewDeadline:   le.RenewDeadline,
			RetryPeriod:     le.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            le.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(termCtx context.Context) { leading <- termCtx },
				OnStoppedLeading: func() { logger.Info("Stopped leading", "lease", klog.KRef(le.Namespace, le.Name)) },
				OnNewLeader: func(identity string) {
					logger.V(2).Info("Controllers leader", "identity", identity, "lease", klog.KRef(le.Namespace, le.Name))
				},
			},
		})
		if err != nil {
			return fmt.Errorf("setting up leader election: %w", err)
		}
		elected := make(chan struct{})
		go func() {
			defer close(elected)
			elector.Run(ctx)
		}()
		logger.Info("Campaigning for the controllers' Lease", "lease", klog.KRef(le.Namespace, le.Name), "identity", le.Identity)
		select {
		case termCtx := <-leading:
			logger.Info("Leading; starting controllers")
			if err := m.runControllers(termCtx); err != nil {
				logger.Error(err, "Controllers failed")
			}
			<-elected
		case <-elected:
		}
		if ctx.Err() != nil {
			return nil
		}
		logger.Info("Lost the controllers' Lease; campaigning again")
	}
}

// runControllers starts fresh informers and the controllers and returns
// once ctx is done and all of them have stopped.
func (m *Manager) runControllers(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	kruntimesInformers, labelled, leases := newInformerFactories(m.kube, m.kruntimes)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: m.events.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := kruntimesscheme.AddToScheme(scheme); err != nil {
		return err
	}
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: userAgent})

	kr := kruntimesInformers.Kruntimes().V1alpha1()
	runtimes, err := runtimecontroller.New(klog.NewContext(ctx, logger.WithName("runtime")),
		kr.Runtimes(), labelled.Apps().V1().Deployments(), labelled.Core().V1().ServiceAccounts(),
		labelled.Rbac().V1().Roles(), labelled.Rbac().V1().RoleBindings(), labelled.Policy().V1().PodDisruptionBudgets(),
		m.kube, m.kruntimes, recorder, m.runtimeOptions()...)
	if err != nil {
		return err
	}
	sched, err := scheduler.New(klog.NewContext(ctx, logger.WithName("scheduler")),
		kr.Runs(), kr.Runtimes(), labelled.Core().V1().Pods(), labelled.Apps().V1().ReplicaSets(), labelled.Apps().V1().Deployments(),
		leases.Coordination().V1().Leases(), m.kruntimes, recorder)
	if err != nil {
		return err
	}
	// Recovery shares the scheduler's informers: a Run it sends back to
	// Pending reaches the scheduler through the same Run informer, and both
	// judge a Pod from the same Pod and Lease caches.
	recoverer, err := recovery.New(klog.NewContext(ctx, logger.WithName("recovery")),
		kr.Runs(), labelled.Core().V1().Pods(), leases.Coordination().V1().Leases(), m.kube, m.kruntimes, recorder,
		recovery.WithHeartbeatGracePeriod(m.cfg.HeartbeatGracePeriod))
	if err != nil {
		return err
	}
	ttl, err := gc.New(klog.NewContext(ctx, logger.WithName("gc")), kr.Runs(), m.kruntimes)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	wg.Go(func() { runtimes.Run(klog.NewContext(ctx, logger.WithName("runtime")), m.cfg.RuntimeWorkers) })
	wg.Go(func() { sched.Run(klog.NewContext(ctx, logger.WithName("scheduler")), m.cfg.SchedulerWorkers) })
	wg.Go(func() { recoverer.Run(klog.NewContext(ctx, logger.WithName("recovery")), m.cfg.RecoveryWorkers) })
	wg.Go(func() { ttl.Run(klog.NewContext(ctx, logger.WithName("gc")), m.cfg.GCWorkers) })
	kruntimesInformers.Start(ctx.Done())
	labelled.Start(ctx.Done())
	leases.Start(ctx.Done())
	<-ctx.Done()
	wg.Wait()
	kruntimesInformers.Shutdown()
	labelled.Shutdown()
	leases.Shutdown()
	return nil
}

// newInformerFactories returns the informer factories all controllers
// share, so that each kind is listed, watched and held in memory once.
func newInformerFactories(kube kubernetes.Interface, kr versioned.Interface) (externalversions.SharedInformerFactory, kubeinformers.SharedInformerFactory, kubeinformers.SharedInformerFactory) {
	kruntimesInformers := externalversions.NewSharedInformerFactoryWithOptions(kr, 0,
		externalversions.WithTransform(slimForControllers))
	// Everything the runtime controller creates, and every Runtime Pod,
	// carries the kruntimes.io/runtime label: watch only those.
	labelled := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = lifecycle.LabelRuntime }),
		kubeinformers.WithTransform(dropManagedFields))
	// Heartbeat Leases carry no label; the scheduler and recovery read them
	// by name.
	leases := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithTransform(dropManagedFields))
	return kruntimesInformers, labelled, leases
}

// dropManagedFields is the informers' transform, as in
// kube-controller-manager: no controller reads managedFields, which are
// about a third of a Run in memory, and an update that omits them keeps the
// stored ones.
func dropManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// slimForControllers is the kruntimes informers' transform: no managedFields,
// and of a Run nothing the controllers never read — its code, env and
// entrypoint, up to 256 KiB of source each. A status write from such a copy
// keeps the stored spec (the status strategy restores it), and recovery
// removes its finalizer with a patch, so no controller writes a slim spec.
func slimForControllers(obj any) (any, error) {
	if run, ok := obj.(*v1alpha1.Run); ok {
		run.Spec.Source = v1alpha1.RunSource{}
		run.Spec.Env = nil
		if run.Spec.Mode.Task != nil {
			run.Spec.Mode.Task = &v1alpha1.TaskMode{}
		}
		if run.Spec.Mode.Function != nil {
			run.Spec.Mode.Function.Handler = ""
		}
	}
	return dropManagedFields(obj)
}

func (m *Manager) runtimeOptions() []runtimecontroller.Option {
	var opts []runtimecontroller.Option
	if m.cfg.RuntimedTLS != nil {
		opts = append(opts, runtimecontroller.WithRuntimedTLS(*m.cfg.RuntimedTLS))
	}
	if m.cfg.RuntimedKruntimesAPI != nil {
		opts = append(opts, runtimecontroller.WithKruntimesAPI(*m.cfg.RuntimedKruntimesAPI))
	}
	return opts
}
