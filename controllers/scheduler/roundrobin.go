package scheduler

import "strings"

// roundRobin is the order in which the scheduler tries Runs: first in,
// first out within a namespace, and the namespaces with Runs to try take
// turns, one Run each. A namespace that queued 10,000 Runs delays another
// namespace's one Run by at most one attempt, not by 10,000. It is the
// storage of the scheduler's workqueue (workqueue.Queue), which keeps each
// key in it at most once and calls it from one goroutine at a time.
type roundRobin struct {
	// byNamespace holds each namespace's keys in arrival order.
	byNamespace map[string]*fifo
	// turns holds the namespaces with keys, in the order they take turns.
	turns fifo
	n     int
	// depth is told the number of keys after each change.
	depth func(int)
}

func newRoundRobin(depth func(int)) *roundRobin {
	return &roundRobin{byNamespace: map[string]*fifo{}, depth: depth}
}

// Touch keeps a key that is queued again in its place.
func (r *roundRobin) Touch(string) {}

// Push queues key behind its namespace's other keys.
func (r *roundRobin) Push(key string) {
	namespace, _, _ := strings.Cut(key, "/")
	q, ok := r.byNamespace[namespace]
	if !ok {
		q = &fifo{}
		r.byNamespace[namespace] = q
		r.turns.push(namespace)
	}
	q.push(key)
	r.n++
	r.depth(r.n)
}

// Len is the number of keys queued.
func (r *roundRobin) Len() int { return r.n }

// Pop returns the oldest key of the namespace whose turn it is; that
// namespace, if it has more, goes to the back of the turns.
func (r *roundRobin) Pop() string {
	namespace := r.turns.pop()
	q := r.byNamespace[namespace]
	key := q.pop()
	if q.len() == 0 {
		delete(r.byNamespace, namespace)
	} else {
		r.turns.push(namespace)
	}
	r.n--
	r.depth(r.n)
	return key
}

// fifo is a queue of strings whose push and pop cost O(1), amortized.
type fifo struct {
	items []string
	head  int
}

func (f *fifo) push(s string) { f.items = append(f.items, s) }

func (f *fifo) len() int { return len(f.items) - f.head }

func (f *fifo) pop() string {
	s := f.items[f.head]
	f.items[f.head] = ""
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		f.items, f.head = append([]string(nil), f.items[f.head:]...), 0
	}
	return s
}
