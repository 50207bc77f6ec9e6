package tasks

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"kruntimes.io/kruntimes/runtimed/metrics"
	"kruntimes.io/kruntimes/runtimed/runstatus"
	"kruntimes.io/kruntimes/runtimed/slots"
	"kruntimes.io/kruntimes/runtimed/workspace"
)

// Timeouts of calls to the Runtime Server. Wait is the exception: it blocks
// until the task ends.
const (
	rpcTimeout = 10 * time.Second
	// releaseTimeout bounds how long a release waits for a cancelled
	// process to be reaped before it tries again later.
	releaseTimeout = 15 * time.Second
	// adoptTimeout bounds the startup sweep of executions the Runtime Server
	// retained; past it the Runtime Server is probably not up yet, and
	// per-Run syncs adopt what they find.
	adoptTimeout = 20 * time.Second
)

// Config wires a Controller.
type Config struct {
	// Runs writes Run status.
	Runs kruntimesclient.RunsGetter
	// Informer must list and watch only the Runs of Pod.Namespace with
	// fieldSelector status.assignedPod=Pod.Name,status.assignedPodUID=Pod.UID.
	Informer runinformers.RunInformer
	// RuntimeServer is the local Runtime Server.
	RuntimeServer runtimev1.RuntimeClient
	// Workspace is the shared workspace root.
	Workspace workspace.Root
	Pod       runtimepod.Pod
	// Slots is the Pod's capacity, shared with the function controller.
	Slots *slots.Table
	Clock clock.Clock
	// Recorder records Events on Runs for what a user should see; none
	// when nil.
	Recorder record.EventRecorder
	// Heartbeat, when set, fences tasks as it fences functions' invokes:
	// no execution starts while the Pod's heartbeat Lease has lapsed, and
	// one running is killed when it lapses, since recovery may then place
	// the Run's next attempt on another Pod.
	Heartbeat Heartbeat
	// Secrets reads the Secrets env[].valueFrom.secretKeyRef names, with
	// runtimed's own identity; a Run that names one fails to start when
	// nil.
	Secrets corev1client.SecretsGetter
}

// Heartbeat is the Pod's heartbeat Lease as the controller sees it
// (runtimed/heartbeat.Heartbeat).
type Heartbeat interface {
	// Fresh returns an error when the Lease has lapsed.
	Fresh() error
	// Bound returns a context that ends when the Lease lapses.
	Bound(parent context.Context) (context.Context, context.CancelFunc)
}

// eventAdopted is the Event reason of an execution taken over after a
// restart; the other Events use the lifecycle reasons of apis/lifecycle.
const eventAdopted = "Adopted"

// Controller executes the task Runs assigned to its Pod.
type Controller struct {
	runs          kruntimesclient.RunsGetter
	lister        runlisters.RunLister
	synced        cache.InformerSynced
	runtimeServer runtimev1.RuntimeClient
	workspace     workspace.Root
	pod           runtimepod.Pod
	slots         *slots.Table
	clock         clock.Clock
	recorder      record.EventRecorder
	heartbeat     Heartbeat
	secrets       corev1client.SecretsGetter
	queue         workqueue.TypedRateLimitingInterface[string]
	workers       *health.Loop

	mu sync.Mutex
	// executions holds, by Run key, every execution this Pod claimed or
	// adopted and has not released yet; each holds a slot.
	executions map[string]*execution
	// finished remembers the attempt whose outcome was just written, so a
	// stale informer copy still showing it Running is not mistaken for a
	// lost execution.
	finished map[string]attemptRef
}

type attemptRef struct {
	uid     types.UID
	attempt int32
}

// execution is one attempt of a Run on the Runtime Server.
type execution struct {
	attemptRef
	key string
	id  string
	// timeoutMillis is fixed at claim so a repeated Execute is identical,
	// which is what the Runtime Server's idempotency compares.
	timeoutMillis int64
	claimedAt     time.Time
	logger        klog.Logger

	// Guarded by Controller.mu.
	started    bool // Execute succeeded or the execution was adopted
	waiting    bool // a Wait goroutine runs; done closes when it ends
	done       chan struct{}
	result     *runtimev1.TaskStatus
	lost       bool
	stop       stopReason
	cancelWait context.CancelFunc
}

