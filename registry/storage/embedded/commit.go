package embedded

import (
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/klog/v2"
)

// errNothingWritten rolls back a batch in which every precondition failed.
var errNothingWritten = errors.New("no write applied")

// writeOp is one optimistic single-key write: it applies only if the key's
// current modification revision equals expectedRev (0: the key must not
// exist), like etcd's OptimisticPut/OptimisticDelete.
type writeOp struct {
	key         []byte
	delete      bool
	value       []byte
	expectedRev uint64
	expiry      int64

	// Results, valid once done is closed.
	rev       uint64
	succeeded bool
	// current is the key's state when the precondition failed (nil: absent).
	current *kvRecord
	err     error
	done    chan struct{}
}

// submit queues op for the commit loop and waits until it is durable (or
// failed). Once queued, the write is waited for even if ctx ends, so a caller
// never reports failure for a write that became visible.
func (b *Backend) submit(ctx context.Context, op *writeOp) error {
	op.done = make(chan struct{})
	b.closeMu.RLock()
	if b.closed {
		b.closeMu.RUnlock()
		return errBackendClosed(b.path)
	}
	select {
	case b.writes <- op:
	case <-ctx.Done():
		b.closeMu.RUnlock()
		return ctx.Err()
	}
	b.closeMu.RUnlock()
	<-op.done
	return op.err
}

// commitLoop is the single writer. Writes that arrive while a transaction is
// being fsynced queue up and share the next one (group commit), so a burst of
// N concurrent writers costs about one fsync per batch instead of N.
func (b *Backend) commitLoop() {
	defer b.loops.Done()
	batch := make([]*writeOp, 0, b.opts.MaxBatchSize)
	for {
		select {
		case op := <-b.writes:
			batch = append(batch[:0], op)
		drain:
			for len(batch) < b.opts.MaxBatchSize {
				select {
				case op := <-b.writes:
					batch = append(batch, op)
				default:
					break drain
				}
			}
			b.commit(batch)
		case <-b.stopCh:
			for {
				select {
				case op := <-b.writes:
					op.err = errBackendClosed(b.path)
					close(op.done)
				default:
					return
				}
			}
		}
	}
}

func (b *Backend) commit(batch []*writeOp) {
	if err := b.halted(); err != nil {
		for _, op := range batch {
			op.err = err
			close(op.done)
		}
		return
	}
	start := time.Now()
	base := b.rev.Load()
	next := base
	err := b.db.Update(func(tx *bolt.Tx) error {
		next = base
		kvb, logb, idx, meta := tx.Bucket(bucketKV), tx.Bucket(bucketLog), tx.Bucket(bucketKeyRev), tx.Bucket(bucketMeta)
		// Revisions only grow, so a full page is never split again: pack
		// the log's pages (bbolt splits them half full by default), as
		// etcd does for its revision-keyed bucket.
		logb.FillPercent = 0.9
		for _, op := range batch {
			op.succeeded, op.current = false, nil
			var cur *kvRecord
			if raw := kvb.Get(op.key); raw != nil {
				rec, err := decodeKV(raw)
				if err != nil {
					return fmt.Errorf("key %q: %w", op.key, err)
				}
				rec.value = append([]byte(nil), rec.value...)
				cur = &rec
			}
			var curRev uint64
			if cur != nil {
				curRev = cur.modRev
			}
			if curRev != op.expectedRev || (op.delete && cur == nil) {
				op.current = cur
				continue
			}
			next++
			entry := logEntry{typ: entryPut, prevRev: curRev, key: op.key, value: op.value}
			if op.delete {
				entry.typ, entry.value = entryDelete, nil
				if err := kvb.Delete(op.key); err != nil {
					return err
				}
			} else if err := kvb.Put(op.key, encodeKV(kvRecord{modRev: next, expiry: op.expiry, value: op.value})); err != nil {
				return err
			}
			if err := logb.Put(encodeUint(next), encodeLogEntry(entry)); err != nil {
				return err
			}
			if err := idx.Put(keyRevKey(op.key, next), []byte{}); err != nil {
				return err
			}
			op.rev, op.succeeded = next, true
		}
		if next == base {
			// Only failed preconditions: roll back instead of paying for an
			// empty commit's fsync.
			return errNothingWritten
		}
		return meta.Put(metaRev, encodeUint(next))
	})
	if errors.Is(err, errNothingWritten) {
		err = nil
	}
	b.recordFileSize()
	if err != nil {
		b.commitFailed(batch, base, err)
		return
	}
	for _, op := range batch {
		if op.succeeded && !op.delete && op.expiry != 0 {
			b.ttl.add(string(op.key), op.rev, op.expiry)
		}
	}
	if next != base {
		b.writeHealth.set(nil)
		commitDuration.Observe(time.Since(start).Seconds())
		commitWrites.Observe(float64(next - base))
		b.rev.Store(next)
		b.notify.publish()
		b.recordHistory()
	}
	for _, op := range batch {
		close(op.done)
	}
}

// commitFailed fails every write of a batch whose transaction did not
// commit. A transaction that failed before it wrote its meta page left
// nothing behind, and writes may be tried again (a full disk is reported
// by CheckWritable until it has room). One whose meta page reached the
// file before its fsync failed is visible all the same, at revisions the
// server has not published: the next batch would reuse them and watchers
// would never see these. Then the backend stops, as etcd does, and only a
// restart, which reads the revision from the file, serves it again.
func (b *Backend) commitFailed(batch []*writeOp, base uint64, err error) {
	commitFailures.Inc()
	b.writeHealth.set(err)
	klog.Background().Error(err, "Embedded storage commit failed", "path", b.path, "writes", len(batch))
	opErr := fmt.Errorf("writing to %s failed (check free disk space and file permissions): %w", b.path, err)
	visible, readErr := b.fileRevision()
	switch {
	case readErr != nil:
		opErr = b.halt(fmt.Errorf("after a failed commit, the revision of %s cannot be read (%v): restart kruntimes-apiserver to read the file again: %w", b.path, readErr, err))
	case visible != base:
		opErr = b.halt(fmt.Errorf("a failed commit reached %s, which holds revision %d while this server published %d: "+
			"restart kruntimes-apiserver to serve the file as it is: %w", b.path, visible, base, err))
	}
	for _, op := range batch {
		op.succeeded, op.current = false, nil
		op.err = opErr
		close(op.done)
	}
}

// fileRevision reads the last committed revision from the data file.
func (b *Backend) fileRevision() (uint64, error) {
	var rev uint64
	err := b.db.View(func(tx *bolt.Tx) error {
		var ok bool
		if rev, ok = decodeUint(tx.Bucket(bucketMeta).Get(metaRev)); !ok {
			return errors.New("its revision is missing or malformed")
		}
		return nil
	})
	return rev, err
}

// halt stops every later write with err and tells Options.OnHalt; it
// returns err.
func (b *Backend) halt(err error) error {
	if b.haltErr.CompareAndSwap(nil, &err) {
		klog.Background().Error(err, "Embedded storage stopped: no write is accepted until the server restarts", "path", b.path)
		commitHalts.Inc()
		b.opts.OnHalt(err)
	}
	return *b.haltErr.Load()
}

// halted returns the error that stopped the backend, or nil.
func (b *Backend) halted() error {
	if p := b.haltErr.Load(); p != nil {
		return *p
	}
	return nil
}
