package heartbeat

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// renewedAt records a successful renewal at t, as Renew does.
func (h *Heartbeat) renewedAt(t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewed = &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
		RenewTime: ptr.To(metav1.NewMicroTime(t)), LeaseDurationSeconds: ptr.To[int32](10),
	}}
}

func TestBoundEndsWhenTheLeaseLapses(t *testing.T) {
	start := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	h := &Heartbeat{clock: clk}
	h.renewedAt(start)

	ctx, cancel := h.Bound(context.Background())
	defer cancel()
	// Step only once Bound's timer is set: it reads the clock when it sets it.
	timerSet := func() {
		require.Eventually(t, clk.HasWaiters, 10*time.Second, time.Millisecond, "Bound waits for the lapse")
	}

	timerSet()
	clk.Step(9 * time.Second)
	h.renewedAt(clk.Now()) // renewed: fresh until 19 s
	clk.Step(time.Second)
	assert.NoError(t, ctx.Err(), "a renewal before the lapse moves it")
	timerSet()
	clk.Step(9*time.Second - time.Millisecond)
	assert.NoError(t, ctx.Err(), "not a millisecond early")
	clk.Step(time.Millisecond)
	require.Eventually(t, func() bool { return ctx.Err() != nil }, 10*time.Second, time.Millisecond, "ends when the renewed Lease lapses")
	assert.ErrorIs(t, context.Cause(ctx), ErrLapsed)
}

func TestBoundEndsAtOnceWithoutAFreshLease(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	never := &Heartbeat{clock: clk}
	ctx, cancel := never.Bound(context.Background())
	defer cancel()
	require.Eventually(t, func() bool { return ctx.Err() != nil }, 10*time.Second, time.Millisecond, "never renewed: nothing may run")
	assert.ErrorIs(t, context.Cause(ctx), ErrLapsed)

	stale := &Heartbeat{clock: clk}
	stale.renewedAt(clk.Now().Add(-11 * time.Second))
	ctx, cancel = stale.Bound(context.Background())
	defer cancel()
	require.Eventually(t, func() bool { return ctx.Err() != nil }, 10*time.Second, time.Millisecond, "lapsed already")
	assert.ErrorIs(t, context.Cause(ctx), ErrLapsed)
}

func TestBoundEndsWithItsWork(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	h := &Heartbeat{clock: clk}
	h.renewedAt(clk.Now())
	ctx, cancel := h.Bound(context.Background())
	require.Eventually(t, clk.HasWaiters, 10*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
	require.Eventually(t, func() bool { return !clk.HasWaiters() }, 10*time.Second, time.Millisecond, "its timer is stopped: nothing leaks")
}