// New returns a Controller; call Run to start it.
func New(cfg Config) (*Controller, error) {
	if cfg.Slots == nil {
		return nil, fmt.Errorf("a task controller needs the Pod's slot table")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Recorder == nil {
		// A FakeRecorder without a channel drops every event.
		cfg.Recorder = &record.FakeRecorder{}
	}
	c := &Controller{
		runs:          cfg.Runs,
		lister:        cfg.Informer.Lister(),
		synced:        cfg.Informer.Informer().HasSynced,
		runtimeServer: cfg.RuntimeServer,
		workspace:     cfg.Workspace,
		pod:           cfg.Pod,
		slots:         cfg.Slots,
		clock:         cfg.Clock,
		recorder:      cfg.Recorder,
		heartbeat:     cfg.Heartbeat,
		secrets:       cfg.Secrets,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "runtimed_tasks"}),
		executions: map[string]*execution{},
		finished:   map[string]attemptRef{},
	}
	_, err := cfg.Informer.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: runstatus.IsTask,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
			// Deleted, or no longer assigned here (the field selector
			// dropped it): either way a local execution must go.
			DeleteFunc: c.enqueue,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("add Run event handler: %w", err)
	}
	c.workers = health.NewLoop("task-workers", workerStallBound, c.queue.Len, cfg.Clock)
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

// Liveness fails while Runs wait and no worker takes any: every sync is
// bounded by its calls' timeouts, so that only happens to wedged workers.
func (c *Controller) Liveness() health.Check { return c.workers.Check() }

// workerStallBound is longer than any one sync may take.
const workerStallBound = 2 * time.Minute

// HasSynced reports whether the Run informer has synced; /readyz uses it.
func (c *Controller) HasSynced() bool { return c.synced() }

// Run processes Runs with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting task controller", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "capacity", c.slots.Capacity())
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	// Before any claim: forget what no Run owns any more, so that retained
	// executions of finished Runs do not linger in the Runtime Server.
	c.sweepRetained(ctx)
	var wg sync.WaitGroup
	c.workers.Start()
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	logger.Info("Stopping task controller")
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
		// Someone wrote the Run since our copy: re-read and re-decide.
		klog.FromContext(ctx).V(2).Info("Run changed while syncing; retrying with a fresh copy", "key", key)
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing Run failed; will retry", "key", key)
	}
	c.queue.AddRateLimited(key)
	return true
}

// sync reconciles one Run with the local executions. It decides everything
// from the Run as observed and the execution table, so running it twice is
// harmless: a write from a stale copy fails with a conflict and is redone.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // never valid; retrying does not help
	}
	run, err := c.lister.Runs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetFinished(key)
		if exec := c.execution(key); exec != nil {
			exec.logger.Info("Run deleted or reassigned; cancelling its execution")
			return c.release(ctx, exec)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if run.Spec.Mode.Task == nil {
		// Function Runs are registered by a later runtimed; never touch them.
		return nil
	}
	mine := run.Status.AssignedPodUID == c.pod.UID
	exec := c.execution(key)
	if exec != nil && !(exec.uid == run.UID && mine && exec.attempt == run.Status.Attempt) {
		exec.logger.Info("Run no longer holds this execution; cancelling it", "phase", run.Status.Phase)
		if err := c.release(ctx, exec); err != nil {
			return err
		}
		exec = nil
	}
	if !mine {
		return nil
	}
	if run.DeletionTimestamp != nil {
		// Deleting (someone else's finalizer holds it): stop, never start.
		if exec != nil {
			exec.logger.Info("Run is being deleted; cancelling its execution")
			return c.release(ctx, exec)
		}
		return nil
	}
	switch {
	case run.Status.Phase == lifecycle.Scheduled && exec != nil:
		// The informer has not caught up with our own claim yet.
		return c.progress(ctx, key, run, exec)
	case run.Status.Phase == lifecycle.Scheduled:
		return c.claim(ctx, key, run)
	case run.Status.Phase == lifecycle.Running && exec != nil:
		return c.progress(ctx, key, run, exec)
	case run.Status.Phase == lifecycle.Running:
		if c.wasFinished(key, run) {
			return nil // a stale copy; the terminal status is on its way
		}
		return c.adopt(ctx, key, run)
	case exec != nil && lifecycle.IsTerminal(run.Status.Phase):
		// Someone else ended it (or our write raced a restart).
		exec.logger.Info("Run is terminal; releasing its execution", "phase", run.Status.Phase)
		return c.release(ctx, exec)
	}
	return nil
}

func (c *Controller) execution(key string) *execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.executions[key]
}

func (c *Controller) wasFinished(key string, run *v1alpha1.Run) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.finished[key] == attemptRef{uid: run.UID, attempt: run.Status.Attempt}
}

func (c *Controller) forgetFinished(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.finished, key)
}

// enqueueWaitingRuns re-queues the Scheduled task Runs of this Pod after a
// slot freed.
func (c *Controller) enqueueWaitingRuns() {
	runs, err := c.lister.Runs(c.pod.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, run := range runs {
		if run.Spec.Mode.Task != nil && run.Status.Phase == lifecycle.Scheduled && run.Status.AssignedPodUID == c.pod.UID {
			c.enqueue(run)
		}
	}
}

func countRPCError(rpc string, err error) {
	metrics.RuntimeServerErrors.WithLabelValues(rpc, status.Code(err).String()).Inc()
}
