package tasks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
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
	"kruntimes.io/kruntimes/runtimed/metrics"
	"kruntimes.io/kruntimes/runtimed/runstatus"
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
	// fieldSelector status.assignedPod=Pod.Name.
	Informer runinformers.RunInformer
	// RuntimeServer is the local Runtime Server.
	RuntimeServer runtimev1.RuntimeClient
	// Workspace is the shared workspace root.
	Workspace workspace.Root
	Pod       runtimepod.Pod
	// Capacity is the most executions held at once; at least 1.
	Capacity int
	Clock    clock.Clock
	// Recorder records Events on Runs for what a user should see; none
	// when nil.
	Recorder record.EventRecorder
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
	capacity      int
	clock         clock.Clock
	recorder      record.EventRecorder
	queue         workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// executions holds, by Run key, every execution this Pod claimed or
	// adopted and has not released yet; its size never exceeds capacity
	// because of claims.
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
	if cfg.Capacity < 1 {
		return nil, fmt.Errorf("capacity must be at least 1, got %d", cfg.Capacity)
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
		capacity:      cfg.Capacity,
		clock:         cfg.Clock,
		recorder:      cfg.Recorder,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "runtimed_tasks"}),
		executions: map[string]*execution{},
		finished:   map[string]attemptRef{},
	}
	_, err := cfg.Informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		// Deleted, or no longer assigned here (the field selector dropped
		// it): either way a local execution must go.
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("add Run event handler: %w", err)
	}
	metrics.Capacity.Set(float64(cfg.Capacity))
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

// HasSynced reports whether the Run informer has synced; /readyz uses it.
func (c *Controller) HasSynced() bool { return c.synced() }

// Run processes Runs with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting task controller", "pod", klog.KRef(c.pod.Namespace, c.pod.Name), "capacity", c.capacity)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}
	// Before any claim: forget what no Run owns any more, so that retained
	// executions of finished Runs do not linger in the Runtime Server.
	c.sweepRetained(ctx)
	var wg sync.WaitGroup
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

func runLogger(ctx context.Context, run *v1alpha1.Run) klog.Logger {
	return klog.FromContext(ctx).WithValues("namespace", run.Namespace, "run", run.Name, "runUID", run.UID, "attempt", run.Status.Attempt)
}

// claim moves a Scheduled Run to Running when a slot is free, then starts it.
func (c *Controller) claim(ctx context.Context, key string, run *v1alpha1.Run) error {
	logger := runLogger(ctx, run)
	if run.Spec.CancelRequested {
		// Never started: nothing to kill, only the record to write.
		return c.finish(ctx, key, run, nil, runstatus.Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled,
			Message: "the task was cancelled before it started because spec.cancelRequested is true"})
	}
	now := c.clock.Now()
	exec := &execution{
		attemptRef: attemptRef{uid: run.UID, attempt: run.Status.Attempt},
		key:        key,
		id:         runstatus.ExecutionID(run.UID, run.Status.Attempt),
		claimedAt:  now,
		logger:     logger,
	}
	if run.Spec.Timeout != nil {
		exec.timeoutMillis = max(run.Spec.Timeout.Milliseconds(), 1)
	}
	c.mu.Lock()
	if len(c.executions) >= c.capacity {
		c.mu.Unlock()
		// A released slot enqueues every Scheduled Run again.
		logger.V(2).Info("No free slot; the Run waits for one", "capacity", c.capacity)
		return nil
	}
	c.executions[key] = exec
	metrics.RunningExecutions.Set(float64(len(c.executions)))
	c.mu.Unlock()

	claimed, err := c.updateStatus(ctx, runstatus.Claim(run, metav1.NewMicroTime(now)))
	if err != nil {
		c.drop(exec)
		return fmt.Errorf("claim Run %s: %w", key, err)
	}
	if run.Status.ScheduledTime != nil {
		metrics.ClaimLatency.Observe(now.Sub(run.Status.ScheduledTime.Time).Seconds())
	}
	logger.Info("Claimed Run", "executionID", exec.id)
	return c.progress(ctx, key, claimed, exec)
}

// drop removes exec from the table without touching the Runtime Server:
// for a claim that never reached it.
func (c *Controller) drop(exec *execution) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.executions[exec.key] == exec {
		delete(c.executions, exec.key)
		metrics.RunningExecutions.Set(float64(len(c.executions)))
	}
}

