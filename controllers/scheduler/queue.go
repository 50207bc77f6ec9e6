package scheduler

import (
	"container/heap"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// parkedRecheck is how long a Runtime's parked Runs wait without an event
// before the scheduler looks at that Runtime again: a reservation whose
// bind never showed in the informer lapses without an event.
const parkedRecheck = 30 * time.Second

// lineEntry is one Pending Run in its Runtime's line.
type lineEntry struct {
	key     string // <namespace>/<name> of the Run
	line    string // <namespace>/<runtime>
	created time.Time
	seq     uint64 // arrival number, see arrivals
	uid     types.UID
	parked  bool
	index   int // in its heap
}

// before reports whether a was created before b, as older does for Runs.
func (a *lineEntry) before(b *lineEntry) bool {
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.uid < b.uid
}

// entryHeap orders a line's entries oldest first.
type entryHeap []*lineEntry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*lineEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// line holds the Pending Runs of one Runtime that may take one of its
// slots: those being tried (queued, or in a worker) and those parked
// until an event may give the Runtime a slot. Runs waiting out a retry
// backoff or a failed sync are in no line.
type line struct {
	namespace, runtime string
	trying, parked     entryHeap
	// checking: a recheck of the line is queued.
	checking bool
	// series is the runtime label its Runs are counted under in
	// kruntimes_scheduler_pending_runs.
	series  string
	counted int
}

func (l *line) len() int { return l.trying.Len() + l.parked.Len() }

// lines are the lines of every Runtime with Pending Runs. Every operation
// costs O(log n) in the length of the line, or O(k log n) for k Runs.
type lines struct {
	mu      sync.Mutex
	entries map[string]*lineEntry // by Run key
	byLine  map[string]*line
	parked  int
	// seriesOf names the runtime label of a line's Runs in the metrics.
	seriesOf func(namespace, runtime string) string
	// pending counts Runs by namespace and series.
	pending map[[2]string]int
}

func newLines(seriesOf func(namespace, runtime string) string) *lines {
	return &lines{
		entries:  map[string]*lineEntry{},
		byLine:   map[string]*line{},
		seriesOf: seriesOf,
		pending:  map[[2]string]int{},
	}
}

// try puts the Run of e.key in its line as being tried, taking it out of
// wherever it was.
func (ls *lines) try(e lineEntry, namespace, runtime string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if cur, ok := ls.entries[e.key]; ok {
		if cur.line == e.line && !cur.parked {
			return
		}
		ls.removeLocked(cur)
	}
	l := ls.byLine[e.line]
	if l == nil {
		l = &line{namespace: namespace, runtime: runtime}
		ls.byLine[e.line] = l
	}
	entry := e
	entry.parked = false
	ls.entries[e.key] = &entry
	heap.Push(&l.trying, &entry)
	ls.countLocked(e.line, l)
}

// park moves the Run of key from being tried to parked. It reports
// whether the line's recheck must be queued (the caller queues it).
func (ls *lines) park(key string) (check bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	e, ok := ls.entries[key]
	if !ok || e.parked {
		return false
	}
	l := ls.byLine[e.line]
	heap.Remove(&l.trying, e.index)
	e.parked = true
	heap.Push(&l.parked, e)
	ls.parked++
	ls.countLocked(e.line, l)
	if !l.checking {
		l.checking = true
		return true
	}
	return false
}

// leave takes the Run of key out of its line: it was bound, reserved a
// slot, left Pending, or waits out a backoff.
func (ls *lines) leave(key string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if e, ok := ls.entries[key]; ok {
		ls.removeLocked(e)
	}
}

func (ls *lines) removeLocked(e *lineEntry) {
	l := ls.byLine[e.line]
	if e.parked {
		heap.Remove(&l.parked, e.index)
		ls.parked--
	} else {
		heap.Remove(&l.trying, e.index)
	}
	delete(ls.entries, e.key)
	ls.countLocked(e.line, l)
}

// countLocked keeps kruntimes_scheduler_pending_runs, under the runtime
// label the line's Runtime has now, and drops an empty line (its recheck,
// if queued, finds it gone).
func (ls *lines) countLocked(key string, l *line) {
	series := ""
	if l.len() > 0 {
		series = ls.seriesOf(l.namespace, l.runtime)
	}
	if l.series != "" {
		ls.addPending(l.namespace, l.series, -l.counted)
	}
	l.series = series
	if series != "" {
		ls.addPending(l.namespace, series, l.len())
	}
	l.counted = l.len()
	if l.len() == 0 {
		delete(ls.byLine, key)
	}
	queueDepth.WithLabelValues(queueParked).Set(float64(ls.parked))
}

func (ls *lines) addPending(namespace, series string, delta int) {
	k := [2]string{namespace, series}
	n := ls.pending[k] + delta
	if n <= 0 {
		delete(ls.pending, k)
		pendingRuns.DeleteLabelValues(namespace, series)
		return
	}
	ls.pending[k] = n
	pendingRuns.WithLabelValues(namespace, series).Set(float64(n))
}

// parkedKey reports whether the Run of key is parked.
func (ls *lines) isParked(key string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	e, ok := ls.entries[key]
	return ok && e.parked
}

// ahead reports whether at least n other Runs of key's line were created
// before it. It looks at no more than n Runs of each heap.
func (ls *lines) ahead(key string, n int) bool {
	if n <= 0 {
		return true
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	e, ok := ls.entries[key]
	if !ok {
		return false
	}
	l := ls.byLine[e.line]
	count := 0
	for _, h := range []*entryHeap{&l.trying, &l.parked} {
		count += countOlder(h, e, n-count)
		if count >= n {
			return true
		}
	}
	return false
}

// countOlder counts, up to limit, the entries of h created before e.
func countOlder(h *entryHeap, e *lineEntry, limit int) int {
	var popped []*lineEntry
	count := 0
	for h.Len() > 0 && count < limit {
		top := (*h)[0]
		if top != e && !top.before(e) {
			break
		}
		popped = append(popped, heap.Pop(h).(*lineEntry))
		if top != e {
			count++
		}
	}
	for _, p := range popped {
		heap.Push(h, p)
	}
	return count
}

// wake moves up to n of the line's oldest parked Runs (all of them when n
// is negative) to being tried, and returns their keys, oldest first. With
// than, only Runs created before it are woken.
func (ls *lines) wake(lineKey string, n int, than string) []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.byLine[lineKey]
	if l == nil {
		return nil
	}
	var limit *lineEntry
	if than != "" {
		limit = ls.entries[than]
	}
	var keys []string
	for l.parked.Len() > 0 && (n < 0 || len(keys) < n) {
		top := l.parked[0]
		if limit != nil && !top.before(limit) {
			break
		}
		heap.Pop(&l.parked)
		ls.parked--
		top.parked = false
		heap.Push(&l.trying, top)
		keys = append(keys, top.key)
	}
	ls.countLocked(lineKey, l)
	return keys
}

// rechecked reports whether the line still has parked Runs, and so needs
// its recheck queued again; otherwise the next Run parked queues it.
func (ls *lines) rechecked(lineKey string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.byLine[lineKey]
	if l == nil {
		return false
	}
	l.checking = l.parked.Len() > 0
	return l.checking
}

// depth returns the number of Runs parked and being tried in lineKey.
func (ls *lines) depth(lineKey string) (parked, trying int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.byLine[lineKey]; l != nil {
		return l.parked.Len(), l.trying.Len()
	}
	return 0, 0
}
