package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	"kruntimes.io/kruntimes/apis/runtimepod"
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

func runFrom(obj any) *v1alpha1.Run {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	run, _ := obj.(*v1alpha1.Run)
	return run
}

// wantsScheduling reports whether the scheduler has work for run: placing
// it, or cancelling it.
func wantsScheduling(run *v1alpha1.Run) bool {
	return run.Status.Phase == lifecycle.Pending && run.DeletionTimestamp == nil
}

func (s *Scheduler) enqueueRun(run *v1alpha1.Run) {
	s.queue.Add(run.Namespace + "/" + run.Name)
}

// observe drops the reservation of a Run the informer shows past Pending:
// from now on it is counted where the informer shows it.
func (s *Scheduler) observe(run *v1alpha1.Run) {
	if run.Status.Phase != lifecycle.Pending {
		s.assumed.forget(run.UID)
	}
}

func (s *Scheduler) addRun(obj any) {
	run := runFrom(obj)
	if run == nil {
		return
	}
	s.arrivals.see(run.UID)
	s.observe(run)
	if wantsScheduling(run) {
		s.enqueueRun(run)
	}
}

func (s *Scheduler) updateRun(oldObj, newObj any) {
	old, run := runFrom(oldObj), runFrom(newObj)
	if old == nil || run == nil {
		return
	}
	s.observe(run)
	if wantsScheduling(run) {
		s.enqueueRun(run)
	}
	released := holdsCapacity(old) && !(holdsCapacity(run) && run.Status.AssignedPodUID == old.Status.AssignedPodUID)
	// A Run that leaves the line without taking a slot (cancelled, being
	// deleted) may have been the one a younger Run left a free slot to.
	leftLine := wantsScheduling(old) && !wantsScheduling(run) && run.Status.Phase != lifecycle.Scheduled
	if released || leftLine {
		s.wakeRuntime(run.Namespace, run.Spec.Runtime)
	}
}

func (s *Scheduler) deleteRun(obj any) {
	run := runFrom(obj)
	if run == nil {
		return
	}
	s.assumed.forget(run.UID)
	s.arrivals.forget(run.UID)
	if holdsCapacity(run) || wantsScheduling(run) {
		s.wakeRuntime(run.Namespace, run.Spec.Runtime)
	}
}

func (s *Scheduler) runtimeChanged(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if rt, ok := obj.(*v1alpha1.Runtime); ok {
		s.wakeAll(rt.Namespace, rt.Name)
	}
}

func (s *Scheduler) runtimeUpdated(oldObj, newObj any) {
	old, okOld := oldObj.(*v1alpha1.Runtime)
	rt, ok := newObj.(*v1alpha1.Runtime)
	if !ok || !okOld {
		return
	}
	if old.Spec.Capacity != rt.Spec.Capacity || old.UID != rt.UID {
		s.wakeAll(rt.Namespace, rt.Name)
	}
}

func (s *Scheduler) podChanged(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		s.wakeAll(pod.Namespace, pod.Labels[lifecycle.LabelRuntime])
	}
}

// podUpdated wakes the Runtime's Pending Runs when a Pod may have become a
// candidate; status churn that changes nothing of that is ignored.
func (s *Scheduler) podUpdated(oldObj, newObj any) {
	old, okOld := oldObj.(*corev1.Pod)
	pod, ok := newObj.(*corev1.Pod)
	if !ok || !okOld {
		return
	}
	if old.Status.Phase != pod.Status.Phase || podReady(old) != podReady(pod) ||
		(old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) ||
		old.Labels[lifecycle.LabelRuntime] != pod.Labels[lifecycle.LabelRuntime] {
		s.wakeAll(pod.Namespace, pod.Labels[lifecycle.LabelRuntime])
	}
}

// leaseUpdated wakes the Pending Runs of a Pod's Runtime when its heartbeat
// turns fresh; the renewals of a fresh heartbeat change nothing.
func (s *Scheduler) leaseUpdated(oldObj, newObj any) {
	lease, ok := newObj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	now := s.clock.Now()
	if !runtimepod.HeartbeatFresh(lease, now) {
		return
	}
	if old, ok := oldObj.(*coordinationv1.Lease); ok && runtimepod.HeartbeatFresh(old, now) &&
		apiequality.Semantic.DeepEqual(old.Spec.HolderIdentity, lease.Spec.HolderIdentity) {
		return
	}
	pod, err := s.pods.Pods(lease.Namespace).Get(lease.Name)
	if err != nil {
		return
	}
	s.wakeAll(pod.Namespace, pod.Labels[lifecycle.LabelRuntime])
}

// wakeAll queues every waiting Run of one Runtime, oldest first: its Pods
// or its spec changed, which may change what each Run waits for.
func (s *Scheduler) wakeAll(namespace, runtime string) {
	if runtime == "" {
		return
	}
	runs := s.pending(namespace, runtime)
	for _, run := range s.oldest(runs, len(runs)) {
		s.enqueueRun(run)
	}
}

