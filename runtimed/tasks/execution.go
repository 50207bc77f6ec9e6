package tasks

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/heartbeat"
	"kruntimes.io/kruntimes/runtimed/runstatus"
	"kruntimes.io/kruntimes/runtimed/secretenv"
)

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
		switch {
		case run.Spec.CancelRequested:
			return c.finish(ctx, key, run, exec, runstatus.Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled,
				Message: "the task was cancelled before it started because spec.cancelRequested is true"})
		case run.Status.Phase == lifecycle.Running && runstatus.DeadlinePassed(run, c.clock.Now()):
			return c.finish(ctx, key, run, exec, runstatus.Outcome{Phase: lifecycle.Timeout, Reason: lifecycle.ReasonTimeout,
				Message: fmt.Sprintf("spec.timeout (%s from startTime) passed before the task could start", timeoutOf(run))})
		}
		if err := c.heartbeatLapsed(); err != nil {
			// Retried with backoff: the Lease may renew, or recovery
			// takes the Run away.
			return fmt.Errorf("not starting execution %s: %w", exec.id, err)
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
	switch {
	case stop != stopNone:
		// Already stopping; Wait returning brings the Run back.
	case run.Spec.CancelRequested:
		return c.stop(ctx, exec, stopCancelled)
	case c.heartbeatLapsed() != nil:
		return c.stop(ctx, exec, stopFenced)
	case runstatus.DeadlinePassed(run, c.clock.Now()):
		return c.stop(ctx, exec, stopTimeout)
	case !runstatus.Deadline(run).IsZero():
		c.queue.AddAfter(key, runstatus.Deadline(run).Sub(c.clock.Now()))
	}
	return nil
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
	env, err := secretenv.Resolve(ctx, c.secrets, run)
	switch {
	case secretenv.IsRefused(err):
		return &startError{runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonStartFailed, Message: err.Error()}}
	case err != nil:
		return fmt.Errorf("resolve the env of %s (will retry): %w", exec.id, err)
	}
	req.Env = env
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
		if c.heartbeat != nil {
			// A lapse wakes the Run, whose sync then kills the execution.
			bound, release := c.heartbeat.Bound(waitCtx)
			defer release()
			lapsed := context.AfterFunc(bound, func() {
				if errors.Is(context.Cause(bound), heartbeat.ErrLapsed) {
					c.queue.Add(exec.key)
				}
			})
			defer lapsed()
		}
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

// heartbeatLapsed returns why no task may run here now, if the Pod's
// heartbeat Lease has lapsed.
func (c *Controller) heartbeatLapsed() error {
	if c.heartbeat == nil {
		return nil
	}
	return c.heartbeat.Fresh()
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