// progress moves a claimed execution forward: start it, stop it on timeout
// or cancellation, or record its outcome once Wait returned.
func (c *Controller) progress(ctx context.Context, key string, run *v1alpha1.Run, exec *execution) error {
	c.mu.Lock()
	started, waiting, stop := exec.started, exec.waiting, exec.stop
	var done <-chan struct{} = exec.done
	c.mu.Unlock()

	if !started {
		// A start that failed transiently is retried, unless the Run should
		// not run any more.
		deadline := runstatus.Deadline(run)
		switch {
		case run.Spec.CancelRequested:
			return c.finish(ctx, key, run, exec, runstatus.Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled,
				Message: "the task was cancelled before it started because spec.cancelRequested is true"})
		case run.Status.Phase == lifecycle.Running && !deadline.IsZero() && !c.clock.Now().Before(deadline):
			return c.finish(ctx, key, run, exec, runstatus.Outcome{Phase: lifecycle.Timeout, Reason: lifecycle.ReasonTimeout,
				Message: fmt.Sprintf("spec.timeout (%s from startTime) passed before the task could start", timeoutOf(run))})
		}
		if err := c.start(ctx, run, exec); err != nil {
			var failed *startError
			if errors.As(err, &failed) {
				return c.finish(ctx, key, run, exec, failed.outcome)
			}
			return err
		}
		c.mu.Lock()
		waiting, done = exec.waiting, exec.done
		c.mu.Unlock()
	}
	if waiting {
		select {
		case <-done:
			return c.complete(ctx, key, run, exec)
		default:
		}
	}

	// Still running: stop it when the user or the clock says so.
	deadline := runstatus.Deadline(run)
	switch {
	case run.Spec.CancelRequested && stop == stopNone:
		return c.stop(ctx, exec, stopCancelled)
	case !deadline.IsZero() && !c.clock.Now().Before(deadline) && stop == stopNone:
		return c.stop(ctx, exec, stopTimeout)
	case !deadline.IsZero() && stop == stopNone:
		c.queue.AddAfter(key, deadline.Sub(c.clock.Now()))
	}
	return nil
}

// complete records the outcome of an execution whose Wait returned.
func (c *Controller) complete(ctx context.Context, key string, run *v1alpha1.Run, exec *execution) error {
	c.mu.Lock()
	result, lost, stop := exec.result, exec.lost, exec.stop
	c.mu.Unlock()
	if result == nil && !lost {
		return fmt.Errorf("waiting for execution %s stopped without a result", exec.id)
	}
	if run.Status.Phase != lifecycle.Running {
		return nil // the informer has not shown our claim yet; its update brings us back
	}
	deadline := runstatus.Deadline(run)
	passed := !deadline.IsZero() && !c.clock.Now().Before(deadline)
	if lost {
		result = nil
	}
	return c.finish(ctx, key, run, exec, outcomeOf(run, result, stop, passed))
}

// sourceFile is where inline source goes: source.inlinePath, else the
// entrypoint when it names a file in the workspace (so `entrypoint: main.sh`
// with inline source runs that source), else the workspace default.
func sourceFile(run *v1alpha1.Run) string {
	if p := run.Spec.Source.InlinePath; p != "" {
		return p
	}
	if ep := run.Spec.Mode.Task.Entrypoint; ep != "" && filepath.IsLocal(ep) {
		return ep
	}
	return ""
}

// startError is a start failure that ends the attempt rather than being
// retried by the workqueue.
type startError struct{ outcome runstatus.Outcome }

func (e *startError) Error() string { return e.outcome.Message }

// start materializes the source, executes it and starts waiting for it.
func (c *Controller) start(ctx context.Context, run *v1alpha1.Run, exec *execution) error {
	dir, source, err := c.workspace.Materialize(run.UID, run.Spec.Source.Inline, sourceFile(run))
	if err != nil {
		return &startError{runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonStartFailed, Message: err.Error()}}
	}
	entrypoint := &runtimev1.Entrypoint{Path: source, Args: run.Spec.Mode.Task.Args}
	if ep := run.Spec.Mode.Task.Entrypoint; ep != "" {
		// Relative to the workspace, where the Runtime Server runs it.
		entrypoint.Path = ep
	}
	req := &runtimev1.ExecuteRequest{
		TaskId:        exec.id,
		Program:       &runtimev1.ExecuteRequest_Entrypoint{Entrypoint: entrypoint},
		WorkingDir:    dir,
		TimeoutMillis: exec.timeoutMillis,
	}
	for _, e := range run.Spec.Env {
		req.Env = append(req.Env, &runtimev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := c.runtimeServer.Execute(rpcCtx, req); err != nil {
		countRPCError("Execute", err)
		switch status.Code(err) {
		case codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition:
			// The request itself is wrong; executing it again fails the same way.
			return &startError{runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonStartFailed,
				Message: "the Runtime Server refused the task: " + status.Convert(err).Message()}}
		}
		return fmt.Errorf("execute %s on the Runtime Server: %w", exec.id, err)
	}
	exec.logger.Info("Execution started", "executionID", exec.id)
	c.startWaiting(ctx, exec)
	return nil
}

