package recovery

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	informers "kruntimes.io/kruntimes/client/informers/externalversions/kruntimes/v1alpha1"
	listers "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/tombstone"
)

// DefaultHeartbeatGracePeriod is how long a Runtime Pod's heartbeat may stay
// stale before the Pod counts as lost: kube-controller-manager's
// --node-monitor-grace-period for a Node.
const DefaultHeartbeatGracePeriod = 40 * time.Second

// MinHeartbeatGracePeriod is the shortest grace a server accepts. runtimed
// stops every invocation it runs when its Lease lapses by its own clock
// (runtimed/heartbeat Bound); the grace is what separates that from
// recovery registering the function elsewhere, and must cover the clocks'
// skew and the time a stopped handler takes to die. No invocation timeout
// needs to fit in it.
const MinHeartbeatGracePeriod = time.Second

// OwnerIndex keys the Runs that hold a Pod — assigned, and active or
// deleting with the registration-cleanup finalizer — by
// <namespace>/<status.assignedPod>: a Pod event reaches its Runs without a
// scan.
const OwnerIndex = "kruntimes.io/recovery-owner"

// Event reasons on a Run.
const (
	// EventOwnerLost: the Run's Pod is lost; its assignment is not routable.
	EventOwnerLost = lifecycle.ReasonOwnerLost
	// EventRecovered: a fence held and the Run went back to Pending (or, if
	// deleting, lost its finalizer).
	EventRecovered = "Recovered"
	// EventRecoveryFailed: a fence held but the Run has no attempt left, so
	// it failed with reason OwnerLost.
	EventRecoveryFailed = "RecoveryFailed"
)

// Controller recovers the Runs of lost Runtime Pods.
type Controller struct {
	kube     kubernetes.Interface
	client   versioned.Interface
	recorder record.EventRecorder

	runs       listers.RunLister
	runIndexer cache.Indexer
	pods       corelisters.PodLister
	leases     coordinationlisters.LeaseLister
	synced     []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	grace time.Duration
	clock clock.WithTicker

	detections *detections
	// silentSince holds, by Pod UID, when this controller first saw a Pod
	// holding Runs without a heartbeat Lease of its own (deleted, or taken
	// by another UID): its grace period counts from then.
	silentMu    sync.Mutex
	silentSince map[types.UID]time.Time
	// deletedPods holds the UIDs of the silent Pods this controller
	// deleted, until the informer shows them gone: the other Runs of such a
	// Pod find the fence without deleting it again.
	deletedPods sync.Map
}

// Option configures a Controller.
type Option func(*Controller)

// WithClock makes the controller read the time from c, and its workqueue
// wait on it: tests step a fake clock past a grace period instead of
// waiting it out.
func WithClock(c clock.WithTicker) Option {
	return func(ctl *Controller) { ctl.clock = c }
}

// WithHeartbeatGracePeriod sets how long a Pod's heartbeat may stay stale,
// after its Lease expired, before the Pod counts as lost and is deleted.
func WithHeartbeatGracePeriod(d time.Duration) Option {
	return func(ctl *Controller) { ctl.grace = d }
}

// New returns a recovery controller fed by the given informers. podInformer
// may be filtered to Pods labelled kruntimes.io/runtime: a Pod it does not
// show is looked up in the API before anything is done. kube deletes the Pods
// whose heartbeat is lost. It adds OwnerIndex to the Run informer, so call it
// before starting that.
func New(ctx context.Context,
	runInformer informers.RunInformer,
	podInformer coreinformers.PodInformer,
	leaseInformer coordinationinformers.LeaseInformer,
	kube kubernetes.Interface,
	client versioned.Interface,
	recorder record.EventRecorder,
	opts ...Option,
) (*Controller, error) {
	registerMetrics()
	if err := runInformer.Informer().AddIndexers(cache.Indexers{OwnerIndex: ownerIndexFunc}); err != nil {
		return nil, fmt.Errorf("indexing Runs by the Pod they hold: %w", err)
	}
	c := &Controller{
		kube:       kube,
		client:     client,
		recorder:   recorder,
		runs:       runInformer.Lister(),
		runIndexer: runInformer.Informer().GetIndexer(),
		pods:       podInformer.Lister(),
		leases:     leaseInformer.Lister(),
		synced: []cache.InformerSynced{
			runInformer.Informer().HasSynced,
			podInformer.Informer().HasSynced,
			leaseInformer.Informer().HasSynced,
		},
		grace:       DefaultHeartbeatGracePeriod,
		clock:       clock.RealClock{},
		detections:  newDetections(),
		silentSince: map[types.UID]time.Time{},
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.grace < 0 {
		return nil, fmt.Errorf("the heartbeat grace period must not be negative, got %s", c.grace)
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kruntimes_recovery", Clock: c.clock},
	)
	logger := klog.FromContext(ctx)
	for what, handler := range map[string]struct {
		informer cache.SharedIndexInformer
		funcs    cache.ResourceEventHandlerFuncs
	}{
		"Runs": {runInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.enqueueIfHolding(logger, obj) },
			UpdateFunc: func(_, obj any) { c.enqueueIfHolding(logger, obj) },
			DeleteFunc: c.runDeleted,
		}},
		"Runtime Pods": {podInformer.Informer(), cache.ResourceEventHandlerFuncs{
			// A Pod created under a reused name tells the Runs of the
			// earlier one that it is gone.
			AddFunc:    c.podChanged,
			UpdateFunc: c.podUpdated,
			DeleteFunc: c.podDeleted,
		}},
		"heartbeat Leases": {leaseInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.leaseChanged,
			UpdateFunc: c.leaseUpdated,
			DeleteFunc: c.leaseChanged,
		}},
	} {
		if _, err := handler.informer.AddEventHandler(handler.funcs); err != nil {
			return nil, fmt.Errorf("watching %s: %w", what, err)
		}
	}
	return c, nil
}

