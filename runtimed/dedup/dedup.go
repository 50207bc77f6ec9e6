package dedup

import (
	"container/list"
	"context"
	"errors"
	"hash/maphash"
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
	// MaxWaiters bounds the callers that wait at once for one invocation
	// in flight; Find refuses one more with ErrTooManyWaiters. 0 leaves
	// them unbounded.
	MaxWaiters int
	// Tombstones, when set, keeps the IDs whose outcome was evicted before
	// its window ended, which Find then answers with ErrEvicted; without
	// it a repeat of an evicted ID runs again.
	Tombstones *Tombstones
}

// ErrTooManyWaiters is Find's refusal of one more caller waiting for an
// invocation in flight: nothing ran for it, and it may ask again later.
var ErrTooManyWaiters = errors.New("too many callers already wait for this invocation")

// ErrEvicted is Find's answer for an ID whose outcome was recorded within
// the window and then evicted to keep the Table or its Budget within
// bounds: the invocation ran (or may have), and its outcome is no longer
// known, so it must not run again under the same ID.
var ErrEvicted = errors.New("the outcome of this invocation was evicted and is no longer known")

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
	// callers holds what each caller's recorded entries take, so that
	// eviction takes from the caller holding the most.
	callers map[string]*callerShare
	// dropped is set by Drop: outcomes finishing later reach only their
	// waiters.
	dropped bool
	// seed hashes this Table's IDs for cfg.Tombstones: another Table's
	// tombstones never match them.
	seed maphash.Seed
}

// callerShare is one caller's recorded entries, oldest first, and their
// bytes.
type callerShare struct {
	recorded list.List
	bytes    int64
}

type entry[T any] struct {
	t *Table[T]
	// id is the key in entries: the caller and the invocation ID.
	id     string
	caller string
	// done is closed when the outcome is known, recorded or not.
	done chan struct{}
	// waiters counts the callers waiting for done.
	waiters int
	// Set before done is closed.
	value    T
	err      error
	recorded bool
	at       time.Time
	size     int64
	elem     *list.Element
	// callerElem is the entry's place in its caller's share.
	callerElem *list.Element
	// budgetElem is the entry's place in cfg.Budget while it is recorded.
	budgetElem *list.Element
}

// evict implements evictable.
func (e *entry[T]) evict() {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	if e.elem != nil {
		e.t.evictEntryLocked(e)
	}
}

// New returns an empty Table bounded by cfg; size counts the bytes of an
// outcome.
func New[T any](cfg Config, size func(T, error) int64) *Table[T] {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	cfg.MaxEntries = max(cfg.MaxEntries, 1)
	return &Table[T]{cfg: cfg, size: size, entries: map[string]*entry[T]{}, callers: map[string]*callerShare{}, seed: maphash.MakeSeed()}
}

// Lookup is what Find found for an ID: a recorded outcome to replay, the
// caller's turn to run the invocation, or an invocation in flight to wait
// for.
type Lookup[T any] struct {
	// Replayed says Value and Err are the recorded outcome of an earlier
	// invocation with the ID; the caller must not run it again.
	Replayed bool
	Value    T
	Err      error
	// Run is set when the caller is to run the invocation, and must then
	// call Run.Finish exactly once.
	Run *Pending[T]
	// Wait is set when an invocation with the ID is in flight: the caller
	// must call Wait.Wait exactly once, and may first let go of what it
	// holds to run the invocation itself, which it will not.
	Wait *Waiter[T]
}

// Pending is an invocation the caller of Find runs.
type Pending[T any] struct {
	t *Table[T]
	e *entry[T]
}

// Waiter is a caller's place among the waiters of an invocation in flight.
type Waiter[T any] struct {
	t *Table[T]
	e *entry[T]
}

// Outcome is what a waiter got: the outcome of the invocation it waited
// for, which Recorded says was kept. An outcome that was not recorded is a
// refusal before that invocation started: nothing ran, and the waiter may
// send its own again.
type Outcome[T any] struct {
	Value    T
	Err      error
	Recorded bool
}

