package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	"k8s.io/klog/v2"
)

const (
	// resultBufferSize matches etcd3's outgoing buffer.
	resultBufferSize = 100
	// replayBatch bounds the events copied out of one read transaction, so
	// a slow consumer never pins a bbolt snapshot (and its pages).
	replayBatch = 256
	// replayScan bounds the history entries scanned per read transaction
	// when few of them match the watch.
	replayScan = 8192
)

// notifier wakes watchers. Channels are closed and replaced, so a watcher
// that took a channel before reading the revision cannot miss a wakeup.
type notifier struct {
	mu       sync.Mutex
	changed  chan struct{}
	progress chan struct{}
}

func newNotifier() *notifier {
	return &notifier{changed: make(chan struct{}), progress: make(chan struct{})}
}

func (n *notifier) publish() {
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
}

func (n *notifier) requestProgress() {
	n.mu.Lock()
	close(n.progress)
	n.progress = make(chan struct{})
	n.mu.Unlock()
}

func (n *notifier) wait() (changed, progress <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed, n.progress
}

func (n *notifier) close() {}

// rawEvent is one revision of history copied out of a read transaction.
type rawEvent struct {
	rev       uint64
	key       string
	typ       entryType
	value     []byte
	prevValue []byte
	created   bool
	initial   bool
}

// watchChan implements watch.Interface. A watch tails the persisted
// history: replay from an old revision and live delivery are the same code
// path, so there is neither a gap nor a duplicate when it catches up.
type watchChan struct {
	s                *store
	key              []byte
	recursive        bool
	pred             storage.SelectionPredicate
	acceptAll        bool
	progressNotify   bool
	recordTimestamps bool
	ctx              context.Context
	cancel           context.CancelFunc
	result           chan watch.Event
	logger           klog.Logger
	// sentRev is the revision of the last event or bookmark sent.
	sentRev uint64
}

func (s *store) watch(ctx context.Context, key string, rev uint64, opts storage.ListOptions) (watch.Interface, error) {
	if opts.Recursive && !strings.HasSuffix(key, "/") {
		return nil, fmt.Errorf(`recursive key needs to end with "/"`)
	}
	if opts.ProgressNotify && s.newFunc == nil {
		return nil, apierrors.NewInternalError(errors.New("progressNotify for watch is unsupported by the embedded storage because no newFunc was provided"))
	}
	startRev := rev
	if rev == 0 && utilfeature.DefaultFeatureGate.Enabled(features.WatchList) && opts.SendInitialEvents != nil && !*opts.SendInitialEvents {
		// Only a stream of changes from now on.
		startRev = s.backend.rev.Load()
	}
	wc := &watchChan{
		s:                s,
		key:              []byte(key),
		recursive:        opts.Recursive,
		pred:             opts.Predicate,
		progressNotify:   opts.ProgressNotify,
		recordTimestamps: opts.RecordTimestamps,
		result:           make(chan watch.Event, resultBufferSize),
		logger:           klog.FromContext(ctx).WithValues("key", key),
	}
	wc.acceptAll = wc.pred.Empty()
	wc.ctx, wc.cancel = context.WithCancel(ctx)
	go wc.run(startRev, areInitialEventsRequired(rev, opts), isInitialEventsEndBookmarkRequired(opts))
	// Like etcd3: the initial state is produced asynchronously, so signal
	// APF right away rather than holding the seat.
	utilflowcontrol.WatchInitialized(ctx)
	return wc, nil
}

func isInitialEventsEndBookmarkRequired(opts storage.ListOptions) bool {
	if !utilfeature.DefaultFeatureGate.Enabled(features.WatchList) {
		return false
	}
	return opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.Predicate.AllowWatchBookmarks
}

func areInitialEventsRequired(resourceVersion uint64, opts storage.ListOptions) bool {
	if opts.SendInitialEvents == nil && resourceVersion == 0 {
		return true // legacy: a watch from "any" starts with the current state
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.WatchList) {
		return false
	}
	return opts.SendInitialEvents != nil && *opts.SendInitialEvents
}

// Stop implements watch.Interface.
func (wc *watchChan) Stop() { wc.cancel() }

// ResultChan implements watch.Interface.
func (wc *watchChan) ResultChan() <-chan watch.Event { return wc.result }