// startWaiting marks exec started and runs its Wait goroutine.
func (c *Controller) startWaiting(ctx context.Context, exec *execution) {
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.mu.Lock()
	exec.started, exec.waiting = true, true
	exec.done = make(chan struct{})
	exec.cancelWait = cancel
	done := exec.done
	c.mu.Unlock()
	go func() {
		// Stop with the controller too, without cancelling the execution.
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		ended := c.waitFor(waitCtx, exec)
		// done closes before the Run is queued, so the sync it triggers
		// always sees the result.
		close(done)
		if ended {
			c.queue.Add(exec.key)
		}
	}()
}

// waitFor blocks in the Runtime Server's Wait until the execution ends,
// retrying only when the call itself fails (e.g. the Runtime Server
// restarts). It stores the result and reports whether there is one; false
// means ctx ended first.
func (c *Controller) waitFor(ctx context.Context, exec *execution) bool {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: 1 << 30}
	for {
		ts, err := c.runtimeServer.Wait(ctx, &runtimev1.WaitRequest{TaskId: exec.id, IncludeLogs: true})
		if ctx.Err() != nil {
			return false
		}
		switch {
		case err == nil:
			c.mu.Lock()
			exec.result = ts
			c.mu.Unlock()
			exec.logger.Info("Execution finished", "executionID", exec.id, "state", ts.GetState().String(),
				"exitCode", ts.GetExitCode(), "reason", ts.GetReason())
			return true
		case status.Code(err) == codes.NotFound:
			c.mu.Lock()
			exec.lost = true
			c.mu.Unlock()
			exec.logger.Info("Execution lost: the Runtime Server no longer knows it", "executionID", exec.id)
			return true
		}
		countRPCError("Wait", err)
		exec.logger.Error(err, "Waiting for the execution failed; retrying", "executionID", exec.id)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff.Step()):
		}
	}
}

// stop cancels a running execution for why; Wait then returns and progress
// records the outcome.
func (c *Controller) stop(ctx context.Context, exec *execution, why stopReason) error {
	c.mu.Lock()
	exec.stop = why
	c.mu.Unlock()
	exec.logger.Info("Cancelling execution", "executionID", exec.id, "reason", string(why))
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := c.runtimeServer.Cancel(rpcCtx, &runtimev1.CancelRequest{TaskId: exec.id}); err != nil {
		countRPCError("Cancel", err)
		c.mu.Lock()
		exec.stop = stopNone // try again on the next sync
		c.mu.Unlock()
		return fmt.Errorf("cancel execution %s: %w", exec.id, err)
	}
	return nil
}

// adopt takes over a Running Run that has no local execution, which happens
// after a runtimed restart: the Runtime Server may still have it.
func (c *Controller) adopt(ctx context.Context, key string, run *v1alpha1.Run) error {
	logger := runLogger(ctx, run)
	id := runstatus.ExecutionID(run.UID, run.Status.Attempt)
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	_, err := c.runtimeServer.Status(rpcCtx, &runtimev1.StatusRequest{TaskId: id})
	switch {
	case status.Code(err) == codes.NotFound:
		logger.Info("Running Run has no execution on the Runtime Server; it was lost", "executionID", id)
		deadline := runstatus.Deadline(run)
		passed := !deadline.IsZero() && !c.clock.Now().Before(deadline)
		return c.finish(ctx, key, run, nil, outcomeOf(run, nil, stopNone, passed))
	case err != nil:
		countRPCError("Status", err)
		return fmt.Errorf("look up execution %s on the Runtime Server: %w", id, err)
	}
	exec := &execution{
		attemptRef: attemptRef{uid: run.UID, attempt: run.Status.Attempt},
		key:        key,
		id:         id,
		claimedAt:  c.clock.Now(),
		logger:     logger,
	}
	if run.Status.StartTime != nil {
		exec.claimedAt = run.Status.StartTime.Time
	}
	c.mu.Lock()
	// Adopted executions count against capacity even past it: they are
	// already running, and refusing them would not stop them.
	c.executions[key] = exec
	metrics.RunningExecutions.Set(float64(len(c.executions)))
	c.mu.Unlock()
	logger.Info("Adopted execution after restart", "executionID", id)
	c.recorder.Eventf(run, corev1.EventTypeNormal, eventAdopted, "runtimed restarted and took over attempt %d", exec.attempt)
	c.startWaiting(ctx, exec)
	return c.progress(ctx, key, run, exec)
}

