package scheduler

import (
	"context"
	"strings"

	"k8s.io/client-go/tools/cache"
)

// wakeAll moves every parked Run of one Runtime back to be tried, oldest
// first: the Runtime was created, deleted or replaced, which changes why
// each of them waits.
func (s *Scheduler) wakeAll(namespace, runtime string) {
	if runtime == "" {
		return
	}
	s.placing.Lock()
	keys := s.lines.wake(namespace+"/"+runtime, -1, "")
	s.placing.Unlock()
	for _, key := range keys {
		s.queue.Add(key)
	}
}

// wakeRuntime has the wake worker move as many of the Runtime's oldest
// parked Runs back to be tried as it has free slots: a released slot
// costs one placement, not one per waiting Run.
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

// checkWorker looks at each Runtime with parked Runs every parkedRecheck:
// a reservation that lapsed released its slot without an event.
func (s *Scheduler) checkWorker(context.Context) {
	for {
		key, quit := s.checks.Get()
		if quit {
			return
		}
		namespace, runtime, _ := strings.Cut(key, "/")
		s.fillFreeSlots(namespace, runtime)
		if s.lines.rechecked(key) {
			s.checks.AddAfter(key, parkedRecheck)
		}
		s.checks.Done(key)
	}
}

// fillFreeSlots moves as many of the Runtime's oldest parked Runs back to
// be tried as it has free slots not already sought by Runs being tried.
func (s *Scheduler) fillFreeSlots(namespace, runtime string) {
	lineKey := namespace + "/" + runtime
	s.placing.Lock()
	keys := s.freeSlotsFor(lineKey, namespace, runtime)
	s.placing.Unlock()
	for _, key := range keys {
		s.queue.Add(key)
	}
}

func (s *Scheduler) freeSlotsFor(lineKey, namespace, runtime string) []string {
	parked, trying := s.lines.depth(lineKey)
	if parked == 0 {
		return nil
	}
	rt, err := s.runtimes.Runtimes(namespace).Get(runtime)
	if err != nil || rt.DeletionTimestamp != nil {
		// Its creation wakes them.
		return nil
	}
	loads, _, err := s.loads(namespace, rt, s.clock.Now())
	if err != nil {
		return nil
	}
	n := freeSlots(loads, rt) - trying
	if n <= 0 {
		return nil
	}
	return s.lines.wake(lineKey, n, "")
}
