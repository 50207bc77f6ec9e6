package scheduler

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
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
