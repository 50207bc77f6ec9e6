package functions

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	kruntimesclient "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	runinformers "kruntimes.io/kruntimes/client/informers/externalversions/kruntimes/v1alpha1"
	runlisters "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/health"
	"kruntimes.io/kruntimes/runtimed/runstatus"
	"kruntimes.io/kruntimes/runtimed/slots"
	"kruntimes.io/kruntimes/runtimed/workspace"
)

// DefaultWatchInterval is how often one ListFunctions call checks every
// registration's health and idle clock: a lost registration is noticed
// within it, and an idle deadline is met within it.
const DefaultWatchInterval = time.Second

// Config wires a Controller.
type Config struct {
	// Runs writes Run status and the registration-cleanup finalizer.
	Runs kruntimesclient.RunsGetter
	// Informer must list and watch only the Runs of Pod.Namespace with
	// fieldSelector status.assignedPod=Pod.Name,status.assignedPodUID=Pod.UID.
	Informer runinformers.RunInformer
	// RuntimeServer is the local Runtime Server's FunctionRuntime service.
	RuntimeServer runtimev1.FunctionRuntimeClient
	// Workspace is the shared workspace root.
	Workspace workspace.Root
	Pod       runtimepod.Pod
	// Slots is the Pod's capacity, shared with the task controller.
	Slots *slots.Table
	// WatchInterval defaults to DefaultWatchInterval.
	WatchInterval time.Duration
	Clock         clock.WithTicker
	// Recorder records Events on Runs; none when nil.
	Recorder record.EventRecorder
	// Heartbeat, when set, fences invokes: while it reports the Pod's
	// heartbeat Lease lapsed, Admit refuses every invocation (not started),
	// since recovery may be about to move this Pod's functions elsewhere.
	Heartbeat interface{ Fresh() error }
	// Secrets reads the Secrets env[].valueFrom.secretKeyRef names, with
	// runtimed's own identity; a Run that names one fails to register
	// when nil.
	Secrets corev1client.SecretsGetter
}

// Controller registers the function Runs assigned to its Pod.
type Controller struct {
	runs          kruntimesclient.RunsGetter
	lister        runlisters.RunLister
	synced        cache.InformerSynced
	runtimeServer runtimev1.FunctionRuntimeClient
	workspace     workspace.Root
	pod           runtimepod.Pod
	slots         *slots.Table
	watchInterval time.Duration
	clock         clock.WithTicker
	recorder      record.EventRecorder
	heartbeat     interface{ Fresh() error }
	secrets       corev1client.SecretsGetter
	queue         workqueue.TypedRateLimitingInterface[string]
	workers       *health.Loop
	watching      *health.Loop

	// stopWork, closed by Relocate, makes Run stop its workers and the
	// registration watch; workDone closes once they returned.
	stopWork     chan struct{}
	stopWorkOnce sync.Once
	workDone     chan struct{}
	running      atomic.Bool

	mu sync.RWMutex
	// regs holds, by Run key, every function Run this Pod claimed or
	// adopted and has not released; each holds a slot.
	regs map[string]*registration
	// byUID indexes regs for Admit.
	byUID map[types.UID]*registration
	// ended remembers, by Run key, the attempt this Pod just ended or sent
	// back to Pending, so a stale informer copy still showing it active is
	// not taken for a Run to register.
	ended map[string]endedAttempt
	// view is the Runtime Server's registrations as last listed.
	view serverView
}

type endedAttempt struct {
	uid     types.UID
	attempt int32
}

// serverView is one ListFunctions answer.
type serverView struct {
	// listedAt is when the call was made; zero before the first answer.
	listedAt      time.Time
	registrations map[types.UID]*runtimev1.RegistrationStatus
}

// New returns a Controller; call Run to start it.
func New(cfg Config) (*Controller, error) {
	if cfg.Slots == nil {
		return nil, fmt.Errorf("a function controller needs the Pod's slot table")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Recorder == nil {
		// A FakeRecorder without a channel drops every event.
		cfg.Recorder = &record.FakeRecorder{}
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = DefaultWatchInterval
	}
	c := &Controller{
		runs:          cfg.Runs,
		lister:        cfg.Informer.Lister(),
		synced:        cfg.Informer.Informer().HasSynced,
		runtimeServer: cfg.RuntimeServer,
		workspace:     cfg.Workspace,
		pod:           cfg.Pod,
		slots:         cfg.Slots,
		watchInterval: cfg.WatchInterval,
		clock:         cfg.Clock,
		recorder:      cfg.Recorder,
		heartbeat:     cfg.Heartbeat,
		secrets:       cfg.Secrets,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "runtimed_functions", Clock: cfg.Clock}),
		regs:     map[string]*registration{},
		byUID:    map[types.UID]*registration{},
		ended:    map[string]endedAttempt{},
		stopWork: make(chan struct{}),
		workDone: make(chan struct{}),
	}
	_, err := cfg.Informer.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: runstatus.IsFunction,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
			// Deleted, or no longer assigned here: its registration must go.
			DeleteFunc: c.enqueue,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("add Run event handler: %w", err)
	}
	c.workers = health.NewLoop("function-workers", workerStallBound, c.queue.Len, cfg.Clock)
	c.watching = health.NewLoop("registration-watch", watchStallBound, nil, cfg.Clock)
	cfg.Slots.OnRelease(c.enqueueWaitingRuns)
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// enqueueWaitingRuns re-queues the Scheduled function Runs of this Pod after
// a slot freed.
func (c *Controller) enqueueWaitingRuns() {
	runs, err := c.lister.Runs(c.pod.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, run := range runs {
		if run.Spec.Mode.Function != nil && run.Status.Phase == lifecycle.Scheduled && run.Status.AssignedPodUID == c.pod.UID {
			c.enqueue(run)
		}
	}
}

// Run processes Runs with workers goroutines until ctx ends. Before the
// first sync it lists the Runtime Server's registrations, so that a
// restarted runtimed adopts the live ones and unregisters what no Run holds.
// Relocate stops it early: the workers return, and the Runs it holds are
// given back.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	c.running.Store(true)
	defer close(c.workDone)
	defer c.queue.ShutDown()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.stopWork:
			cancel()
		case <-ctx.Done():
		}
	}()
	logger := klog.FromContext(ctx)
	logger.Info("Starting function controller", "pod", klog.KRef(c.pod.Namespace, c.pod.Name))
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	c.sweepOrphans(ctx)
	var wg sync.WaitGroup
	c.watching.Start()
	c.workers.Start()
	wg.Go(func() { c.watchRegistrations(ctx) })
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	logger.Info("Stopping function controller")
	c.queue.ShutDown()
	wg.Wait()
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	c.workers.Progress()
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	if err == nil {
		c.queue.Forget(key)
		return true
	}
	if apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(2).Info("Run changed while syncing; retrying with a fresh copy", "key", key)
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing function Run failed; will retry", "key", key)
	}
	c.queue.AddRateLimited(key)
	return true
}

