package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
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
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	informers "kruntimes.io/kruntimes/client/informers/externalversions/kruntimes/v1alpha1"
	listers "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

// Indexes the scheduler adds to the Run informer.
const (
	// PendingIndex keys Pending Runs by <namespace>/<spec.runtime>:
	// releasing capacity wakes the waiting Runs of one Runtime, without
	// scanning the namespace or the Runtime's finished Runs.
	PendingIndex = "kruntimes.io/pending"
	// AssignedPodIndex keys Runs by <namespace>/<status.assignedPod>: a
	// Pod's usage is read without scanning the namespace.
	AssignedPodIndex = "kruntimes.io/assigned-pod"
)

// unschedulableRecheck re-examines a Run that found no slot even without
// an event: a heartbeat turning stale makes no event, and a missed wake-up
// must not strand a Run.
const unschedulableRecheck = 30 * time.Second

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
	leases     coordinationlisters.LeaseLister
	synced     []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	// wakes holds <namespace>/<runtime> of Runtimes that released slots:
	// one worker hands them to their oldest waiting Runs, off the informer's
	// event handler, and releases that arrive meanwhile share one pass.
	wakes    workqueue.TypedInterface[string]
	assumed  *assumeCache
	arrivals *arrivals
	// failing holds the keys of Runs whose last sync failed other than
	// by a routine conflict; they wait out their backoff out of line.
	failing keySet
	// placing serializes choosing a Pod and reserving its slot, so two
	// workers never give the same slot away; binding runs outside it.
	placing sync.Mutex
	clock   clock.WithTicker
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

// New returns a scheduler fed by the given informers; podInformer may be
// filtered to Pods labelled kruntimes.io/runtime. It adds RuntimeIndex and
// AssignedPodIndex to the Run informer, so call it before starting that.
func New(ctx context.Context,
	runInformer informers.RunInformer,
	runtimeInformer informers.RuntimeInformer,
	podInformer coreinformers.PodInformer,
	leaseInformer coordinationinformers.LeaseInformer,
	client versioned.Interface,
	recorder record.EventRecorder,
	opts ...Option,
) (*Scheduler, error) {
	registerMetrics()
	if err := runInformer.Informer().AddIndexers(cache.Indexers{
		PendingIndex:     pendingIndexFunc,
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
		leases:     leaseInformer.Lister(),
		synced: []cache.InformerSynced{
			runInformer.Informer().HasSynced,
			runtimeInformer.Informer().HasSynced,
			podInformer.Informer().HasSynced,
			leaseInformer.Informer().HasSynced,
		},
		assumed:  newAssumeCache(),
		arrivals: newArrivals(),
		clock:    clock.RealClock{},
	}
	for _, opt := range opts {
		opt(s)
	}
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kruntimes_scheduler", Clock: s.clock},
	)
	s.wakes = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{
		Name:  "kruntimes_scheduler_wakes",
		Clock: s.clock,
	})
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
		wg.Wait()
	}()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, s.synced...) {
		return
	}
	for i := 0; i < workers; i++ {
		wg.Go(func() { wait.UntilWithContext(ctx, s.worker, time.Second) })
	}
	wg.Go(func() { wait.UntilWithContext(ctx, s.wakeWorker, time.Second) })
	<-ctx.Done()
}

func pendingIndexFunc(obj any) ([]string, error) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok {
		return nil, fmt.Errorf("not a Run: %T", obj)
	}
	if !wantsScheduling(run) {
		return nil, nil
	}
	return []string{run.Namespace + "/" + run.Spec.Runtime}, nil
}

func assignedPodIndexFunc(obj any) ([]string, error) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok {
		return nil, fmt.Errorf("not a Run: %T", obj)
	}
	if run.Status.AssignedPod == "" {
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
	defer s.queue.Done(key)
	err := s.sync(ctx, key)
	failing := err != nil && !apierrors.IsConflict(err)
	if s.failing.set(key, failing) && failing {
		// It may have been handed a free slot it cannot take: the next
		// Run in line gets it.
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
		return true
	}
	s.queue.Forget(key)
	return true
}

// sync schedules the Run of key: cancel it if asked, wait out its retry
// backoff, or bind it to the least-loaded candidate Pod, or say why it
// cannot be placed. It reads only informer state and writes with the Run's
// resourceVersion, so running it twice never binds twice.
func (s *Scheduler) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	run, err := s.runs.Runs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !wantsScheduling(run) {
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "run", klog.KObj(run), "runUID", run.UID)
	ctx = klog.NewContext(ctx, logger)

	if run.Spec.CancelRequested {
		return s.cancel(ctx, run)
	}
	now := s.clock.Now()
	if s.assumed.bound(run.UID, now) {
		// Bound already; a copy older than the binding is in the informer.
		return nil
	}
	if notBefore := retry.NotBefore(run); notBefore.After(now) {
		s.queue.AddAfter(key, notBefore.Sub(now))
		return nil
	}
	rt, err := s.runtimes.Runtimes(namespace).Get(run.Spec.Runtime)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if rt == nil || rt.DeletionTimestamp != nil {
		msg := fmt.Sprintf("Runtime %q does not exist in namespace %s; create it, or recreate this Run naming an existing Runtime", run.Spec.Runtime, namespace)
		if rt != nil {
			msg = fmt.Sprintf("Runtime %q is being deleted; the Run waits for a Runtime of that name", run.Spec.Runtime)
		}
		observeAttempt(resultRuntimeNotFound)
		return s.markUnschedulable(ctx, run, lifecycle.ReasonRuntimeNotFound, msg)
	}
	p := s.place(run, rt)
	if p.pod == nil {
		observeAttempt(resultNoCapacity)
		s.queue.AddAfter(key, unschedulableRecheck)
		return s.markUnschedulable(ctx, run, lifecycle.ReasonNoCapacity, p.message)
	}
	return s.bind(ctx, run, p.pod)
}
