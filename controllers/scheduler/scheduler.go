package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/retry"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	informers "kruntimes.io/kruntimes/client/informers/externalversions/kruntimes/v1alpha1"
	listers "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

// AssignedPodIndex keys the Runs that hold a slot by
// <namespace>/<status.assignedPod>, an index the scheduler adds to the Run
// informer: a Pod's usage is read without scanning the namespace.
const AssignedPodIndex = "kruntimes.io/assigned-pod"

// Event reasons on a Run.
const (
	eventFailedScheduling = "FailedScheduling"
	eventCancelled        = "Cancelled"
)

// Scheduler binds Pending Runs to Runtime Pods.
type Scheduler struct {
	client   versioned.Interface
	recorder record.EventRecorder

	runs       listers.RunLister
	runIndexer cache.Indexer
	runtimes   listers.RuntimeLister
	pods       corelisters.PodLister
	owners     ownership
	leases     coordinationlisters.LeaseLister
	synced     []cache.InformerSynced

	// queue holds the keys of Runs to try, namespaces in turn.
	queue workqueue.TypedRateLimitingInterface[string]
	// lines holds, per Runtime, its Pending Runs being tried or parked.
	lines *lines
	// wakes holds <namespace>/<runtime> of Runtimes that may have free
	// slots: one worker hands them to their oldest parked Runs, off the
	// informer's event handler, and wakes that arrive meanwhile share one
	// pass.
	wakes workqueue.TypedInterface[string]
	// checks holds <namespace>/<runtime> of Runtimes with parked Runs, each
	// due parkedRecheck after it was queued.
	checks workqueue.TypedDelayingInterface[string]
	// notes holds the keys of parked Runs whose Pending note may have to
	// be written; want holds the note.
	notes    workqueue.TypedRateLimitingInterface[string]
	noteMu   sync.Mutex
	want     map[string]note
	assumed  *assumeCache
	arrivals *arrivals
	// failing holds the keys of Runs whose last sync failed other than
	// by a routine conflict; they wait out their backoff out of line.
	failing keySet
	// placing serializes choosing a Pod and reserving its slot, so two
	// workers never give the same slot away, and parking a Run with
	// waking its line, so no wake-up is missed; binding runs outside it.
	placing sync.Mutex
	clock   clock.WithTicker
	// trustLabels skips the ownership check (TrustPodLabels).
	trustLabels bool
}

// Option configures a Scheduler.
type Option func(*Scheduler)

// WithClock makes the scheduler read the time from c instead of the system
// clock: heartbeat freshness, retry backoff, reservation expiry, and the
// delays of its workqueues (rate limiting, the wait for retry.NotBefore,
// the periodic re-check). Tests step a fake clock to cross those deadlines
// without waiting for them; until it is stepped, none of them passes.
func WithClock(c clock.WithTicker) Option {
	return func(s *Scheduler) { s.clock = c }
}

// TrustPodLabels makes every Pod labelled with a Runtime's name a Pod of
// that Runtime, whatever controls it: for tests that run the scheduler
// against a kruntimes API server of their own, whose Runtimes the cluster's
// garbage collector cannot see, so a Deployment owned by one would be
// collected at once. Never in a server: any namespace user who can create
// Pods could then receive other users' Runs.
func TrustPodLabels() Option {
	return func(s *Scheduler) { s.trustLabels = true }
}