// Run processes the queue with workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx)
	logger.Info("Starting recovery controller", "heartbeatGracePeriod", c.grace)
	var wg sync.WaitGroup
	defer func() {
		logger.Info("Shutting down recovery controller")
		c.queue.ShutDown()
		wg.Wait()
	}()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return
	}
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
}

// holdsPod reports whether run holds its assigned Pod in a way recovery
// must end if the Pod is lost: it is active there, or it is being deleted
// and waits for that Pod to remove its registration-cleanup finalizer.
func holdsPod(run *v1alpha1.Run) bool {
	if run.Status.AssignedPod == "" {
		return false
	}
	return lifecycle.IsActive(run.Status.Phase) ||
		(run.DeletionTimestamp != nil && slices.Contains(run.Finalizers, lifecycle.FinalizerRegistrationCleanup))
}

func ownerIndexFunc(obj any) ([]string, error) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok {
		return nil, fmt.Errorf("not a Run: %T", obj)
	}
	if !holdsPod(run) {
		return nil, nil
	}
	return []string{run.Namespace + "/" + run.Status.AssignedPod}, nil
}

func (c *Controller) enqueueIfHolding(logger klog.Logger, obj any) {
	run, ok := tombstone.As[*v1alpha1.Run](obj)
	if !ok {
		return
	}
	if !holdsPod(run) {
		// Recovered, finished or ended by its runtimed: nothing to measure.
		c.detections.forget(run.UID)
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(run)
	if err != nil {
		utilruntime.HandleErrorWithLogger(logger, err, "Cannot key Run", "run", klog.KObj(run))
		return
	}
	c.queue.Add(key)
}

func (c *Controller) runDeleted(obj any) {
	if run, ok := tombstone.As[*v1alpha1.Run](obj); ok {
		c.detections.forget(run.UID)
	}
}

// enqueueRunsOn queues the Runs that hold the Pod namespace/name.
func (c *Controller) enqueueRunsOn(namespace, name string) {
	objs, err := c.runIndexer.ByIndex(OwnerIndex, namespace+"/"+name)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, obj := range objs {
		if run, ok := obj.(*v1alpha1.Run); ok {
			c.queue.Add(run.Namespace + "/" + run.Name)
		}
	}
}

func (c *Controller) podChanged(obj any) {
	if pod, ok := tombstone.As[*corev1.Pod](obj); ok {
		c.enqueueRunsOn(pod.Namespace, pod.Name)
	}
}

// podUpdated wakes a Pod's Runs when it starts deleting; its status churn
// changes nothing recovery looks at.
func (c *Controller) podUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	pod, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	if (old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) || old.UID != pod.UID {
		c.enqueueRunsOn(pod.Namespace, pod.Name)
	}
}

func (c *Controller) podDeleted(obj any) {
	pod, ok := tombstone.As[*corev1.Pod](obj)
	if !ok {
		return
	}
	c.silentMu.Lock()
	delete(c.silentSince, pod.UID)
	c.silentMu.Unlock()
	c.deletedPods.Delete(pod.UID)
	c.enqueueRunsOn(pod.Namespace, pod.Name)
}

// leaseChanged wakes the Runs of the Pod a heartbeat Lease is named after.
// Renewals need no event: each Run waits on a timer for the moment its
// Pod's heartbeat would be lost, and looks at the Lease again then.
func (c *Controller) leaseChanged(obj any) {
	if lease, ok := tombstone.As[*coordinationv1.Lease](obj); ok {
		c.enqueueRunsOn(lease.Namespace, lease.Name)
	}
}

func (c *Controller) leaseUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*coordinationv1.Lease)
	lease, ok2 := newObj.(*coordinationv1.Lease)
	if !ok1 || !ok2 {
		return
	}
	if !apiequality.Semantic.DeepEqual(old.Spec.HolderIdentity, lease.Spec.HolderIdentity) {
		c.enqueueRunsOn(lease.Namespace, lease.Name)
	}
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	if err == nil {
		c.queue.Forget(key)
		return true
	}
	if apierrors.IsConflict(err) {
		// Routine: the Run changed meanwhile (runtimed, the scheduler,
		// another leader); the next sync reads the newer copy.
		klog.FromContext(ctx).V(4).Info("Conflict, will retry", "key", key, "err", err)
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "Failed to recover Run, will retry", "key", key)
	}
	c.queue.AddRateLimited(key)
	return true
}

// sync recovers the Run of key if the Pod it holds is lost. It decides from
// informer state (and one GET to confirm a Pod the informer does not show),
// writes with the Run's resourceVersion, and every step is idempotent, so
// running it twice — or on two leaders, one after the other — recovers the
// Run once.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // never valid; retrying does not help
	}
	run, err := c.runs.Runs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !holdsPod(run) {
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "run", klog.KObj(run), "runUID", run.UID,
		"attempt", run.Status.Attempt, "pod", klog.KRef(run.Namespace, run.Status.AssignedPod), "podUID", run.Status.AssignedPodUID)
	ctx = klog.NewContext(ctx, logger)
	now := c.clock.Now()
	l, err := c.assess(ctx, run, now)
	if err != nil || l == nil {
		return err
	}
	return c.recover(ctx, run, l, now)
}
