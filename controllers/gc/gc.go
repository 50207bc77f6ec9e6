package gc

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	informers "kruntimes.io/kruntimes/client/informers/externalversions/kruntimes/v1alpha1"
	listers "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

// Controller deletes expired terminal Runs.
type Controller struct {
	client versioned.Interface
	lister listers.RunLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	clock  clock.Clock
}

// New returns a controller fed by runInformer.
func New(ctx context.Context, runInformer informers.RunInformer, client versioned.Interface) (*Controller, error) {
	c := &Controller{
		client: client,
		lister: runInformer.Lister(),
		synced: runInformer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kruntimes_gc"},
		),
		clock: clock.RealClock{},
	}
	logger := klog.FromContext(ctx)
	_, err := runInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueIfFinished(logger, obj) },
		UpdateFunc: func(_, obj any) { c.enqueueIfFinished(logger, obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("watching Runs for TTL cleanup: %w", err)
	}
	return c, nil
}

// Run processes the queue with workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx)
	logger.Info("Starting Run TTL controller")
	var wg sync.WaitGroup
	defer func() {
		logger.Info("Shutting down Run TTL controller")
		c.queue.ShutDown()
		wg.Wait()
	}()
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	for i := 0; i < workers; i++ {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
}

func (c *Controller) enqueueIfFinished(logger klog.Logger, obj any) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok || run.DeletionTimestamp != nil || !needsCleanup(run) {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(run)
	if err != nil {
		utilruntime.HandleErrorWithLogger(logger, err, "Cannot key Run", "run", klog.KObj(run))
		return
	}
	c.queue.Add(key)
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
	if err := c.sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Failed to clean up Run, will retry", "key", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync deletes the Run of key if its TTL has passed, or requeues it for when
// it will. It reads the Run fresh from the API before deleting, so a TTL
// raised meanwhile is honoured, and deletes with a UID precondition, so a
// recreated Run of the same name is never hit.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	run, err := c.lister.Runs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.expired(key, run) {
		return nil
	}
	fresh, err := c.client.KruntimesV1alpha1().Runs(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.expired(key, fresh) {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Deleting Run after its TTL", "run", klog.KObj(fresh), "phase", fresh.Status.Phase)
	err = c.client.KruntimesV1alpha1().Runs(namespace).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &fresh.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// expired reports whether run's TTL has passed, and requeues key for the
// moment it will otherwise.
func (c *Controller) expired(key string, run *v1alpha1.Run) bool {
	if run.DeletionTimestamp != nil || !needsCleanup(run) {
		return false
	}
	expireAt := finishTime(run).Add(time.Duration(*run.Spec.TTLSecondsAfterFinished) * time.Second)
	if left := expireAt.Sub(c.clock.Now()); left > 0 {
		c.queue.AddAfter(key, left)
		return false
	}
	return true
}

func needsCleanup(run *v1alpha1.Run) bool {
	return run.Spec.TTLSecondsAfterFinished != nil && lifecycle.IsTerminal(run.Status.Phase)
}

// finishTime is when run reached its terminal phase: completionTime, else
// the Completed condition's transition, else its creation.
func finishTime(run *v1alpha1.Run) time.Time {
	if t := run.Status.CompletionTime; t != nil {
		return t.Time
	}
	if cond := apimeta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionCompleted); cond != nil {
		return cond.LastTransitionTime.Time
	}
	return run.CreationTimestamp.Time
}
