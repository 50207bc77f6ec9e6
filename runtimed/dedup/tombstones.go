package dedup

import (
	"sync"
	"time"
)

// Tombstones remembers the IDs whose outcome a Table evicted before its
// window ended, so that a repeat is told the outcome is no longer known
// instead of running a second time. Each is kept as a 64-bit hash and the
// time its outcome was recorded — 16 bytes whatever the ID and its caller
// weigh — and at most max of them for all the Tables sharing it; the
// oldest go first (a repeat of one of those runs again). A nil *Tombstones
// keeps nothing. Make one with NewTombstones.
type Tombstones struct {
	max int

	mu sync.Mutex
	// recordedAt holds when the outcome of each ID was recorded: its
	// tombstone lasts as long as the outcome would have.
	recordedAt map[uint64]time.Time
	// order is a ring of the tombstones, the oldest at next once full.
	order []tombstone
	next  int
}

type tombstone struct {
	hash       uint64
	recordedAt time.Time
}

// NewTombstones returns Tombstones that keep at most max IDs.
func NewTombstones(max int) *Tombstones {
	return &Tombstones{max: max, recordedAt: map[uint64]time.Time{}}
}

// Len returns the number of tombstones kept, expired ones included until
// newer ones take their place.
func (ts *Tombstones) Len() int {
	if ts == nil {
		return 0
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.recordedAt)
}

func (ts *Tombstones) add(hash uint64, recordedAt time.Time) {
	if ts == nil || ts.max <= 0 {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.order) < ts.max {
		ts.order = append(ts.order, tombstone{hash, recordedAt})
	} else {
		oldest := ts.order[ts.next]
		// The same ID may have been recorded and evicted again since: only
		// its newest tombstone counts.
		if ts.recordedAt[oldest.hash].Equal(oldest.recordedAt) {
			delete(ts.recordedAt, oldest.hash)
		}
		ts.order[ts.next] = tombstone{hash, recordedAt}
		ts.next = (ts.next + 1) % ts.max
	}
	ts.recordedAt[hash] = recordedAt
}

// has says whether hash has a tombstone of an outcome recorded after
// since.
func (ts *Tombstones) has(hash uint64, since time.Time) bool {
	if ts == nil {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	at, ok := ts.recordedAt[hash]
	return ok && at.After(since)
}