// finish writes the outcome of an attempt (a terminal phase or a retry),
// then releases its execution. exec is nil when there is none.
func (c *Controller) finish(ctx context.Context, key string, run *v1alpha1.Run, exec *execution, o runstatus.Outcome) error {
	logger := runLogger(ctx, run)
	updated, retried := runstatus.Finish(run, o, c.clock.Now())
	if _, err := c.updateStatus(ctx, updated); err != nil {
		return fmt.Errorf("record the outcome of Run %s: %w", key, err)
	}
	phase := string(updated.Status.Phase)
	metrics.Executions.WithLabelValues(phase, o.Reason).Inc()
	if retried {
		logger.Info("Attempt failed; Run goes back to Pending for a retry", "reason", o.Reason, "nextAttempt", updated.Status.Attempt, "message", updated.Status.Message)
		c.recorder.Eventf(run, corev1.EventTypeWarning, lifecycle.ReasonRetrying, "Attempt %d failed (%s); attempt %d will be scheduled", run.Status.Attempt, o.Reason, updated.Status.Attempt)
	} else {
		logger.Info("Run completed", "phase", phase, "reason", o.Reason, "exitCode", o.ExitCode)
		// Events are written to the cluster's etcd: a routine success,
		// thousands a minute, is in the Run's status and the log line
		// above, not in an Event. Anything else gets one.
		if o.Phase != lifecycle.Succeeded {
			eventType := corev1.EventTypeNormal
			if o.Phase == lifecycle.Failed || o.Phase == lifecycle.Timeout {
				eventType = corev1.EventTypeWarning
			}
			c.recorder.Event(run, eventType, reasonOrPhase(o), "Run "+phase+": "+firstLine(updated.Status.Message))
		}
	}
	c.mu.Lock()
	c.finished[key] = attemptRef{uid: run.UID, attempt: run.Status.Attempt}
	c.mu.Unlock()
	if exec == nil {
		// Nothing ran here, but an earlier attempt may have left files.
		return c.workspace.Remove(run.UID)
	}
	metrics.ExecutionDuration.WithLabelValues(phase).Observe(c.clock.Since(exec.claimedAt).Seconds())
	return c.release(ctx, exec)
}

