package logfollow

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// signal is a Changes whose channels change closes, as the invoke router's
// are closed by its ownership cache's events.
type signal struct {
	mu      sync.Mutex
	waiters []chan struct{}
	watched atomic.Int32
}

func (s *signal) RouteChanged(string, string) (<-chan struct{}, func()) {
	s.watched.Add(1)
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiters = append(s.waiters, ch)
	return ch, func() {}
}

func (s *signal) change() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.waiters {
		close(ch)
	}
	s.waiters = nil
}

// follow runs a Loop on a fake clock whose tries answer next(n) for the
// nth try; the tries are counted.
type follow struct {
	clock   *clocktesting.FakeClock
	changes *signal
	tries   atomic.Int32
	started atomic.Bool
	done    chan struct{}
	cancel  context.CancelFunc
}

func startFollow(t *testing.T, next func(n int32) Next) *follow {
	t.Helper()
	f := &follow{clock: clocktesting.NewFakeClock(time.Now()), changes: &signal{}, done: make(chan struct{})}
	loop := &Loop{Changes: f.changes, Namespace: "ns", Name: "task", StartBy: f.clock.Now().Add(time.Minute), Started: f.started.Load, Clock: f.clock}
	ctx, cancel := context.WithCancel(t.Context())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		loop.Run(ctx, func(bool) Next { return next(f.tries.Add(1)) })
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

// answers answers the tries in order, then WaitForChange.
func answers(first ...Next) func(n int32) Next {
	return func(n int32) Next {
		if int(n) <= len(first) {
			return first[n-1]
		}
		return WaitForChange
	}
}

// waiting waits until the loop waits after try n: it made n tries and
// sleeps on its timer and its change signal.
func (f *follow) waiting(t *testing.T, n int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.tries.Load() == n && f.clock.HasWaiters(), nil
	})
	require.NoError(t, err, "the loop waits after try %d; tries: %d", n, f.tries.Load())
}

func (f *follow) ended(t *testing.T) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end")
	}
}

func TestLoop(t *testing.T) {
	t.Run("a follow waiting for its Run tries again at the router's change, and only then", func(t *testing.T) {
		f := startFollow(t, func(int32) Next { return WaitForChange })
		f.waiting(t, 1)
		f.clock.Step(recheck - time.Millisecond)
		f.waiting(t, 1)
		assert.Equal(t, int32(1), f.changes.watched.Load(), "one watch, not one per poll")
		f.changes.change()
		f.waiting(t, 2)
		f.changes.change()
		f.waiting(t, 3)
		assert.Equal(t, int32(3), f.changes.watched.Load(), "a watch per try, taken before it")
	})

	t.Run("without a change, the safety net tries again after recheck", func(t *testing.T) {
		f := startFollow(t, func(int32) Next { return WaitForChange })
		f.waiting(t, 1)
		f.clock.Step(recheck)
		f.waiting(t, 2)
	})

	t.Run("a failed try is retried with a backoff, capped, and at once at a change", func(t *testing.T) {
		f := startFollow(t, func(int32) Next { return Retry })
		f.waiting(t, 1)
		for n, backoff := int32(2), retryFirst; n < 8; n, backoff = n+1, min(2*backoff, retryMax) {
			f.clock.Step(backoff - time.Millisecond)
			f.waiting(t, n-1)
			f.clock.Step(time.Millisecond)
			f.waiting(t, n)
		}
		f.changes.change()
		f.waiting(t, 8)
	})

	t.Run("a waiting follow back from a retry waits for a change again", func(t *testing.T) {
		f := startFollow(t, answers(Retry))
		f.waiting(t, 1)
		f.clock.Step(retryFirst)
		f.waiting(t, 2)
		f.clock.Step(retryMax)
		f.waiting(t, 2)
	})

	t.Run("a follow that never started ends at StartBy", func(t *testing.T) {
		f := startFollow(t, func(int32) Next { return WaitForChange })
		f.waiting(t, 1)
		n := int32(time.Minute / recheck)
		for i := int32(1); i < n; i++ {
			f.clock.Step(recheck)
			f.waiting(t, i+1)
		}
		f.clock.Step(recheck)
		f.ended(t)
		assert.Equal(t, int32(time.Minute/recheck)+1, f.tries.Load(), "one try at each recheck and one at StartBy")
	})

	t.Run("a follow that started outlives StartBy", func(t *testing.T) {
		f := startFollow(t, func(int32) Next { return WaitForChange })
		f.started.Store(true)
		f.waiting(t, 1)
		f.clock.Step(2 * time.Minute)
		f.waiting(t, 2)
	})

	t.Run("Done ends the loop", func(t *testing.T) {
		f := startFollow(t, answers(WaitForChange, Done))
		f.waiting(t, 1)
		f.changes.change()
		f.ended(t)
		assert.Equal(t, int32(2), f.tries.Load())
	})

	t.Run("the client going away ends the loop", func(t *testing.T) {
		f := startFollow(t, func(int32) Next { return WaitForChange })
		f.waiting(t, 1)
		f.cancel()
		f.ended(t)
	})
}