// New returns a scheduler fed by the given informers; podInformer,
// replicaSetInformer and deploymentInformer may be filtered to objects
// labelled kruntimes.io/runtime (a Runtime's ReplicaSets carry its Pod
// template's labels). A Pod is a candidate only when it is controlled by a
// ReplicaSet of the Deployment the runtime controller made for its Runtime.
// It adds AssignedPodIndex to the Run informer, so call it before starting
// that.
//
// Runs that cannot be placed park on their Runtime's line and are tried
// again only on an event that may give that Runtime a slot: the Runtime
// created or changed, one of its Pods becoming a candidate, a fresh
// heartbeat, a slot released (one parked Run per free slot, oldest first),
// or every parkedRecheck. The Runs to try are taken namespaces in turn.
func New(ctx context.Context,
	runInformer informers.RunInformer,
	runtimeInformer informers.RuntimeInformer,
	podInformer coreinformers.PodInformer,
	replicaSetInformer appsinformers.ReplicaSetInformer,
	deploymentInformer appsinformers.DeploymentInformer,
	leaseInformer coordinationinformers.LeaseInformer,
	client versioned.Interface,
	recorder record.EventRecorder,
	opts ...Option,
) (*Scheduler, error) {
	registerMetrics()
	if err := runInformer.Informer().AddIndexers(cache.Indexers{
		AssignedPodIndex: assignedPodIndexFunc,
	}); err != nil {
		return nil, fmt.Errorf("indexing Runs by Runtime and Pod: %w", err)
	}
	s := &Scheduler{
		client:     client,
		recorder:   recorder,
		runs:       runInformer.Lister(),
		runIndexer: runInformer.Informer().GetIndexer(),
		runtimes:   runtimeInformer.Lister(),
		pods:       podInformer.Lister(),
		owners:     ownership{replicaSets: replicaSetInformer.Lister(), deployments: deploymentInformer.Lister()},
		leases:     leaseInformer.Lister(),
		synced: []cache.InformerSynced{
			runInformer.Informer().HasSynced,
			runtimeInformer.Informer().HasSynced,
			podInformer.Informer().HasSynced,
			replicaSetInformer.Informer().HasSynced,
			deploymentInformer.Informer().HasSynced,
			leaseInformer.Informer().HasSynced,
		},
		assumed:  newAssumeCache(),
		arrivals: newArrivals(),
		want:     map[string]note{},
		clock:    clock.RealClock{},
	}
	for _, opt := range opts {
		opt(s)
	}
	s.lines = newLines(s.seriesOf)
	active := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{
		Name:  "kruntimes_scheduler",
		Clock: s.clock,
		Queue: newRoundRobin(func(n int) { queueDepth.WithLabelValues(queueActive).Set(float64(n)) }),
	})
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{
			Name:  "kruntimes_scheduler",
			Clock: s.clock,
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
				Name: "kruntimes_scheduler", Clock: s.clock, Queue: active,
			}),
		},
	)
	s.wakes = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{
		Name:  "kruntimes_scheduler_wakes",
		Clock: s.clock,
	})
	s.checks = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
		Name:  "kruntimes_scheduler_checks",
		Clock: s.clock,
	})
	s.notes = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kruntimes_scheduler_notes", Clock: s.clock},
	)
	for what, handler := range map[string]struct {
		informer cache.SharedIndexInformer
		funcs    cache.ResourceEventHandlerFuncs
	}{
		"Runs": {runInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    s.addRun,
			UpdateFunc: s.updateRun,
			DeleteFunc: s.deleteRun,
		}},
		"Runtimes": {runtimeInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    s.runtimeChanged,
			UpdateFunc: func(old, cur any) { s.runtimeUpdated(old, cur) },
			DeleteFunc: s.runtimeChanged,
		}},
		"Runtime Pods": {podInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    s.podChanged,
			UpdateFunc: s.podUpdated,
			DeleteFunc: s.podChanged,
		}},
		// A Pod becomes a candidate only once its ReplicaSet and Deployment
		// are in the caches, which may be after the Pod turned Ready.
		"Runtime ReplicaSets": {replicaSetInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: s.ownerAdded,
		}},
		"Runtime Deployments": {deploymentInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: s.ownerAdded,
		}},
		"heartbeat Leases": {leaseInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.leaseUpdated(nil, obj) },
			UpdateFunc: s.leaseUpdated,
		}},
	} {
		if _, err := handler.informer.AddEventHandler(handler.funcs); err != nil {
			return nil, fmt.Errorf("watching %s: %w", what, err)
		}
	}
	return s, nil
}

