package functions

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/retry"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

// unregisterMode says what happens to an invocation in flight when a
// registration is released.
type unregisterMode struct {
	cancel bool
	drain  time.Duration
}

var (
	// cancelInFlight: cancellation, timeouts and a lost assignment stop
	// the invocation in flight at once.
	cancelInFlight = unregisterMode{cancel: true}
	// drainOnDelete: a deleted Run lets the invocation in flight finish
	// for a bounded time, then cancels it.
	drainOnDelete = unregisterMode{drain: 10 * time.Second}
	// drainIdle: an idle Run has nothing in flight; one that slipped past
	// the gate straight to the Runtime Server is let finish.
	drainIdle = unregisterMode{drain: 30 * time.Second}
)

// stopIfAsked ends the Run when the user cancelled it or its lifetime is
// over; stopped says whether it did.
func (c *Controller) stopIfAsked(ctx context.Context, run *v1alpha1.Run, reg *registration) (stopped bool, err error) {
	switch {
	case run.Spec.CancelRequested:
		return true, c.end(ctx, run, reg, cancelInFlight, runstatus.Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled,
			Message: "the function was cancelled because spec.cancelRequested is true"})
	case runstatus.DeadlinePassed(run, c.clock.Now()):
		return true, c.end(ctx, run, reg, cancelInFlight, runstatus.Outcome{Phase: lifecycle.Timeout, Reason: lifecycle.ReasonLifetimeExceeded,
			Message: fmt.Sprintf("the function reached spec.timeout (%s from startTime) and was unregistered", run.Spec.Timeout.Duration)})
	}
	return false, nil
}

// checkIdle ends a Ready Run whose idle deadline, as the Runtime Server's
// own last-activity clock sets it, has passed with nothing in flight, and
// otherwise wakes the Run at that deadline.
func (c *Controller) checkIdle(ctx context.Context, key string, run *v1alpha1.Run, reg *registration) error {
	c.mu.RLock()
	deadline := reg.idleDeadline
	c.mu.RUnlock()
	if deadline.IsZero() {
		return nil // no idle timeout, or an invocation in flight
	}
	if wait := deadline.Sub(c.clock.Now()); wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	// Close the gate, then ask for the clock once more: an invocation that
	// started since the last list postponed the deadline.
	c.setAccepting(reg, false)
	c.mu.RLock()
	id := reg.id
	c.mu.RUnlock()
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	st, err := c.runtimeServer.FunctionStatus(rpcCtx, &runtimev1.FunctionStatusRequest{RunUid: string(reg.uid), RegistrationId: id})
	cancel()
	if err != nil {
		c.setAccepting(reg, true)
		countRPCError("FunctionStatus", err)
		return fmt.Errorf("confirm the idle deadline of Run %s: %w", key, err)
	}
	idleUntil := time.Unix(0, st.GetIdleDeadlineUnixNano())
	if st.GetIdleDeadlineUnixNano() == 0 || idleUntil.After(c.clock.Now()) {
		c.mu.Lock()
		reg.idleDeadline = time.Time{}
		if st.GetIdleDeadlineUnixNano() != 0 {
			reg.idleDeadline = idleUntil
		}
		c.mu.Unlock()
		c.setAccepting(reg, true)
		if st.GetIdleDeadlineUnixNano() != 0 {
			c.queue.AddAfter(key, idleUntil.Sub(c.clock.Now()))
		}
		return nil
	}
	idle := time.Duration(*run.Spec.Mode.Function.IdleTimeoutSeconds) * time.Second
	return c.end(ctx, run, reg, drainIdle, runstatus.Outcome{Phase: lifecycle.Timeout, Reason: lifecycle.ReasonIdleTimeout,
		Message: fmt.Sprintf("no invocation for idleTimeoutSeconds (%s, last activity %s); the function was unregistered",
			idle, time.Unix(0, st.GetLastActivityUnixNano()).UTC().Format(time.RFC3339Nano))})
}

func (c *Controller) setAccepting(reg *registration, accepting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reg.accepting = accepting && reg.id != ""
}

