package functions

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/metrics"
	"kruntimes.io/kruntimes/runtimed/runstatus"
	"kruntimes.io/kruntimes/runtimed/secretenv"
)

// Timeouts of calls to the Runtime Server.
const (
	rpcTimeout = 10 * time.Second
	// registerTimeout bounds one RegisterFunction call; loading goes on
	// past it on the Runtime Server, and the next call with the same
	// attempt waits for the same load.
	registerTimeout = 60 * time.Second
)

// Event reasons on function Runs beyond the lifecycle reasons.
const (
	eventRegistered = "Registered"
	eventAdopted    = "Adopted"
)

func newRegistration(ctx context.Context, key string, run *v1alpha1.Run) *registration {
	return &registration{
		key:     key,
		uid:     run.UID,
		digest:  registrationDigest(run),
		attempt: run.Status.Attempt,
		logger:  runstatus.Logger(ctx, run).WithValues("mode", lifecycle.ModeFunction),
	}
}

// claim moves a Scheduled function Run to Running when a slot is free, then
// registers it.
func (c *Controller) claim(ctx context.Context, key string, run *v1alpha1.Run) error {
	if run.Spec.CancelRequested {
		// Nothing on this Pod yet: only the record to write.
		_, err := c.writeOutcome(ctx, run, runstatus.Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled,
			Message: "the function was cancelled before it registered because spec.cancelRequested is true"})
		return err
	}
	if !c.slots.Acquire(run.UID, lifecycle.ModeFunction) {
		runstatus.Logger(ctx, run).V(2).Info("No free slot; the Run waits for one", "capacity", c.slots.Capacity())
		return nil
	}
	reg := newRegistration(ctx, key, run)
	c.track(reg)
	now := c.clock.Now()
	claimed, err := runstatus.Update(ctx, c.runs, runstatus.Claim(run, metav1.NewMicroTime(now)))
	if err != nil {
		c.untrack(reg)
		return fmt.Errorf("claim Run %s: %w", key, err)
	}
	if run.Status.ScheduledTime != nil {
		metrics.ClaimLatency.Observe(now.Sub(run.Status.ScheduledTime.Time).Seconds())
	}
	reg.logger.Info("Claimed function Run")
	return c.register(ctx, key, claimed, reg)
}

