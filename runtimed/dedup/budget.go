package dedup

import (
	"container/list"
	"sync"
)

// Budget bounds the bytes of the outcomes that several Tables record
// together — every function of one Pod — so that many functions, each
// within its own Table's bounds, cannot add up to more memory than the
// Pod has. When a record takes the total over the budget, the oldest
// outcomes of all the Tables go first; one outcome larger than the budget
// is kept alone. The zero value is not usable; make one with NewBudget.
type Budget struct {
	max int64

	mu    sync.Mutex
	bytes int64
	// recorded lists the outcomes of every Table sharing the budget,
	// oldest first, each as what removes it from its Table.
	recorded list.List
}

// evictable is an outcome recorded under a Budget: evict removes it from
// its Table (and so from the budget), unless its Table already did.
type evictable interface{ evict() }

// NewBudget returns a Budget of max bytes.
func NewBudget(max int64) *Budget {
	return &Budget{max: max}
}

// Bytes returns the bytes of the outcomes recorded under b.
func (b *Budget) Bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes
}

func (b *Budget) add(e evictable, size int64) *list.Element {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bytes += size
	return b.recorded.PushBack(e)
}

func (b *Budget) remove(elem *list.Element, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recorded.Remove(elem)
	b.bytes -= size
}

// enforce evicts the oldest outcomes until the budget holds, or until one
// is left. It must be called without any Table's lock held: a Table's lock
// is taken before the budget's, never after.
func (b *Budget) enforce() {
	for {
		b.mu.Lock()
		if b.bytes <= b.max || b.recorded.Len() <= 1 {
			b.mu.Unlock()
			return
		}
		oldest := b.recorded.Front().Value.(evictable)
		b.mu.Unlock()
		oldest.evict()
	}
}