// lose handles a Ready Run whose registration went away on this Pod: it is
// not Ready any more, and the retry policy decides between registering a
// new attempt here and failing.
func (c *Controller) lose(ctx context.Context, key string, run *v1alpha1.Run, reg *registration, why string) error {
	c.setAccepting(reg, false)
	now := c.clock.Now()
	d := retry.Decide(run.Spec.RetryPolicy, run.Status.Attempt,
		retry.Failure{Reason: lifecycle.ReasonRegistrationLost, Message: why}, runstatus.Deadline(run), now)
	if !d.Retry {
		return c.end(ctx, run, reg, cancelInFlight, runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonRegistrationLost,
			Message: why + "; " + d.Why})
	}
	updated, err := runstatus.Update(ctx, c.runs, runstatus.Reregister(run, d, now))
	if err != nil {
		return fmt.Errorf("record the lost registration of Run %s: %w", key, err)
	}
	c.mu.Lock()
	reg.attempt, reg.id, reg.readyWritten, reg.idleDeadline = d.NextAttempt, "", false, time.Time{}
	c.mu.Unlock()
	reg.logger.Info("Registration lost; registering the next attempt on this Pod", "why", why, "nextAttempt", d.NextAttempt)
	c.recorder.Eventf(run, corev1.EventTypeWarning, lifecycle.ReasonRegistrationLost, "Attempt %d lost its registration (%s); registering attempt %d", run.Status.Attempt, why, d.NextAttempt)
	return c.register(ctx, key, updated, reg)
}

// registrationFailed handles a registration the Runtime Server could not
// load: the retry policy sends the Run back to Pending for another attempt
// (on whichever Pod the scheduler picks), or fails it with the Runtime
// Server's message.
func (c *Controller) registrationFailed(ctx context.Context, run *v1alpha1.Run, reg *registration, message string) error {
	now := c.clock.Now()
	failure := retry.Failure{Reason: lifecycle.ReasonRegistrationFailed, Message: message}
	d := retry.Decide(run.Spec.RetryPolicy, run.Status.Attempt, failure, runstatus.Deadline(run), now)
	if !d.Retry {
		return c.end(ctx, run, reg, cancelInFlight, runstatus.Outcome{Phase: lifecycle.Failed, Reason: lifecycle.ReasonRegistrationFailed,
			Message: "the registration failed: " + message})
	}
	// Nothing of the Run may stay on this Pod once it is Pending: release,
	// then write the retry, which also drops the registration-cleanup
	// finalizer (the registry does, on every function going back to
	// Pending).
	if err := c.release(ctx, reg, cancelInFlight); err != nil {
		return err
	}
	if _, err := runstatus.Update(ctx, c.runs, retry.Requeue(run, d, now)); err != nil {
		return fmt.Errorf("record the retry of Run %s: %w", reg.key, err)
	}
	c.markEnded(reg.key, run)
	reg.logger.Info("Registration failed; Run goes back to Pending for a retry", "nextAttempt", d.NextAttempt, "message", message)
	c.recorder.Eventf(run, corev1.EventTypeWarning, lifecycle.ReasonRegistrationFailed, "Attempt %d failed to register: %s; attempt %d will be scheduled",
		run.Status.Attempt, firstLine(message), d.NextAttempt)
	return nil
}

// end stops the Run for good: the gate closes, the registration and the
// workspace go and the slot is freed, then the terminal status is written
// and the finalizer removed (nothing Pod-local remains).
func (c *Controller) end(ctx context.Context, run *v1alpha1.Run, reg *registration, mode unregisterMode, o runstatus.Outcome) error {
	if err := c.release(ctx, reg, mode); err != nil {
		return err
	}
	updated, err := c.writeOutcome(ctx, run, o)
	if err != nil {
		return err
	}
	c.markEnded(reg.key, run)
	_, err = c.removeFinalizer(ctx, updated)
	return err
}

// writeOutcome writes a terminal status and the Event that tells the user.
func (c *Controller) writeOutcome(ctx context.Context, run *v1alpha1.Run, o runstatus.Outcome) (*v1alpha1.Run, error) {
	out, _ := runstatus.Finish(run, o, c.clock.Now())
	updated, err := runstatus.Update(ctx, c.runs, out)
	if err != nil {
		return nil, fmt.Errorf("record the end of Run %s/%s: %w", run.Namespace, run.Name, err)
	}
	runstatus.Logger(ctx, run).Info("Function Run ended", "phase", o.Phase, "reason", o.Reason, "message", firstLine(o.Message))
	eventType := corev1.EventTypeNormal
	if o.Phase == lifecycle.Failed || o.Reason == lifecycle.ReasonLifetimeExceeded {
		eventType = corev1.EventTypeWarning
	}
	c.recorder.Event(run, eventType, o.Reason, "Run "+string(o.Phase)+": "+firstLine(updated.Status.Message))
	return updated, nil
}

