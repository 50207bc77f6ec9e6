package scheduler

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/retry"
)

// arrivals numbers Runs in the order the scheduler first saw them. The
// informer delivers creations in the order the server committed them, so
// among Runs created within one second (creationTimestamp's precision) the
// numbers are their creation order.
type arrivals struct {
	mu   sync.Mutex
	last uint64
	seq  map[types.UID]uint64
}

func newArrivals() *arrivals {
	return &arrivals{seq: map[types.UID]uint64{}}
}

// see numbers uid if it is new.
func (a *arrivals) see(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.seq[uid]; !ok {
		a.last++
		a.seq[uid] = a.last
	}
}

func (a *arrivals) forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.seq, uid)
}

func (a *arrivals) of(uid types.UID) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seq[uid]
}

// older reports whether a was created before b: by creationTimestamp, then
// by arrival, then by UID so that the order is total. seqA and seqB are
// their arrival numbers.
func older(a *v1alpha1.Run, seqA uint64, b *v1alpha1.Run, seqB uint64) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if seqA != seqB {
		return seqA < seqB
	}
	return a.UID < b.UID
}

// eligible reports whether run could take a slot now: Pending, not being
// deleted or cancelled, past its retry backoff, not already holding a
// reservation, and not backing off after a failed sync (a Run whose bind
// keeps failing must not hold up the line behind it).
func (s *Scheduler) eligible(run *v1alpha1.Run, now time.Time) bool {
	return wantsScheduling(run) && !run.Spec.CancelRequested &&
		!retry.NotBefore(run).After(now) && !s.assumed.holds(run.UID, now) &&
		!s.failing.has(run.Namespace+"/"+run.Name)
}

// keySet is a set of queue keys safe for concurrent use.
type keySet struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// set puts key in or out of the set and reports whether that changed it.
func (k *keySet) set(key string, in bool) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]struct{}{}
	}
	_, was := k.keys[key]
	if in {
		k.keys[key] = struct{}{}
	} else {
		delete(k.keys, key)
	}
	return was != in
}

func (k *keySet) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.keys[key]
	return ok
}

// pending returns the Pending Runs of one Runtime.
func (s *Scheduler) pending(namespace, runtime string) []*v1alpha1.Run {
	return s.indexed(PendingIndex, namespace+"/"+runtime)
}

// indexed returns the Runs the informer holds under key of index.
func (s *Scheduler) indexed(index, key string) []*v1alpha1.Run {
	objs, err := s.runIndexer.ByIndex(index, key)
	if err != nil {
		return nil
	}
	runs := make([]*v1alpha1.Run, 0, len(objs))
	for _, obj := range objs {
		if run, ok := obj.(*v1alpha1.Run); ok {
			runs = append(runs, run)
		}
	}
	return runs
}

// oldest returns the n oldest of runs, oldest first. Free slots go to the
// Runs waiting for them in this order, so a Run is never overtaken by one
// created after it. n is usually the one slot just released, so this
// selects rather than sorts a long line.
func (s *Scheduler) oldest(runs []*v1alpha1.Run, n int) []*v1alpha1.Run {
	type entry struct {
		run *v1alpha1.Run
		seq uint64
	}
	entries := make([]entry, len(runs))
	s.arrivals.mu.Lock()
	for i, run := range runs {
		entries[i] = entry{run, s.arrivals.seq[run.UID]}
	}
	s.arrivals.mu.Unlock()
	less := func(a, b entry) bool { return older(a.run, a.seq, b.run, b.seq) }
	n = min(n, len(entries))
	if n > 8 {
		slices.SortFunc(entries, func(a, b entry) int {
			switch {
			case less(a, b):
				return -1
			case less(b, a):
				return 1
			}
			return 0
		})
	} else {
		// n passes, each moving the oldest of the rest to the front.
		for i := range n {
			for j := i + 1; j < len(entries); j++ {
				if less(entries[j], entries[i]) {
					entries[i], entries[j] = entries[j], entries[i]
				}
			}
		}
	}
	out := make([]*v1alpha1.Run, n)
	for i := range out {
		out[i] = entries[i].run
	}
	return out
}

// atLeastWaitingAhead reports whether at least n eligible Runs of run's
// Runtime were created before run. It stops counting at n: a young Run in
// a long line is told so after a few of the Runs ahead of it.
func (s *Scheduler) atLeastWaitingAhead(run *v1alpha1.Run, n int, now time.Time) bool {
	seq := s.arrivals.of(run.UID)
	ahead := 0
	for _, other := range s.pending(run.Namespace, run.Spec.Runtime) {
		if ahead >= n {
			break
		}
		if other.UID != run.UID && older(other, s.arrivals.of(other.UID), run, seq) && s.eligible(other, now) {
			ahead++
		}
	}
	return ahead >= n
}
