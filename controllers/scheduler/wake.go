package scheduler

import (
	"context"
	"slices"
	"strings"

	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// wakeAll queues every waiting Run of one Runtime, oldest first: its Pods
// or its spec changed, which may change what each Run waits for.
func (s *Scheduler) wakeAll(namespace, runtime string) {
	if runtime == "" {
		return
	}
	runs := s.pending(namespace, runtime)
	for _, run := range s.oldest(runs, len(runs)) {
		s.enqueueRun(run)
	}
}

// wakeRuntime has the wake worker queue as many of the Runtime's oldest
// waiting Runs as it has free slots: a released slot costs one placement,
// not one per waiting Run.
func (s *Scheduler) wakeRuntime(namespace, runtime string) {
	if runtime != "" {
		s.wakes.Add(namespace + "/" + runtime)
	}
}

// wakeRuntimeOf wakes the Runtime of the Run of key.
func (s *Scheduler) wakeRuntimeOf(key string) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	if run, err := s.runs.Runs(namespace).Get(name); err == nil {
		s.wakeRuntime(namespace, run.Spec.Runtime)
	}
}

func (s *Scheduler) wakeWorker(context.Context) {
	for {
		key, quit := s.wakes.Get()
		if quit {
			return
		}
		namespace, runtime, _ := strings.Cut(key, "/")
		s.fillFreeSlots(namespace, runtime)
		s.wakes.Done(key)
	}
}

// fillFreeSlots queues as many of the Runtime's oldest waiting Runs as it
// has free slots.
func (s *Scheduler) fillFreeSlots(namespace, runtime string) {
	now := s.clock.Now()
	pending := s.pending(namespace, runtime)
	if len(pending) == 0 {
		return
	}
	rt, err := s.runtimes.Runtimes(namespace).Get(runtime)
	if err != nil {
		// Each waiting Run will say that the Runtime is missing.
		s.wakeAll(namespace, runtime)
		return
	}
	loads, _, err := s.loads(namespace, rt, now)
	if err != nil {
		s.wakeAll(namespace, runtime)
		return
	}
	free := freeSlots(loads, rt)
	if free == 0 {
		return
	}
	waiting := slices.DeleteFunc(pending, func(run *v1alpha1.Run) bool { return !s.eligible(run, now) })
	for _, run := range s.oldest(waiting, free) {
		s.enqueueRun(run)
	}
}
