package tasks

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/metrics"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

// claim moves a Scheduled Run to Running when a slot is free, then starts it.
func (c *Controller) claim(ctx context.Context, key string, run *v1alpha1.Run) error {
	logger := runstatus.Logger(ctx, run)
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
	if !c.slots.Acquire(run.UID, lifecycle.ModeTask) {
		// A released slot enqueues every Scheduled Run again.
		logger.V(2).Info("No free slot; the Run waits for one", "capacity", c.slots.Capacity())
		return nil
	}
	c.mu.Lock()
	c.executions[key] = exec
	c.mu.Unlock()

	claimed, err := runstatus.Update(ctx, c.runs, runstatus.Claim(run, metav1.NewMicroTime(now)))
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

// drop forgets exec and frees its slot without touching the Runtime
// Server: for a claim that never reached it.
func (c *Controller) drop(exec *execution) {
	c.mu.Lock()
	owned := c.executions[exec.key] == exec
	if owned {
		delete(c.executions, exec.key)
	}
	c.mu.Unlock()
	if owned {
		c.slots.Release(exec.uid)
	}
}

// adopt takes over a Running Run that has no local execution, which happens
// after a runtimed restart: the Runtime Server may still have it.
func (c *Controller) adopt(ctx context.Context, key string, run *v1alpha1.Run) error {
	logger := runstatus.Logger(ctx, run)
	id := runstatus.ExecutionID(run.UID, run.Status.Attempt)
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	_, err := c.runtimeServer.Status(rpcCtx, &runtimev1.StatusRequest{TaskId: id})
	switch {
	case status.Code(err) == codes.NotFound:
		logger.Info("Running Run has no execution on the Runtime Server; it was lost", "executionID", id)
		return c.finish(ctx, key, run, nil, outcomeOf(run, nil, stopNone, runstatus.DeadlinePassed(run, c.clock.Now())))
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
	c.slots.Hold(run.UID, lifecycle.ModeTask)
	c.mu.Lock()
	c.executions[key] = exec
	c.mu.Unlock()
	logger.Info("Adopted execution after restart", "executionID", id)
	c.recorder.Eventf(run, corev1.EventTypeNormal, eventAdopted, "runtimed restarted and took over attempt %d", exec.attempt)
	c.startWaiting(ctx, exec)
	return c.progress(ctx, key, run, exec)
}