func (wc *watchChan) run(startRev uint64, initialEvents, endBookmark bool) {
	defer close(wc.result)
	defer wc.cancel()
	b := wc.s.backend
	if startRev > 0 && initialEvents {
		if cur := b.rev.Load(); startRev > cur {
			wc.sendError(storage.NewTooLargeResourceVersionError(startRev, cur, int(wait.Jitter(time.Second, 3).Seconds())))
			return
		}
	}
	if initialEvents {
		rev, err := wc.sendInitialEvents()
		if err != nil {
			wc.sendError(err)
			return
		}
		startRev = rev
	}
	if endBookmark {
		if !wc.sendBookmark(startRev, true) {
			return
		}
	}

	var tick <-chan time.Time
	if wc.progressNotify {
		ticker := time.NewTicker(b.opts.ProgressNotifyInterval)
		defer ticker.Stop()
		tick = ticker.C
	}
	next := startRev + 1
	progressPending := false
	for {
		changed, progress := b.notify.wait()
		if published := b.rev.Load(); next <= published {
			var err error
			if next, err = wc.replay(next, published); err != nil {
				wc.sendError(err)
				return
			}
			if wc.ctx.Err() != nil {
				return
			}
			// The revision is global: writes to other keys move it without
			// an event here. Tell the watch cache right away, so a read
			// at a revision from another resource does not wait for the
			// next periodic bookmark (or time out).
			if wc.progressNotify && next-1 > wc.sentRev && !wc.sendBookmark(next-1, false) {
				return
			}
			continue
		} else if progressPending && next-1 == published {
			// Caught up: everything up to published has been delivered.
			if !wc.sendBookmark(published, false) {
				return
			}
			progressPending = false
		}
		select {
		case <-changed:
		case <-progress:
			progressPending = wc.progressNotify
		case <-tick:
			progressPending = true
		case <-wc.ctx.Done():
			return
		case <-b.stopCh:
			return
		}
	}
}

// sendInitialEvents sends the current state as ADDED events and returns the
// revision of that snapshot.
func (wc *watchChan) sendInitialEvents() (uint64, error) {
	var events []rawEvent
	var rev uint64
	err := wc.s.backend.view(func(tx *bolt.Tx) error {
		rev, _ = decodeUint(tx.Bucket(bucketMeta).Get(metaRev))
		return rangeAt(tx, wc.key, wc.key, wc.recursive, rev, rev, func(k, v []byte, modRev uint64) bool {
			events = append(events, rawEvent{rev: modRev, key: string(k), typ: entryPut, value: bytes.Clone(v), created: true, initial: true})
			return true
		})
	})
	if err != nil {
		return 0, err
	}
	for i := range events {
		if !wc.deliver(&events[i]) {
			return rev, wc.ctx.Err()
		}
		events[i] = rawEvent{}
	}
	return rev, nil
}

// replay delivers the history in [from, to] and returns the next revision
// to read. It fails with 410 Gone when that history was compacted.
func (wc *watchChan) replay(from, to uint64) (uint64, error) {
	for from <= to {
		var events []rawEvent
		next := from
		err := wc.s.backend.view(func(tx *bolt.Tx) error {
			compactRev, _ := decodeUint(tx.Bucket(bucketMeta).Get(metaCompact))
			if from <= compactRev {
				return apierrors.NewResourceExpired(expiredWatch)
			}
			logb := tx.Bucket(bucketLog)
			c := logb.Cursor()
			scanned := 0
			for k, v := c.Seek(encodeUint(from)); k != nil && len(events) < replayBatch && scanned < replayScan; k, v = c.Next() {
				rev, _ := decodeUint(k)
				if rev > to {
					break
				}
				next = rev + 1
				scanned++
				e, err := decodeLogEntry(v)
				if err != nil {
					return fmt.Errorf("history at revision %d in %s: %w", rev, wc.s.backend.path, err)
				}
				if e.typ == entryMarker || !wc.matchesKey(e.key) {
					continue
				}
				ev := rawEvent{rev: rev, key: string(e.key), typ: e.typ, value: bytes.Clone(e.value), created: e.prevRev == 0}
				if e.prevRev != 0 && (e.typ == entryDelete || !wc.acceptAll) {
					if prev, err := decodeLogEntry(logb.Get(encodeUint(e.prevRev))); err == nil && prev.typ == entryPut {
						ev.prevValue = bytes.Clone(prev.value)
					}
				}
				events = append(events, ev)
			}
			if next == from {
				// Nothing at or after from up to "to": the revisions are
				// dense, so this only happens if history is damaged.
				return fmt.Errorf("history of %s has no revision %d", wc.s.backend.path, from)
			}
			return nil
		})
		if err != nil {
			return from, err
		}
		for i := range events {
			if !wc.deliver(&events[i]) {
				return next, nil
			}
			events[i] = rawEvent{}
		}
		from = next
	}
	return from, nil
}

func (wc *watchChan) matchesKey(key []byte) bool {
	if wc.recursive {
		return bytes.HasPrefix(key, wc.key)
	}
	return bytes.Equal(key, wc.key)
}

func (wc *watchChan) filter(obj runtime.Object) bool {
	if wc.acceptAll {
		return true
	}
	matched, err := wc.pred.Matches(obj)
	return err == nil && matched
}