// register brings a Running function Run to Ready: finalizer first, then
// the source in its workspace, RegisterFunction for its attempt, and one
// status write. reg is nil for a Run claimed before a restart.
func (c *Controller) register(ctx context.Context, key string, run *v1alpha1.Run, reg *registration) error {
	if reg == nil {
		// Claimed by this Pod before runtimed restarted: whatever the
		// Runtime Server still has of it is registered again at the same
		// attempt, which is idempotent.
		reg = newRegistration(ctx, key, run)
		c.slots.Hold(run.UID, lifecycle.ModeFunction)
		c.track(reg)
		reg.logger.Info("Adopted a registering function Run after restart")
	}
	c.mu.RLock()
	readyWritten := reg.readyWritten
	c.mu.RUnlock()
	if readyWritten {
		return nil // a stale copy from before our Ready write
	}
	if stopped, err := c.stopIfAsked(ctx, run, reg); stopped || err != nil {
		return err
	}
	run, err := c.ensureFinalizer(ctx, run)
	if err != nil {
		return err
	}
	dir, _, err := c.workspace.Materialize(run.UID, run.Spec.Source.Inline, run.Spec.Source.InlinePath)
	if err != nil {
		return c.registrationFailed(ctx, run, reg, err.Error())
	}
	env, err := secretenv.Resolve(ctx, c.secrets, run)
	switch {
	case secretenv.IsRefused(err):
		return c.registrationFailed(ctx, run, reg, err.Error())
	case err != nil:
		return fmt.Errorf("resolve the env of Run %s (will retry): %w", key, err)
	}
	req := registerRequest(run, reg, dir, env)
	started := c.clock.Now()
	rpcCtx, cancel := context.WithTimeout(ctx, registerTimeout)
	st, err := c.runtimeServer.RegisterFunction(rpcCtx, req)
	cancel()
	if err != nil {
		countRPCError("RegisterFunction", err)
		switch status.Code(err) {
		case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.Aborted, codes.Internal, codes.Unknown:
			// Uncertain: the same attempt is registered again, which the
			// Runtime Server answers idempotently. No status changes.
			return fmt.Errorf("register attempt %d of Run %s (will retry the same attempt): %w", run.Status.Attempt, key, err)
		}
		return c.registrationFailed(ctx, run, reg, "the Runtime Server refused the registration: "+status.Convert(err).Message())
	}
	metrics.RegistrationDuration.WithLabelValues(registrationResult(st)).Observe(c.clock.Since(started).Seconds())
	switch st.GetState() {
	case runtimev1.FunctionState_FUNCTION_STATE_READY:
	case runtimev1.FunctionState_FUNCTION_STATE_FAILED:
		return c.registrationFailed(ctx, run, reg, st.GetFatalError())
	default:
		return fmt.Errorf("RegisterFunction for Run %s returned state %s; will ask again", key, st.GetState())
	}

	// The gate opens before Ready is written: once the apiserver sees Ready,
	// invokes must find this registration accepting.
	c.mu.Lock()
	reg.id, reg.registeredAt, reg.accepting = st.GetRegistrationId(), c.clock.Now(), true
	c.mu.Unlock()
	ready, err := runstatus.Update(ctx, c.runs, runstatus.Ready(run, c.clock.Now()))
	if err != nil {
		return fmt.Errorf("record Run %s as Ready: %w", key, err)
	}
	c.mu.Lock()
	reg.readyWritten = true
	c.mu.Unlock()
	reg.logger.Info("Function registered and Ready", "registrationID", st.GetRegistrationId(), "duration", c.clock.Since(started))
	c.recorder.Eventf(run, corev1.EventTypeNormal, eventRegistered, "Attempt %d registered on Pod %s", run.Status.Attempt, c.pod.Name)
	c.scheduleLifetime(key, ready)
	return nil
}

// registerRequest registers attempt reg.attempt of run from its workspace
// dir with env, as secretenv resolved it.
func registerRequest(run *v1alpha1.Run, reg *registration, dir string, env []*runtimev1.EnvVar) *runtimev1.RegisterFunctionRequest {
	fn := run.Spec.Mode.Function
	req := &runtimev1.RegisterFunctionRequest{
		RunUid:              string(run.UID),
		RegistrationAttempt: int64(run.Status.Attempt),
		RegistrationDigest:  reg.digest,
		WorkingDir:          dir,
		Handler:             fn.Handler,
		Env:                 env,
	}
	if fn.IdleTimeoutSeconds != nil {
		req.IdleTimeoutSeconds = int64(*fn.IdleTimeoutSeconds)
	}
	return req
}

func registrationResult(st *runtimev1.RegistrationStatus) string {
	if st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_READY {
		return "ready"
	}
	return "failed"
}

// serve keeps a Ready Run Ready while nothing ends it: cancellation, its
// lifetime, its idle clock, or the loss of its registration.
func (c *Controller) serve(ctx context.Context, key string, run *v1alpha1.Run, reg *registration) error {
	if reg == nil {
		return c.adopt(ctx, key, run)
	}
	if stopped, err := c.stopIfAsked(ctx, run, reg); stopped || err != nil {
		return err
	}
	if why := c.lostReason(reg); why != "" {
		return c.lose(ctx, key, run, reg, why)
	}
	c.scheduleLifetime(key, run)
	return c.checkIdle(ctx, key, run, reg)
}

