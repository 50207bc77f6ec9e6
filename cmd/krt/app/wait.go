package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// lostAfter is how long list/watch may fail before krt run gives up with 129.
var lostAfter = 30 * time.Second

// errLost: list and watch failed for lostAfter.
var errLost = errors.New("lost the connection to the server")

// untilTerminal follows the Run by list and watch (watchtools.UntilWithSync)
// until it is in a terminal phase, calling seen for each state of it. When
// list and watch fail for lostAfter it cancels ctx with errLost.
func untilTerminal(ctx context.Context, runs typedv1alpha1.RunInterface, run *v1alpha1.Run, seen func(*v1alpha1.Run)) (*v1alpha1.Run, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	health := &connHealth{}
	go health.watch(ctx, cancel, lostAfter)
	selector := fields.OneTermEqualSelector("metadata.name", run.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := runs.List(ctx, opts)
			health.observe(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := runs.Watch(ctx, opts)
			health.observe(err)
			return w, err
		},
	}
	event, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.Run{}, nil, func(e watch.Event) (bool, error) {
		switch e.Type {
		case watch.Deleted:
			return false, fmt.Errorf("run/%s was deleted before it ended", run.Name)
		case watch.Added, watch.Modified:
		default:
			return false, nil
		}
		r, ok := e.Object.(*v1alpha1.Run)
		if !ok || r.UID != run.UID {
			if ok && run.UID != "" {
				return false, fmt.Errorf("run/%s was replaced by another Run of that name", run.Name)
			}
			return false, nil
		}
		seen(r)
		return lifecycle.IsTerminal(r.Status.Phase), nil
	})
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, cause
		}
		return nil, err
	}
	return event.Object.(*v1alpha1.Run), nil
}

// connHealth tracks since when list and watch have been failing.
type connHealth struct {
	mu           sync.Mutex
	failingSince time.Time
}

func (h *connHealth) observe(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.failingSince = time.Time{}
	case h.failingSince.IsZero():
		h.failingSince = time.Now()
	}
}

func (h *connHealth) watch(ctx context.Context, cancel context.CancelCauseFunc, lostAfter time.Duration) {
	tick := time.NewTicker(min(lostAfter/10, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.mu.Lock()
			lost := !h.failingSince.IsZero() && time.Since(h.failingSince) >= lostAfter
			h.mu.Unlock()
			if lost {
				cancel(errLost)
				return
			}
		}
	}
}

// describeEnd says how the Run ended: its exit code and message.
func describeEnd(run *v1alpha1.Run) string {
	s := ""
	if run.Status.ExitCode != nil {
		s += fmt.Sprintf(" (exit code %d)", *run.Status.ExitCode)
	}
	if run.Status.Message != "" {
		s += ": " + run.Status.Message
	}
	return s
}
