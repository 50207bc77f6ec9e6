package health

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Loop is the liveness of one loop of runtimed: a worker pool taking items
// off a queue, or a ticker. A loop that has had work waiting for longer than
// its bound without taking any is wedged, and /healthz fails so that the
// kubelet restarts runtimed.
type Loop struct {
	name    string
	bound   time.Duration
	pending func() int
	clock   clock.PassiveClock
	// started is set once the loop runs; before, it is not judged (it may
	// wait for an informer to sync, which /readyz reports).
	started atomic.Bool
	// last is when the loop last made progress, in Unix nanoseconds.
	last atomic.Int64
}

// NewLoop returns the liveness of the loop name: pending says how much work
// waits for it (nil: it always has work, like a ticker), and bound is the
// longest it may go without progress while work waits.
func NewLoop(name string, bound time.Duration, pending func() int, clk clock.PassiveClock) *Loop {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if pending == nil {
		pending = func() int { return 1 }
	}
	return &Loop{name: name, bound: bound, pending: pending, clock: clk}
}

// Start marks the loop running: from now on it must make progress.
func (l *Loop) Start() {
	l.Progress()
	l.started.Store(true)
}

// Progress records that the loop took an item or ticked.
func (l *Loop) Progress() { l.last.Store(l.clock.Now().UnixNano()) }

// Check is the liveness check of the loop.
func (l *Loop) Check() Check {
	return Check{Name: l.name, Check: func(context.Context) error {
		if !l.started.Load() {
			return nil
		}
		since := l.clock.Since(time.Unix(0, l.last.Load()))
		if n := l.pending(); n > 0 && since > l.bound {
			return fmt.Errorf("%d items have waited while the loop made no progress for %s (bound %s)", n, since.Round(time.Second), l.bound)
		}
		return nil
	}}
}
