package slots

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/runtimed/metrics"
)

// Table holds the slots of one Runtime Pod, one per Run UID.
type Table struct {
	capacity int

	mu   sync.Mutex
	held map[types.UID]lifecycle.Mode
	// closed is set when the Pod shuts down: no Run is claimed any more.
	closed bool
	// onRelease are called, outside the lock, after a slot was freed: the
	// Run waiting for it may now be claimed.
	onRelease []func()
}

// New returns a table of capacity slots; capacity is at least 1.
func New(capacity int) (*Table, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("capacity must be at least 1, got %d", capacity)
	}
	metrics.Capacity.Set(float64(capacity))
	t := &Table{capacity: capacity, held: map[types.UID]lifecycle.Mode{}}
	t.publishLocked()
	return t, nil
}

// Capacity is the number of slots.
func (t *Table) Capacity() int { return t.capacity }

// OnRelease registers f to be called after every release. Register before
// the first Acquire.
func (t *Table) OnRelease(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onRelease = append(t.onRelease, f)
}

// Acquire takes a slot for the Run uid and reports whether it holds one:
// false when every slot is taken by other Runs, or the table is closed. A
// Run that already holds a slot keeps it.
func (t *Table) Acquire(uid types.UID, mode lifecycle.Mode) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.held[uid]; ok {
		return true
	}
	if t.closed || len(t.held) >= t.capacity {
		return false
	}
	t.held[uid] = mode
	t.publishLocked()
	return true
}

// Close makes every later Acquire of a new Run fail: the Pod shuts down,
// and a Run claimed now would only have to be given back.
func (t *Table) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
}

// Closed reports whether Close was called.
func (t *Table) Closed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Hold takes a slot for uid even past capacity: for work that already runs
// on this Pod, found again after a restart, which refusing would not stop.
func (t *Table) Hold(uid types.UID, mode lifecycle.Mode) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.held[uid] = mode
	t.publishLocked()
}

// Holds reports whether the Run uid holds a slot.
func (t *Table) Holds(uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.held[uid]
	return ok
}

// Used is the number of slots held.
func (t *Table) Used() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.held)
}

// Release frees the slot of uid, if it holds one, and then tells the
// OnRelease callbacks.
func (t *Table) Release(uid types.UID) {
	t.mu.Lock()
	_, ok := t.held[uid]
	delete(t.held, uid)
	t.publishLocked()
	callbacks := t.onRelease
	t.mu.Unlock()
	if !ok {
		return
	}
	for _, f := range callbacks {
		f()
	}
}

func (t *Table) publishLocked() {
	counts := map[lifecycle.Mode]int{lifecycle.ModeTask: 0, lifecycle.ModeFunction: 0}
	for _, mode := range t.held {
		counts[mode]++
	}
	for mode, n := range counts {
		metrics.SlotsUsed.WithLabelValues(string(mode)).Set(float64(n))
	}
}