// Run processes the queue with workers until ctx is done.
func (s *Scheduler) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx)
	logger.Info("Starting Run scheduler")
	var wg sync.WaitGroup
	defer func() {
		logger.Info("Shutting down Run scheduler")
		s.queue.ShutDown()
		s.wakes.ShutDown()
		s.checks.ShutDown()
		s.notes.ShutDown()
		wg.Wait()
	}()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, s.synced...) {
		return
	}
	for i := 0; i < workers; i++ {
		wg.Go(func() { wait.UntilWithContext(ctx, s.worker, time.Second) })
	}
	wg.Go(func() { wait.UntilWithContext(ctx, s.wakeWorker, time.Second) })
	wg.Go(func() { wait.UntilWithContext(ctx, s.checkWorker, time.Second) })
	wg.Go(func() { wait.UntilWithContext(ctx, s.noteWorker, time.Second) })
	<-ctx.Done()
}

func assignedPodIndexFunc(obj any) ([]string, error) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok {
		return nil, fmt.Errorf("not a Run: %T", obj)
	}
	if !holdsCapacity(run) {
		return nil, nil
	}
	return []string{run.Namespace + "/" + run.Status.AssignedPod}, nil
}

func (s *Scheduler) worker(ctx context.Context) {
	for s.processNextWorkItem(ctx) {
	}
}

func (s *Scheduler) processNextWorkItem(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	s.process(ctx, key)
	return true
}

// process syncs the Run of key, taken from the queue, and hands the key
// back to the queue.
func (s *Scheduler) process(ctx context.Context, key string) {
	defer s.queue.Done(key)
	err := s.sync(ctx, key)
	failing := err != nil && !apierrors.IsConflict(err)
	if s.failing.set(key, failing) && failing {
		// It waits out its backoff out of line. It may have been handed a
		// free slot it cannot take: the next Run in line gets it.
		s.lines.leave(key)
		s.wakeRuntimeOf(key)
	}
	if err != nil {
		if apierrors.IsConflict(err) {
			// Routine: a newer copy is on its way to the informer.
			klog.FromContext(ctx).V(4).Info("Conflict, will retry", "key", key, "err", err)
		} else {
			utilruntime.HandleErrorWithContext(ctx, err, "Failed to schedule Run, will retry", "key", key)
		}
		s.queue.AddRateLimited(key)
		return
	}
	s.queue.Forget(key)
}

// sync schedules the Run of key: cancel it if asked, wait out its retry
// backoff, or bind it to the least-loaded candidate Pod, or park it on its
// Runtime's line and note why. It reads only informer state and writes
// with the Run's resourceVersion, so running it twice never binds twice.
func (s *Scheduler) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	run, err := s.runs.Runs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		s.lines.leave(key)
		return nil
	}
	if err != nil {
		return err
	}
	if !wantsScheduling(run) {
		s.lines.leave(key)
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "run", klog.KObj(run), "runUID", run.UID)
	ctx = klog.NewContext(ctx, logger)

	if run.Spec.CancelRequested {
		s.lines.leave(key)
		return s.cancel(ctx, run)
	}
	now := s.clock.Now()
	if s.assumed.bound(run.UID, now) {
		// Bound already; a copy older than the binding is in the informer.
		s.lines.leave(key)
		return nil
	}
	if notBefore := retry.NotBefore(run); notBefore.After(now) {
		s.lines.leave(key)
		s.queue.AddAfter(key, notBefore.Sub(now))
		return nil
	}
	s.join(run)
	p, err := s.place(run)
	if err != nil {
		return err
	}
	if p.pod == nil {
		observeAttempt(p.result)
		s.noteLater(key, note{reason: p.reason, message: p.message})
		return nil
	}
	return s.bind(ctx, run, p.pod)
}

// join puts run in its Runtime's line, being tried.
func (s *Scheduler) join(run *v1alpha1.Run) {
	s.lines.try(lineEntry{
		key:     run.Namespace + "/" + run.Name,
		line:    run.Namespace + "/" + run.Spec.Runtime,
		created: run.CreationTimestamp.Time,
		seq:     s.arrivals.of(run.UID),
		uid:     run.UID,
	}, run.Namespace, run.Spec.Runtime)
}

// seriesOf is the runtime label Runs of runtime are counted under.
func (s *Scheduler) seriesOf(namespace, runtime string) string {
	if _, err := s.runtimes.Runtimes(namespace).Get(runtime); err != nil {
		return missingRuntime
	}
	return runtime
}