// deliver turns a raw event into the watch event the predicate calls for
// (an update moving an object into or out of the selection becomes ADDED or
// DELETED, as in etcd3) and sends it. It returns false once the watch ends.
func (wc *watchChan) deliver(e *rawEvent) bool {
	res, err := wc.transform(e)
	if err != nil {
		wc.logger.Error(err, "Failed to decode watch event", "revision", e.rev)
		wc.sendError(err)
		return false
	}
	if res == nil {
		return true
	}
	select {
	case wc.result <- *res:
		wc.sentRev = e.rev
		return true
	case <-wc.ctx.Done():
		return false
	}
}

func (wc *watchChan) decodeValue(ctx context.Context, key string, data []byte, rev uint64) (runtime.Object, error) {
	plain, _, err := wc.s.getTransformer().TransformFromStorage(ctx, data, authenticatedData(key))
	if err != nil {
		return nil, err
	}
	obj, err := runtime.Decode(wc.s.codec, plain)
	if err != nil {
		return nil, err
	}
	if err := wc.s.versioner.UpdateObject(obj, rev); err != nil {
		return nil, fmt.Errorf("failure to version api object (%d) %#v: %w", rev, obj, err)
	}
	return obj, nil
}

func (wc *watchChan) transform(e *rawEvent) (*watch.Event, error) {
	var cur, old runtime.Object
	var err error
	if e.typ == entryPut {
		if cur, err = wc.decodeValue(wc.ctx, e.key, e.value, e.rev); err != nil {
			return nil, err
		}
	}
	if e.prevValue != nil {
		// The previous object carries the revision of this event, as etcd3.
		if old, err = wc.decodeValue(wc.ctx, e.key, e.prevValue, e.rev); err != nil {
			if e.typ == entryDelete {
				// An unreadable object was deleted (unsafe deletion): say
				// so rather than report a generic decode failure.
				return nil, &corruptObjectDeletedError{err: err}
			}
			return nil, err
		}
	}
	var res *watch.Event
	switch {
	case e.typ == entryDelete:
		if old == nil || !wc.filter(old) {
			return nil, nil
		}
		res = &watch.Event{Type: watch.Deleted, Object: old}
	case e.created:
		if !wc.filter(cur) {
			return nil, nil
		}
		res = &watch.Event{Type: watch.Added, Object: cur}
	case wc.acceptAll:
		res = &watch.Event{Type: watch.Modified, Object: cur}
	case old == nil:
		// The previous version is gone from history; judge by the new one.
		if !wc.filter(cur) {
			return nil, nil
		}
		res = &watch.Event{Type: watch.Modified, Object: cur}
	default:
		curPasses, oldPasses := wc.filter(cur), wc.filter(old)
		switch {
		case curPasses && oldPasses:
			res = &watch.Event{Type: watch.Modified, Object: cur}
		case curPasses:
			res = &watch.Event{Type: watch.Added, Object: cur}
		case oldPasses:
			res = &watch.Event{Type: watch.Deleted, Object: old}
		default:
			return nil, nil
		}
	}
	if wc.recordTimestamps && !e.initial {
		res.Object = &timedWatchEvent{Object: res.Object, recordTime: time.Now()}
	}
	return res, nil
}

func (wc *watchChan) sendBookmark(rev uint64, initialEventsEnd bool) bool {
	obj := wc.s.newFunc()
	if err := wc.s.versioner.UpdateObject(obj, rev); err != nil {
		wc.sendError(fmt.Errorf("failed to propagate object resource version: %w", err))
		return false
	}
	if initialEventsEnd {
		if err := storage.AnnotateInitialEventsEndBookmark(obj); err != nil {
			wc.sendError(fmt.Errorf("annotating the initial-events-end bookmark of %v: %w", wc.s.groupResource, err))
			return false
		}
	}
	select {
	case wc.result <- watch.Event{Type: watch.Bookmark, Object: obj}:
		wc.sentRev = rev
		return true
	case <-wc.ctx.Done():
		return false
	}
}

// sendError delivers err as a watch.Error event; the watch then ends, so no
// event after the error reaches the consumer.
func (wc *watchChan) sendError(err error) {
	defer wc.cancel()
	if errors.Is(err, context.Canceled) {
		return
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	select {
	case wc.result <- watch.Event{Type: watch.Error, Object: &st}:
	case <-wc.ctx.Done():
	}
}

// timedWatchEvent wraps an object with the time storage produced it, for the
// watch cache's latency metrics (ListOptions.RecordTimestamps).
type timedWatchEvent struct {
	runtime.Object
	recordTime time.Time
}

var _ storage.WatchEventWithRecordTime = &timedWatchEvent{}

func (t *timedWatchEvent) GetObjectMeta() metav1.Object {
	m, _ := meta.Accessor(t.Object)
	return m
}

func (t *timedWatchEvent) DeepCopyObject() runtime.Object {
	return &timedWatchEvent{Object: t.Object.DeepCopyObject(), recordTime: t.recordTime}
}

func (t *timedWatchEvent) RecordTime() time.Time  { return t.recordTime }
func (t *timedWatchEvent) Unwrap() runtime.Object { return t.Object }