// adopt takes over a Ready Run after a restart. A registration the Runtime
// Server still holds at the Run's attempt is registered again with the same
// digest, which returns its ID without loading anything and writes no
// status; one it lost is a lost registration.
func (c *Controller) adopt(ctx context.Context, key string, run *v1alpha1.Run) error {
	c.mu.RLock()
	view := c.view
	c.mu.RUnlock()
	if view.listedAt.IsZero() {
		c.queue.AddAfter(key, c.watchInterval)
		return nil // the Runtime Server did not answer ListFunctions yet
	}
	reg := newRegistration(ctx, key, run)
	c.slots.Hold(run.UID, lifecycle.ModeFunction)
	c.track(reg)
	held := view.registrations[run.UID]
	if held == nil || held.GetRegistrationAttempt() != int64(run.Status.Attempt) || held.GetState() != runtimev1.FunctionState_FUNCTION_STATE_READY {
		return c.lose(ctx, key, run, reg, describeLoss(held, run.Status.Attempt))
	}
	// The whole request, as register sends it: should the Runtime Server
	// have lost the registration since it listed it, this registers it
	// again as it was, not without its environment.
	env, err := secretenv.Resolve(ctx, c.secrets, run)
	switch {
	case secretenv.IsRefused(err):
		// Without its environment the registration cannot be made again
		// as it was; the next attempt fails with the same message.
		return c.lose(ctx, key, run, reg, err.Error())
	case err != nil:
		c.untrack(reg)
		return fmt.Errorf("resolve the env of Run %s to re-adopt it: %w", key, err)
	}
	req := registerRequest(run, reg, c.workspace.RunDir(run.UID), env)
	rpcCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	st, err := c.runtimeServer.RegisterFunction(rpcCtx, req)
	cancel()
	switch {
	case status.Code(err) == codes.AlreadyExists || status.Code(err) == codes.FailedPrecondition:
		return c.lose(ctx, key, run, reg, "the Runtime Server holds another registration of this Run: "+status.Convert(err).Message())
	case err != nil:
		countRPCError("RegisterFunction", err)
		c.untrack(reg)
		return fmt.Errorf("re-adopt the registration of Run %s: %w", key, err)
	case st.GetRegistrationId() != held.GetRegistrationId() || st.GetState() != runtimev1.FunctionState_FUNCTION_STATE_READY:
		return c.lose(ctx, key, run, reg, describeLoss(st, run.Status.Attempt))
	}
	c.mu.Lock()
	reg.id, reg.registeredAt, reg.accepting, reg.readyWritten = st.GetRegistrationId(), view.listedAt, true, true
	c.mu.Unlock()
	reg.logger.Info("Re-adopted live registration after restart", "registrationID", reg.id)
	c.recorder.Eventf(run, corev1.EventTypeNormal, eventAdopted, "runtimed restarted and took over the registration of attempt %d", run.Status.Attempt)
	c.scheduleLifetime(key, run)
	return c.checkIdle(ctx, key, run, reg)
}

func describeLoss(st *runtimev1.RegistrationStatus, attempt int32) string {
	switch {
	case st == nil:
		return fmt.Sprintf("the Runtime Server no longer holds the registration of attempt %d (it restarted or forgot it)", attempt)
	case st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_FAILED:
		return "the registration failed on the Runtime Server: " + st.GetFatalError()
	case st.GetRegistrationAttempt() != int64(attempt):
		return fmt.Sprintf("the Runtime Server holds attempt %d, not %d", st.GetRegistrationAttempt(), attempt)
	}
	return fmt.Sprintf("the Runtime Server replaced the registration of attempt %d", attempt)
}

// lostReason says why the Runtime Server's last answer shows reg lost, or
// "" when it is live (or the answer predates the registration).
func (c *Controller) lostReason(reg *registration) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if reg.id == "" || !c.view.listedAt.After(reg.registeredAt) {
		return ""
	}
	st := c.view.registrations[reg.uid]
	if st == nil || st.GetRegistrationId() != reg.id || st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_FAILED {
		return describeLoss(st, reg.attempt)
	}
	return ""
}

// scheduleLifetime wakes the Run when spec.timeout ends it.
func (c *Controller) scheduleLifetime(key string, run *v1alpha1.Run) {
	if deadline := runstatus.Deadline(run); !deadline.IsZero() {
		c.queue.AddAfter(key, deadline.Sub(c.clock.Now()))
	}
}
