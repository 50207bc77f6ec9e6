package tasks

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/metrics"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

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
	if lost {
		result = nil
	}
	return c.finish(ctx, key, run, exec, outcomeOf(run, result, stop, runstatus.DeadlinePassed(run, c.clock.Now())))
}

// finish writes the outcome of an attempt (a terminal phase or a retry),
// then releases its execution. exec is nil when there is none.
func (c *Controller) finish(ctx context.Context, key string, run *v1alpha1.Run, exec *execution, o runstatus.Outcome) error {
	logger := runstatus.Logger(ctx, run)
	if exec != nil {
		c.saveLog(ctx, run, exec)
	}
	updated, retried := runstatus.Finish(run, o, c.clock.Now())
	if _, err := runstatus.Update(ctx, c.runs, updated); err != nil {
		return fmt.Errorf("record the outcome of Run %s: %w", key, err)
	}
	phase := string(updated.Status.Phase)
	metrics.Executions.WithLabelValues(phase, metrics.ReasonLabel(o.Reason)).Inc()
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
		if err := c.workspace.Remove(run.UID); err != nil {
			runstatus.ReportWorkspaceNotRemoved(logger, c.recorder, key, run.UID, err)
		}
		return nil
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
		runstatus.ReportWorkspaceNotRemoved(exec.logger, c.recorder, exec.key, exec.uid, err)
	}
	c.mu.Lock()
	if exec.cancelWait != nil {
		exec.cancelWait()
	}
	owned := c.executions[exec.key] == exec
	if owned {
		delete(c.executions, exec.key)
	}
	c.mu.Unlock()
	if owned {
		// The release wakes the Scheduled Runs waiting for a slot.
		c.slots.Release(exec.uid)
	}
	exec.logger.Info("Execution released", "executionID", exec.id)
	return nil
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

// saveLog hands the attempt's kept log to kruntimes-apiserver before its
// outcome is written, so a client that saw the outcome reads all of it. A
// refused log is logged, never waited on: the outcome is written anyway.
// An attempt that wrote nothing costs no write: runs/log answers an
// attempt without a kept log as an empty one.
func (c *Controller) saveLog(ctx context.Context, run *v1alpha1.Run, exec *execution) {
	c.mu.Lock()
	result := exec.result
	c.mu.Unlock()
	if l := result.GetLog(); l == nil || (len(l.GetChunks()) == 0 && l.GetDroppedBytes() == 0) {
		return
	}
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if err := c.runs.Runs(run.Namespace).SaveLog(rpcCtx, run.Name, run.Status.Attempt, runLogOf(result.GetLog())); err != nil {
		runstatus.Logger(ctx, run).Error(err, "The apiserver did not keep the attempt's log; recording its outcome anyway", "attempt", run.Status.Attempt)
	}
}

// runLogOf is the Runtime Server's log as the API carries it.
func runLogOf(l *runtimev1.TaskLog) *v1alpha1.RunLog {
	out := &v1alpha1.RunLog{
		Chunks:       make([]v1alpha1.RunLogChunk, len(l.GetChunks())),
		DroppedBytes: l.GetDroppedBytes(),
		DroppedAfter: l.GetDroppedAfter(),
	}
	for i, c := range l.GetChunks() {
		stream := v1alpha1.RunLogStreamStdout
		if c.GetStream() == runtimev1.LogStream_LOG_STREAM_STDERR {
			stream = v1alpha1.RunLogStreamStderr
		}
		out.Chunks[i] = v1alpha1.RunLogChunk{Stream: stream, UnixNano: c.GetUnixNano(), Data: c.GetData()}
	}
	return out
}
