package logfollow

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Changes tells when a Run's route may have changed: the Run moved (it
// started, was assigned, ended, was deleted) or a Runtime Pod did.
type Changes interface {
	// RouteChanged returns a channel closed at the next change of the Run
	// namespace/name or of a Runtime Pod, and a func that gives it up.
	RouteChanged(namespace, name string) (changed <-chan struct{}, stop func())
}

// Next is what a try asks the loop to do.
type Next int

const (
	// Done ends the follow.
	Done Next = iota
	// WaitForChange tries again at the Run's next change: nothing in the
	// Run as it stands can be streamed yet.
	WaitForChange
	// Retry tries again after a backoff, or sooner at a change: the
	// runtimed to stream from could not be reached, or its stream broke,
	// which no change of the Run need tell.
	Retry
)

const (
	// retryFirst and retryMax bound the backoff of Retry.
	retryFirst = 50 * time.Millisecond
	retryMax   = 500 * time.Millisecond
	// recheck is the safety net of WaitForChange: a router that cannot
	// tell changes (invoke off: no cluster) never closes its channel.
	recheck = 5 * time.Second
)

// Loop runs the tries of one follow of the Run namespace/name.
type Loop struct {
	Changes   Changes
	Namespace string
	Name      string
	// StartBy is when a follow that has not started gives up.
	StartBy time.Time
	// Started says the follow wrote something or reached its stream: from
	// then on it waits as long as try asks.
	Started func() bool
	// Clock is the real clock when nil.
	Clock clock.Clock
}

// Run calls try until it returns Done, ctx ends, or StartBy passed before
// the follow started. It watches for changes before each try, so a change
// while try reads the Run wakes the wait that follows.
func (l *Loop) Run(ctx context.Context, try func(first bool) Next) {
	clk := l.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	backoff := retryFirst
	for first := true; ; first = false {
		changed, stop := l.Changes.RouteChanged(l.Namespace, l.Name)
		next := try(first)
		started := l.Started()
		if next == Done || (!started && !clk.Now().Before(l.StartBy)) {
			stop()
			return
		}
		wait := recheck
		if next == Retry {
			wait, backoff = backoff, min(2*backoff, retryMax)
		} else {
			backoff = retryFirst
		}
		if !started {
			wait = min(wait, l.StartBy.Sub(clk.Now()))
		}
		timer := clk.NewTimer(wait)
		select {
		case <-changed:
		case <-timer.C():
		case <-ctx.Done():
		}
		timer.Stop()
		stop()
		if ctx.Err() != nil {
			return
		}
	}
}