// sync reconciles one function Run with this Pod's registration of it. It
// decides from the Run as observed and the local record, so running it
// twice is harmless: every write carries the copy's resourceVersion, and
// every Runtime Server call is idempotent.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // never valid; retrying does not help
	}
	reg := c.local(key)
	run, err := c.lister.Runs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetEnded(key)
		if reg != nil {
			reg.logger.Info("Run deleted or no longer assigned here; releasing its registration")
			return c.release(ctx, reg, drainOnDelete)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if run.Spec.Mode.Function == nil {
		return nil
	}
	mine := run.Status.AssignedPodUID == c.pod.UID
	if reg != nil && (reg.uid != run.UID || !mine || run.Status.Attempt > c.attemptOf(reg)) {
		// Another incarnation of the name, another Pod's assignment, or an
		// attempt someone else moved on: this registration must not serve.
		reg.logger.Info("Run no longer holds this registration; releasing it", "phase", run.Status.Phase, "attempt", run.Status.Attempt)
		if err := c.release(ctx, reg, cancelInFlight); err != nil {
			return err
		}
		reg = nil
	}
	if !mine {
		return nil
	}
	if reg != nil && run.Status.Attempt < c.attemptOf(reg) {
		return nil // a stale copy from before our own write; its update follows
	}
	if run.DeletionTimestamp != nil || lifecycle.IsTerminal(run.Status.Phase) {
		return c.finalize(ctx, run, reg)
	}
	if reg == nil && c.wasEnded(key, run) {
		return nil // a stale copy of an attempt this Pod already ended; its update follows
	}
	if ownerLost(run) {
		// Recovery declared this assignment lost: serve nothing, write
		// nothing; recovery fences the Pod and moves the Run.
		if reg != nil {
			reg.logger.Info("Recovery marked the Run's owner lost; releasing its registration")
			return c.release(ctx, reg, cancelInFlight)
		}
		return nil
	}
	switch run.Status.Phase {
	case lifecycle.Scheduled:
		if reg != nil {
			return nil // the informer has not shown our claim yet
		}
		return c.claim(ctx, key, run)
	case lifecycle.Running:
		return c.register(ctx, key, run, reg)
	case lifecycle.Ready:
		return c.serve(ctx, key, run, reg)
	}
	return nil
}

// markEnded records that this Pod ended run's current attempt.
func (c *Controller) markEnded(key string, run *v1alpha1.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended[key] = endedAttempt{uid: run.UID, attempt: run.Status.Attempt}
}

func (c *Controller) wasEnded(key string, run *v1alpha1.Run) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ended[key] == endedAttempt{uid: run.UID, attempt: run.Status.Attempt}
}

func (c *Controller) forgetEnded(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.ended, key)
}

// ownerLost reports whether recovery marked run's current assignment lost:
// a claimed function with Ready=False reason OwnerLost.
func ownerLost(run *v1alpha1.Run) bool {
	if run.Status.Phase != lifecycle.Running && run.Status.Phase != lifecycle.Ready {
		return false
	}
	c := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == lifecycle.ReasonOwnerLost
}

func (c *Controller) local(key string) *registration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.regs[key]
}

func (c *Controller) attemptOf(reg *registration) int32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return reg.attempt
}

// track records reg; the caller holds its slot.
func (c *Controller) track(reg *registration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.regs[reg.key] = reg
	c.byUID[reg.uid] = reg
	publishRegistrations(len(c.regs))
}

// untrack forgets reg and frees its slot, which wakes the Runs waiting for
// one.
func (c *Controller) untrack(reg *registration) {
	c.mu.Lock()
	owned := c.regs[reg.key] == reg
	if owned {
		delete(c.regs, reg.key)
		delete(c.byUID, reg.uid)
	}
	publishRegistrations(len(c.regs))
	c.mu.Unlock()
	if owned {
		c.slots.Release(reg.uid)
	}
}

// Bounds of the liveness checks: longer than any one sync may take, and
// than a few ticks of the registration watch.
const (
	workerStallBound = 2 * time.Minute
	watchStallBound  = 30 * time.Second
)

// Liveness fails while Runs wait and no worker takes any, or while the
// registration watch stopped ticking.
func (c *Controller) Liveness() []health.Check {
	return []health.Check{c.workers.Check(), c.watching.Check()}
}

// HasSynced reports whether the Run informer has synced.
func (c *Controller) HasSynced() bool { return c.synced() }