// Find looks caller's id up without waiting: the IDs of different callers
// never meet. A recorded outcome within the window is replayed; an ID
// whose outcome was evicted within its window is ErrEvicted; an invocation
// in flight is the caller's to wait for (Lookup.Wait) unless MaxWaiters
// already do (ErrTooManyWaiters); otherwise the caller runs it
// (Lookup.Run).
func (t *Table[T]) Find(caller, id string) (Lookup[T], error) {
	id = caller + "\x00" + id
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	e := t.entries[id]
	switch {
	case e == nil && t.cfg.Tombstones.has(maphash.String(t.seed, id), t.cfg.Clock.Now().Add(-t.cfg.Window)):
		return Lookup[T]{}, ErrEvicted
	case e == nil:
		e = &entry[T]{t: t, id: id, caller: caller, done: make(chan struct{})}
		t.entries[id] = e
		return Lookup[T]{Run: &Pending[T]{t: t, e: e}}, nil
	case e.recorded:
		return Lookup[T]{Replayed: true, Value: e.value, Err: e.err}, nil
	case t.cfg.MaxWaiters > 0 && e.waiters >= t.cfg.MaxWaiters:
		return Lookup[T]{}, ErrTooManyWaiters
	}
	e.waiters++
	return Lookup[T]{Wait: &Waiter[T]{t: t, e: e}}, nil
}

// Wait waits for the outcome of the invocation in flight, until ctx ends
// (Wait then returns ctx's error).
func (w *Waiter[T]) Wait(ctx context.Context) (Outcome[T], error) {
	defer func() {
		w.t.mu.Lock()
		w.e.waiters--
		w.t.mu.Unlock()
	}()
	select {
	case <-w.e.done:
		return Outcome[T]{Value: w.e.value, Err: w.e.err, Recorded: w.e.recorded}, nil
	case <-ctx.Done():
		return Outcome[T]{}, ctx.Err()
	}
}

// Begin is Find for a caller that holds nothing worth letting go of while
// it waits: it waits for an invocation in flight, until ctx ends, and
// when that one ends without being recorded, takes its own turn.
func (t *Table[T]) Begin(ctx context.Context, caller, id string) (Lookup[T], error) {
	for {
		l, err := t.Find(caller, id)
		if err != nil || l.Wait == nil {
			return l, err
		}
		out, err := l.Wait.Wait(ctx)
		if err != nil {
			return Lookup[T]{}, err
		}
		if out.Recorded {
			return Lookup[T]{Replayed: true, Value: out.Value, Err: out.Err}, nil
		}
	}
}

// Finish ends the invocation: with record, its outcome is replayed to
// repeats within the window; without, a repeat runs it, and the waiters
// are told the outcome, not recorded (Begin's take a turn).
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
		share := t.callers[e.caller]
		if share == nil {
			share = &callerShare{}
			t.callers[e.caller] = share
		}
		e.callerElem = share.recorded.PushBack(e)
		share.bytes += e.size
		if budgeted {
			e.budgetElem = t.cfg.Budget.add(e, e.size)
		}
		t.evictLocked()
	} else {
		// Only its waiters read it: they did not run either.
		e.value, e.err = value, err
		if t.entries[e.id] == e {
			delete(t.entries, e.id)
		}
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

// evictLocked drops outcomes until the bounds hold, or until the newest
// alone is left: each time the oldest of the caller holding the most
// entries (over MaxEntries) or bytes (over MaxBytes), so that a caller
// recording a flood evicts its own outcomes, and one holding no more than
// the others loses none to it.
func (t *Table[T]) evictLocked() {
	for t.recorded.Len() > 1 {
		overEntries := t.recorded.Len() > t.cfg.MaxEntries
		if !overEntries && t.bytes <= t.cfg.MaxBytes {
			return
		}
		var heaviest *callerShare
		for _, share := range t.callers {
			if heaviest == nil || overEntries && share.recorded.Len() > heaviest.recorded.Len() ||
				!overEntries && share.bytes > heaviest.bytes {
				heaviest = share
			}
		}
		t.evictEntryLocked(heaviest.recorded.Front().Value.(*entry[T]))
	}
}

// evictEntryLocked drops e before its window ended, to stay within
// bounds, and keeps its ID as a tombstone: a repeat is then told that the
// outcome is no longer known rather than run a second time. An outcome
// that expired or whose Table was dropped leaves none: the guarantee ends
// with the window and with the registration.
func (t *Table[T]) evictEntryLocked(e *entry[T]) {
	t.removeLocked(e)
	if !t.dropped {
		t.cfg.Tombstones.add(maphash.String(t.seed, e.id), e.at)
	}
}

func (t *Table[T]) removeLocked(e *entry[T]) {
	t.recorded.Remove(e.elem)
	e.elem = nil
	t.bytes -= e.size
	if e.callerElem != nil {
		share := t.callers[e.caller]
		share.recorded.Remove(e.callerElem)
		share.bytes -= e.size
		e.callerElem = nil
		if share.recorded.Len() == 0 {
			delete(t.callers, e.caller)
		}
	}
	if e.budgetElem != nil {
		t.cfg.Budget.remove(e.budgetElem, e.size)
		e.budgetElem = nil
	}
	if t.entries[e.id] == e {
		delete(t.entries, e.id)
	}
}
