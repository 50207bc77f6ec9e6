package dedup

import (
	"container/list"
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Config bounds a Table.
type Config struct {
	// Window is how long an outcome is kept after it was recorded; it must
	// be positive (runtimed keeps no Table when deduplication is off).
	Window time.Duration
	// MaxEntries bounds the outcomes kept; at least 1.
	MaxEntries int
	// MaxBytes bounds the bytes of the outcomes kept, as Size counts them;
	// one outcome larger than this is still kept, alone.
	MaxBytes int64
	// Clock reads the time; the real clock when nil.
	Clock clock.PassiveClock
	// Budget, when set, also bounds this Table's outcomes together with
	// those of the other Tables sharing it.
	Budget *Budget
}

// Table records the outcomes of invocations by ID. Its zero value is not
// usable; make one with New.
type Table[T any] struct {
	cfg  Config
	size func(T, error) int64

	mu sync.Mutex
	// entries holds the outcomes recorded and the invocations in flight.
	entries map[string]*entry[T]
	// recorded lists the recorded entries, oldest first.
	recorded list.List
	bytes    int64
	// dropped is set by Drop: outcomes finishing later reach only their
	// waiters.
	dropped bool
}

type entry[T any] struct {
	t  *Table[T]
	id string
	// done is closed when the outcome is known, recorded or not.
	done chan struct{}
	// Set before done is closed.
	value    T
	err      error
	recorded bool
	at       time.Time
	size     int64
	elem     *list.Element
	// budgetElem is the entry's place in cfg.Budget while it is recorded.
	budgetElem *list.Element
}

// evict implements evictable.
func (e *entry[T]) evict() {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if e.elem != nil {
		e.t.removeLocked(e)
	}
}

// New returns an empty Table bounded by cfg; size counts the bytes of an
// outcome.
func New[T any](cfg Config, size func(T, error) int64) *Table[T] {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	cfg.MaxEntries = max(cfg.MaxEntries, 1)
	return &Table[T]{cfg: cfg, size: size, entries: map[string]*entry[T]{}}
}

// Lookup is what Begin found for an ID: a recorded outcome to replay, or
// the caller's turn to run the invocation.
type Lookup[T any] struct {
	// Replayed says Value and Err are the recorded outcome of an earlier
	// invocation with the ID; the caller must not run it again.
	Replayed bool
	Value    T
	Err      error
	// Run is set when the caller is to run the invocation, and must then
	// call Run.Finish exactly once.
	Run *Pending[T]
}

// Pending is an invocation the caller of Begin runs.
type Pending[T any] struct {
	t *Table[T]
	e *entry[T]
}

// Begin looks id up. A recorded outcome within the window is replayed; an
// invocation with the ID in flight is waited for, until ctx ends (Begin
// then returns ctx's error); otherwise the caller runs it (Lookup.Run).
// When the invocation waited for ends without being recorded, the next
// waiter runs it.
func (t *Table[T]) Begin(ctx context.Context, id string) (Lookup[T], error) {
	for {
		t.mu.Lock()
		t.expireLocked()
		e := t.entries[id]
		if e == nil {
			e = &entry[T]{t: t, id: id, done: make(chan struct{})}
			t.entries[id] = e
			t.mu.Unlock()
			return Lookup[T]{Run: &Pending[T]{t: t, e: e}}, nil
		}
		if e.recorded {
			t.mu.Unlock()
			return Lookup[T]{Replayed: true, Value: e.value, Err: e.err}, nil
		}
		t.mu.Unlock()
		select {
		case <-e.done:
			if e.recorded {
				return Lookup[T]{Replayed: true, Value: e.value, Err: e.err}, nil
			}
			// Not recorded: nothing ran; take a turn.
		case <-ctx.Done():
			return Lookup[T]{}, ctx.Err()
		}
	}
}

// Finish ends the invocation: with record, its outcome is replayed to
// repeats within the window; without, a repeat (or a waiter) runs it.
func (p *Pending[T]) Finish(value T, err error, record bool) {
	t, e := p.t, p.e
	t.mu.Lock()
	budgeted := record && !t.dropped && t.cfg.Budget != nil
	if record && t.dropped {
		e.value, e.err, e.recorded = value, err, true
	} else if record {
		e.value, e.err, e.recorded = value, err, true
		e.at = t.cfg.Clock.Now()
		e.size = t.size(value, err)
		e.elem = t.recorded.PushBack(e)
		t.bytes += e.size
		if budgeted {
			e.budgetElem = t.cfg.Budget.add(e, e.size)
		}
		t.evictLocked()
	} else if t.entries[e.id] == e {
		delete(t.entries, e.id)
	}
	t.mu.Unlock()
	close(e.done)
	if budgeted {
		t.cfg.Budget.enforce()
	}
}

// Drop forgets every recorded outcome, giving their bytes back to the
// Budget; runtimed drops the Table of a registration that was replaced.
// Invocations in flight still finish, unrecorded.
func (t *Table[T]) Drop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropped = true
	for front := t.recorded.Front(); front != nil; front = t.recorded.Front() {
		t.removeLocked(front.Value.(*entry[T]))
	}
}

// Len returns the number of recorded outcomes within the window and of
// invocations in flight.
func (t *Table[T]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	return len(t.entries)
}

// Bytes returns the bytes of the outcomes recorded.
func (t *Table[T]) Bytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	return t.bytes
}

// expireLocked drops the outcomes recorded longer than the window ago.
func (t *Table[T]) expireLocked() {
	now := t.cfg.Clock.Now()
	for front := t.recorded.Front(); front != nil; front = t.recorded.Front() {
		e := front.Value.(*entry[T])
		if now.Sub(e.at) < t.cfg.Window {
			return
		}
		t.removeLocked(e)
	}
}

// evictLocked drops the oldest outcomes until the bounds hold, or until the
// newest alone is left.
func (t *Table[T]) evictLocked() {
	for t.recorded.Len() > 1 && (t.recorded.Len() > t.cfg.MaxEntries || t.bytes > t.cfg.MaxBytes) {
		t.removeLocked(t.recorded.Front().Value.(*entry[T]))
	}
}

func (t *Table[T]) removeLocked(e *entry[T]) {
	t.recorded.Remove(e.elem)
	e.elem = nil
	t.bytes -= e.size
	if e.budgetElem != nil {
		t.cfg.Budget.remove(e.budgetElem, e.size)
		e.budgetElem = nil
	}
	if t.entries[e.id] == e {
		delete(t.entries, e.id)
	}
}