// wakeRuntime has the wake worker queue as many of the Runtime's oldest
// waiting Runs as it has free slots: a released slot costs one placement,
// not one per waiting Run.
func (s *Scheduler) wakeRuntime(namespace, runtime string) {
	if runtime != "" {
		s.wakes.Add(namespace + "/" + runtime)
	}
}

// wakeRuntimeOf wakes the Runtime of the Run of key.
func (s *Scheduler) wakeRuntimeOf(key string) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	if run, err := s.runs.Runs(namespace).Get(name); err == nil {
		s.wakeRuntime(namespace, run.Spec.Runtime)
	}
}

func (s *Scheduler) wakeWorker(context.Context) {
	for {
		key, quit := s.wakes.Get()
		if quit {
			return
		}
		namespace, runtime, _ := strings.Cut(key, "/")
		s.fillFreeSlots(namespace, runtime)
		s.wakes.Done(key)
	}
}

// fillFreeSlots queues as many of the Runtime's oldest waiting Runs as it
// has free slots.
func (s *Scheduler) fillFreeSlots(namespace, runtime string) {
	now := s.clock.Now()
	pending := s.pending(namespace, runtime)
	if len(pending) == 0 {
		return
	}
	rt, err := s.runtimes.Runtimes(namespace).Get(runtime)
	if err != nil {
		// Each waiting Run will say that the Runtime is missing.
		s.wakeAll(namespace, runtime)
		return
	}
	loads, _, err := s.loads(namespace, rt, now)
	if err != nil {
		s.wakeAll(namespace, runtime)
		return
	}
	free := freeSlots(loads, rt)
	if free == 0 {
		return
	}
	waiting := slices.DeleteFunc(pending, func(run *v1alpha1.Run) bool { return !s.eligible(run, now) })
	for _, run := range s.oldest(waiting, free) {
		s.enqueueRun(run)
	}
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

// place chooses a Pod for run among rt's candidates and reserves the slot.
// Free slots go to the oldest waiting Runs: a Run with as many older ones
// waiting as there are free slots leaves them the slots.
func (s *Scheduler) place(run *v1alpha1.Run, rt *v1alpha1.Runtime) placement {
	s.placing.Lock()
	defer s.placing.Unlock()
	// A reservation left by an earlier attempt of this Run is not a load.
	s.assumed.forget(run.UID)
	now := s.clock.Now()
	loads, excluded, err := s.loads(run.Namespace, rt, now)
	if err != nil {
		return placement{message: err.Error()}
	}
	capacity := capacityOf(rt)
	if free := freeSlots(loads, rt); free > 0 && s.atLeastWaitingAhead(run, free, now) {
		// The older Runs take every free slot, as if the Pods were full;
		// releasing the slots queued them.
		return placement{message: noCapacityMessage(len(loads), capacity, excluded)}
	}
	p := choosePod(loads, capacity, excluded)
	if p.pod != nil {
		s.assumed.assume(run.UID, p.pod.UID)
	}
	return p
}

// loads returns rt's candidate Pods with their usage, and counts the other
// Pods by why they are no candidates.
func (s *Scheduler) loads(namespace string, rt *v1alpha1.Runtime, now time.Time) ([]podLoad, map[string]int, error) {
	pods, err := s.pods.Pods(namespace).List(labels.SelectorFromSet(labels.Set{lifecycle.LabelRuntime: rt.Name}))
	if err != nil {
		return nil, nil, err
	}
	excluded := map[string]int{}
	loads := make([]podLoad, 0, len(pods))
	for _, pod := range pods {
		lease, err := s.leases.Leases(pod.Namespace).Get(runtimepod.LeaseName(pod.Name))
		if err != nil {
			lease = nil
		}
		if why := excludedReason(pod, lease, now); why != "" {
			excluded[why]++
			continue
		}
		loads = append(loads, podLoad{pod: pod, used: usage(pod, s.runsOn(pod), s.assumed.reservedOn(pod.UID, now))})
	}
	return loads, excluded, nil
}

func (s *Scheduler) runsOn(pod *corev1.Pod) []*v1alpha1.Run {
	return s.indexed(AssignedPodIndex, pod.Namespace+"/"+pod.Name)
}

// bind assigns run to pod with one status update carrying the Run's
// resourceVersion; a conflict means the Run changed meanwhile and is
// retried from the informer's newer copy.
func (s *Scheduler) bind(ctx context.Context, run *v1alpha1.Run, pod *corev1.Pod) error {
	update := run.DeepCopy()
	now := metav1.NowMicro()
	update.Status.Phase = lifecycle.Scheduled
	update.Status.AssignedPod = pod.Name
	update.Status.AssignedPodUID = pod.UID
	update.Status.ScheduledTime = &now
	update.Status.Message = ""
	apimeta.SetStatusCondition(&update.Status.Conditions, metav1.Condition{
		Type:   lifecycle.ConditionScheduled,
		Status: metav1.ConditionTrue,
		// The condition type doubles as the reason of a successful
		// binding, as for a Pod's PodScheduled.
		Reason:             lifecycle.ReasonScheduled,
		Message:            "Assigned to Pod " + pod.Name,
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(now.Time),
	})
	if run.Spec.Mode.Function != nil {
		// What a previous attempt's Ready condition said (OwnerLost,
		// Retrying) is not about this assignment.
		apimeta.SetStatusCondition(&update.Status.Conditions, metav1.Condition{
			Type:               lifecycle.ConditionReady,
			Status:             metav1.ConditionFalse,
			Reason:             lifecycle.ReasonScheduling,
			Message:            "Assigned to Pod " + pod.Name + "; waiting for its runtimed to register the function",
			ObservedGeneration: run.Generation,
			LastTransitionTime: metav1.NewTime(now.Time),
		})
	}
	start := s.clock.Now()
	_, err := s.client.KruntimesV1alpha1().Runs(run.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
	bindingDuration.Observe(s.clock.Since(start).Seconds())
	if err != nil {
		if definitelyNotApplied(err) {
			s.assumed.forget(run.UID)
		} else {
			s.assumed.finishBinding(run.UID, s.clock.Now(), false)
		}
		if apierrors.IsConflict(err) {
			observeAttempt(resultConflict)
		} else {
			observeAttempt(resultError)
		}
		return fmt.Errorf("binding Run %s/%s to Pod %s: %w", run.Namespace, run.Name, pod.Name, err)
	}
	s.assumed.finishBinding(run.UID, s.clock.Now(), true)
	observeAttempt(resultScheduled)
	if run.Status.Attempt <= 1 {
		pendingDuration.Observe(now.Sub(run.CreationTimestamp.Time).Seconds())
	}
	// No Event: a routine bind, thousands a minute, would go to the
	// cluster's etcd; the Scheduled condition and assignedPod say it.
	klog.FromContext(ctx).V(2).Info("Bound Run", "pod", klog.KObj(pod), "podUID", pod.UID)
	return nil
}

// definitelyNotApplied reports whether the server refused the write, as
// opposed to an outcome the scheduler cannot know (a timeout, a lost
// connection), after which the reservation is kept until it expires.
func definitelyNotApplied(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) ||
		apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsUnauthorized(err)
}

// cancel moves a Pending Run that asked for cancellation to Cancelled.
func (s *Scheduler) cancel(ctx context.Context, run *v1alpha1.Run) error {
	update := run.DeepCopy()
	now := metav1.NowMicro()
	const msg = "Cancelled before it was scheduled"
	update.Status.Phase = lifecycle.Cancelled
	update.Status.CompletionTime = &now
	update.Status.Message = msg
	for _, cond := range []metav1.Condition{
		{Type: lifecycle.ConditionCompleted, Status: metav1.ConditionTrue},
		{Type: lifecycle.ConditionScheduled, Status: metav1.ConditionFalse},
	} {
		cond.Reason, cond.Message = lifecycle.ReasonCancelled, msg
		cond.ObservedGeneration = run.Generation
		cond.LastTransitionTime = metav1.NewTime(now.Time)
		apimeta.SetStatusCondition(&update.Status.Conditions, cond)
	}
	if _, err := s.client.KruntimesV1alpha1().Runs(run.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("cancelling Pending Run %s/%s: %w", run.Namespace, run.Name, err)
	}
	observeAttempt(resultCancelled)
	klog.FromContext(ctx).V(2).Info("Cancelled Pending Run")
	s.recorder.Event(run, corev1.EventTypeNormal, eventCancelled, msg)
	return nil
}

// markUnschedulable records why run cannot be placed, in status.message
// and a Scheduled=False condition, writing only when that changed.
func (s *Scheduler) markUnschedulable(ctx context.Context, run *v1alpha1.Run, reason, msg string) error {
	update := run.DeepCopy()
	update.Status.Message = msg
	apimeta.SetStatusCondition(&update.Status.Conditions, metav1.Condition{
		Type:               lifecycle.ConditionScheduled,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            msg,
		ObservedGeneration: run.Generation,
		LastTransitionTime: metav1.NewTime(s.clock.Now()),
	})
	if apiequality.Semantic.DeepEqual(run.Status, update.Status) {
		return nil
	}
	if _, err := s.client.KruntimesV1alpha1().Runs(run.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("recording why Run %s/%s cannot be scheduled: %w", run.Namespace, run.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Run cannot be scheduled", "reason", reason, "message", msg)
	s.recorder.Event(run, corev1.EventTypeWarning, eventFailedScheduling, msg)
	return nil
}