// finalize releases whatever this Pod still holds of a deleting or
// terminal Run, then removes the registration-cleanup finalizer; it is
// idempotent across restarts.
func (c *Controller) finalize(ctx context.Context, run *v1alpha1.Run, reg *registration) error {
	if reg != nil {
		mode := cancelInFlight
		if run.DeletionTimestamp != nil {
			mode = drainOnDelete
		}
		if err := c.release(ctx, reg, mode); err != nil {
			return err
		}
	} else if slices.Contains(run.Finalizers, lifecycle.FinalizerRegistrationCleanup) {
		// Left by a runtimed that stopped midway: fence the attempt and
		// remove the workspace before letting the Run go.
		if err := c.unregister(ctx, run.UID, run.Status.Attempt, "", cancelInFlight); err != nil {
			return err
		}
		if err := c.workspace.Remove(run.UID); err != nil {
			runstatus.ReportWorkspaceNotRemoved(runstatus.Logger(ctx, run), c.recorder, cache.MetaObjectToName(run).String(), run.UID, err)
		}
	}
	_, err := c.removeFinalizer(ctx, run)
	return err
}

// release is the Pod-local half of every way out: close the gate,
// UnregisterFunction (which drains or cancels what is in flight), remove
// the workspace, free the slot. It is idempotent.
func (c *Controller) release(ctx context.Context, reg *registration, mode unregisterMode) error {
	c.mu.Lock()
	reg.accepting = false
	id, attempt := reg.id, reg.attempt
	c.mu.Unlock()
	if err := c.unregister(ctx, reg.uid, attempt, id, mode); err != nil {
		return err
	}
	if err := c.workspace.Remove(reg.uid); err != nil {
		runstatus.ReportWorkspaceNotRemoved(reg.logger, c.recorder, reg.key, reg.uid, err)
	}
	c.untrack(reg)
	reg.logger.Info("Registration released")
	return nil
}

// unregister releases the registration of uid on the Runtime Server: by ID
// when runtimed has it, else by attempt, which also fences a registration
// whose RegisterFunction answer was never seen.
func (c *Controller) unregister(ctx context.Context, uid types.UID, attempt int32, id string, mode unregisterMode) error {
	timeout := rpcTimeout + mode.drain
	rpcCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := &runtimev1.UnregisterFunctionRequest{RunUid: string(uid), RegistrationId: id, RegistrationAttempt: int64(attempt),
		CancelInFlight: mode.cancel, DrainTimeoutMillis: mode.drain.Milliseconds()}
	_, err := c.runtimeServer.UnregisterFunction(rpcCtx, req)
	switch {
	case err == nil:
		return nil
	case status.Code(err) == codes.FailedPrecondition:
		// A newer generation holds the Run (its ID superseded ours): ours
		// cannot serve any more, which is what unregistering is for.
		return nil
	case status.Code(err) == codes.Unimplemented:
		return nil // a Runtime Server without functions registered nothing
	}
	countRPCError("UnregisterFunction", err)
	return fmt.Errorf("unregister Run %s attempt %d: %w", uid, attempt, err)
}

// ensureFinalizer makes sure registration-cleanup is on the Run before
// anything Pod-local exists, so the Run cannot disappear without this Pod
// cleaning up. The registry adds it in the claim's own write; this only
// writes for a Run claimed by a server that did not.
func (c *Controller) ensureFinalizer(ctx context.Context, run *v1alpha1.Run) (*v1alpha1.Run, error) {
	if slices.Contains(run.Finalizers, lifecycle.FinalizerRegistrationCleanup) {
		return run, nil
	}
	out := run.DeepCopy()
	out.Finalizers = append(out.Finalizers, lifecycle.FinalizerRegistrationCleanup)
	updated, err := c.runs.Runs(run.Namespace).Update(ctx, out, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("add finalizer %s to Run %s/%s: %w", lifecycle.FinalizerRegistrationCleanup, run.Namespace, run.Name, err)
	}
	return updated, nil
}

// removeFinalizer removes registration-cleanup once nothing of the Run
// remains on this Pod.
func (c *Controller) removeFinalizer(ctx context.Context, run *v1alpha1.Run) (*v1alpha1.Run, error) {
	if !slices.Contains(run.Finalizers, lifecycle.FinalizerRegistrationCleanup) {
		return run, nil
	}
	out := run.DeepCopy()
	out.Finalizers = slices.DeleteFunc(out.Finalizers, func(f string) bool { return f == lifecycle.FinalizerRegistrationCleanup })
	updated, err := c.runs.Runs(run.Namespace).Update(ctx, out, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("remove finalizer %s from Run %s/%s: %w", lifecycle.FinalizerRegistrationCleanup, run.Namespace, run.Name, err)
	}
	return updated, nil
}