// release makes sure exec's process is gone, forgets it on the Runtime
// Server, removes the Run's workspace and frees its slot. It is idempotent.
func (c *Controller) release(ctx context.Context, exec *execution) error {
	c.mu.Lock()
	started, waiting, done, result, lost := exec.started, exec.waiting, exec.done, exec.result, exec.lost
	c.mu.Unlock()
	if started && result == nil && !lost {
		rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := c.runtimeServer.Cancel(rpcCtx, &runtimev1.CancelRequest{TaskId: exec.id})
		cancel()
		if err != nil {
			countRPCError("Cancel", err)
			return fmt.Errorf("cancel execution %s: %w", exec.id, err)
		}
		if waiting {
			// Wait returns once the process group is reaped.
			select {
			case <-done:
			case <-time.After(releaseTimeout):
				return fmt.Errorf("execution %s did not end within %s of being cancelled; will check again", exec.id, releaseTimeout)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if _, err := c.runtimeServer.Forget(rpcCtx, &runtimev1.ForgetRequest{TaskId: exec.id}); err != nil {
		countRPCError("Forget", err)
		return fmt.Errorf("forget execution %s: %w", exec.id, err)
	}
	if err := c.workspace.Remove(exec.uid); err != nil {
		return err
	}
	c.mu.Lock()
	if exec.cancelWait != nil {
		exec.cancelWait()
	}
	if c.executions[exec.key] == exec {
		delete(c.executions, exec.key)
	}
	metrics.RunningExecutions.Set(float64(len(c.executions)))
	c.mu.Unlock()
	exec.logger.Info("Execution released", "executionID", exec.id)
	c.enqueueWaitingRuns()
	return nil
}

// enqueueWaitingRuns re-queues Scheduled Runs of this Pod after a slot freed.
func (c *Controller) enqueueWaitingRuns() {
	runs, err := c.lister.Runs(c.pod.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, run := range runs {
		if run.Status.Phase == lifecycle.Scheduled && run.Status.AssignedPodUID == c.pod.UID {
			c.enqueue(run)
		}
	}
}

func (c *Controller) updateStatus(ctx context.Context, run *v1alpha1.Run) (*v1alpha1.Run, error) {
	updated, err := c.runs.Runs(run.Namespace).UpdateStatus(ctx, run, metav1.UpdateOptions{})
	switch {
	case err == nil:
		metrics.StatusUpdates.WithLabelValues("ok").Inc()
	case apierrors.IsConflict(err):
		metrics.StatusUpdates.WithLabelValues("conflict").Inc()
	default:
		metrics.StatusUpdates.WithLabelValues("error").Inc()
	}
	return updated, err
}

// sweepRetained forgets the executions the Runtime Server retained for
// attempts that no Run of this Pod still runs, e.g. when runtimed stopped
// between writing an outcome and forgetting it, and removes their
// workspaces. Running Runs whose execution is retained are adopted by sync.
func (c *Controller) sweepRetained(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	var list *runtimev1.ListResponse
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		list, err = c.runtimeServer.List(ctx, &runtimev1.ListRequest{})
		return err == nil, nil
	})
	if err != nil {
		logger.Info("The Runtime Server did not answer List; skipping the sweep of retained executions", "timeout", adoptTimeout)
		return
	}
	runs, err := c.lister.Runs(c.pod.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	active := map[types.UID]int32{}
	for _, run := range runs {
		if run.Status.AssignedPodUID == c.pod.UID && run.Status.Phase == lifecycle.Running {
			active[run.UID] = run.Status.Attempt
		}
	}
	for _, ts := range list.GetTasks() {
		uid, attempt, ok := runstatus.ParseExecutionID(ts.GetTaskId())
		if !ok {
			continue
		}
		if a, running := active[uid]; running && a == attempt {
			continue
		}
		l := logger.WithValues("runUID", uid, "attempt", attempt, "executionID", ts.GetTaskId())
		if _, err := c.runtimeServer.Cancel(ctx, &runtimev1.CancelRequest{TaskId: ts.GetTaskId()}); err != nil {
			l.Error(err, "Cancelling a retained execution no Run holds failed")
			continue
		}
		if ts.GetState() == runtimev1.TaskState_TASK_STATE_RUNNING {
			waitCtx, cancel := context.WithTimeout(ctx, releaseTimeout)
			_, _ = c.runtimeServer.Wait(waitCtx, &runtimev1.WaitRequest{TaskId: ts.GetTaskId()})
			cancel()
		}
		if _, err := c.runtimeServer.Forget(ctx, &runtimev1.ForgetRequest{TaskId: ts.GetTaskId()}); err != nil {
			l.Error(err, "Forgetting a retained execution no Run holds failed")
			continue
		}
		if _, running := active[uid]; !running {
			if err := c.workspace.Remove(uid); err != nil {
				l.Error(err, "Removing the workspace of a released execution failed")
			}
		}
		l.Info("Forgot retained execution that no Run holds")
	}
	// Then the workspaces of Runs that no longer run here, e.g. left by a runtimed
	// that stopped after its Runtime Server forgot the execution.
	if dirs, err := os.ReadDir(string(c.workspace)); err == nil {
		for _, d := range dirs {
			uid := types.UID(d.Name())
			if _, running := active[uid]; d.IsDir() && !running {
				if err := c.workspace.Remove(uid); err != nil {
					logger.Error(err, "Removing a leftover workspace failed", "runUID", uid)
				}
			}
		}
	}
}

func countRPCError(rpc string, err error) {
	metrics.RuntimeServerErrors.WithLabelValues(rpc, status.Code(err).String()).Inc()
}

func reasonOrPhase(o runstatus.Outcome) string {
	if o.Reason != "" {
		return o.Reason
	}
	return string(o.Phase)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
