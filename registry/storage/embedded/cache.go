package embedded

import (
	"context"
	"net/http"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// cachedStore is the watch cache (CacheDelegator) in front of a store, with
// one kind of watch routed around the cache because the store serves it and
// the cache cannot: a watch from a resourceVersion older than the cache's
// in-memory window (always the case right after a restart) gets 410 from the
// cache. The store still has that history on disk, so the watch is reopened
// on it: clients resume across restarts instead of relisting.
type cachedStore struct {
	storage.Interface
	store *store
}

func (c *cachedStore) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := c.Interface.Watch(ctx, key, opts)
	if err != nil || opts.ResourceVersion == "" || opts.ResourceVersion == "0" {
		return w, err
	}
	// The cache reports "too old" through an error watcher whose event is
	// queued before Watch returns, so a non-blocking peek sees it.
	select {
	case e, ok := <-w.ResultChan():
		if !ok {
			return w, nil
		}
		if isExpired(e) {
			w.Stop()
			return c.store.Watch(ctx, key, opts)
		}
		return newPeekedWatcher(e, w), nil
	default:
		return w, nil
	}
}

func isExpired(e watch.Event) bool {
	if e.Type != watch.Error {
		return false
	}
	status, ok := e.Object.(*metav1.Status)
	return ok && (status.Code == http.StatusGone || status.Reason == metav1.StatusReasonExpired || status.Reason == metav1.StatusReasonGone)
}

// peekedWatcher re-delivers the event taken by the peek, then the rest.
type peekedWatcher struct {
	inner    watch.Interface
	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func newPeekedWatcher(first watch.Event, inner watch.Interface) *peekedWatcher {
	p := &peekedWatcher{inner: inner, result: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(p.result)
		e, ok := first, true
		for ok {
			select {
			case p.result <- e:
			case <-p.stop:
				return
			}
			e, ok = <-inner.ResultChan()
		}
	}()
	return p
}

func (p *peekedWatcher) ResultChan() <-chan watch.Event { return p.result }

func (p *peekedWatcher) Stop() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.inner.Stop()
}
