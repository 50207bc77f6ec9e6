package embedded

import (
	"container/heap"
	"context"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/klog/v2"
)

// expiryItem schedules the deletion of key, unless it was written again
// (its revision moved past rev) in the meantime.
type expiryItem struct {
	at  int64
	key string
	rev uint64
}

type expiryHeap []expiryItem

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryItem)) }
func (h *expiryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// expiryQueue holds the keys written with a TTL. It lives in memory and is
// rebuilt from the kv bucket on Open, so TTLs survive restarts.
type expiryQueue struct {
	mu    sync.Mutex
	items expiryHeap
	wake  chan struct{}
}

func newExpiryQueue() *expiryQueue {
	return &expiryQueue{wake: make(chan struct{}, 1)}
}

func (q *expiryQueue) add(key string, rev uint64, at int64) {
	q.mu.Lock()
	heap.Push(&q.items, expiryItem{at: at, key: key, rev: rev})
	first := q.items[0].at == at
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// due pops the items expired at now and returns when the next one expires.
func (q *expiryQueue) due(now int64) ([]expiryItem, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []expiryItem
	for len(q.items) > 0 && q.items[0].at <= now {
		out = append(out, heap.Pop(&q.items).(expiryItem))
	}
	next := time.Hour
	if len(q.items) > 0 {
		next = time.Duration(q.items[0].at - now)
	}
	return out, next
}

func (b *Backend) loadExpiries(tx *bolt.Tx) error {
	return tx.Bucket(bucketKV).ForEach(func(k, v []byte) error {
		rec, err := decodeKV(v)
		if err != nil {
			return err
		}
		if rec.expiry != 0 {
			b.ttl.add(string(k), rec.modRev, rec.expiry)
		}
		return nil
	})
}

// expiryLoop deletes keys whose TTL passed. Deletions are ordinary
// optimistic writes, so watchers see a DELETED event like with an etcd lease.
func (b *Backend) expiryLoop() {
	defer b.loops.Done()
	logger := klog.Background().WithName("embedded-storage-ttl")
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-b.stopCh:
			return
		case <-b.ttl.wake:
		case <-timer.C:
		}
		items, next := b.ttl.due(time.Now().UnixNano())
		for _, it := range items {
			op := &writeOp{key: []byte(it.key), delete: true, expectedRev: it.rev}
			if err := b.submit(context.Background(), op); err != nil {
				logger.Error(err, "Deleting expired key failed; will retry", "key", it.key)
				b.ttl.add(it.key, it.rev, time.Now().Add(time.Second).UnixNano())
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}
