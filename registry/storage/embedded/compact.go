package embedded

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/klog/v2"
)

// compactChunk bounds the history entries examined per write transaction,
// so compaction never stalls the commit loop for long.
const compactChunk = 4096

// Compact discards the history up to and including rev, like etcd's
// compaction: reads and watches from an older revision then fail with
// 410 Gone, while the state as of rev stays readable. It is safe to call
// concurrently with reads, writes and watches.
func (b *Backend) Compact(ctx context.Context, rev uint64) error {
	b.compactMu.Lock()
	defer b.compactMu.Unlock()
	if cur := b.rev.Load(); rev > cur {
		return fmt.Errorf("cannot compact %s to revision %d: the current revision is %d", b.path, rev, cur)
	}
	if rev <= b.compactRev.Load() {
		return nil
	}
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	if b.closed {
		return errBackendClosed(b.path)
	}
	// Move the boundary first: from here on nobody starts reading below it,
	// so the history below can be removed in several transactions.
	if err := b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaCompact, encodeUint(rev))
	}); err != nil {
		return fmt.Errorf("recording compaction of %s to revision %d: %w", b.path, rev, err)
	}
	b.compactRev.Store(rev)
	b.recordHistory()

	removed := 0
	for from := uint64(0); from <= rev; {
		if err := ctx.Err(); err != nil {
			return err
		}
		var n int
		var err error
		from, n, err = b.compactChunk(from, rev)
		if err != nil {
			return fmt.Errorf("compacting %s to revision %d: %w", b.path, rev, err)
		}
		removed += n
	}
	klog.FromContext(ctx).V(2).Info("Compacted embedded storage", "path", b.path, "revision", rev, "removedRevisions", removed)
	return nil
}

// compactChunk removes, among the history entries in [from, rev], those no
// read at a revision >= rev can need: entries superseded by a later write at
// or below rev, deletions, and markers. It returns where to continue.
func (b *Backend) compactChunk(from, rev uint64) (uint64, int, error) {
	next := rev + 1
	removed := 0
	err := b.db.Update(func(tx *bolt.Tx) error {
		logb, idx := tx.Bucket(bucketLog), tx.Bucket(bucketKeyRev)
		type victim struct {
			rev uint64
			key []byte
		}
		var victims []victim
		c := logb.Cursor()
		ic := idx.Cursor()
		scanned := 0
		for k, v := c.Seek(encodeUint(from)); k != nil; k, v = c.Next() {
			r, _ := decodeUint(k)
			if r > rev {
				next = rev + 1
				break
			}
			if scanned == compactChunk {
				next = r
				break
			}
			scanned++
			next = r + 1
			e, err := decodeLogEntry(v)
			if err != nil {
				return fmt.Errorf("history at revision %d: %w", r, err)
			}
			if e.typ == entryMarker {
				victims = append(victims, victim{rev: r})
				continue
			}
			superseded := false
			if nk, _ := ic.Seek(keyRevKey(e.key, r+1)); nk != nil {
				if key, nr, ok := splitKeyRev(nk); ok && bytes.Equal(key, e.key) && nr <= rev {
					superseded = true
				}
			}
			if superseded || e.typ == entryDelete {
				victims = append(victims, victim{rev: r, key: bytes.Clone(e.key)})
			}
		}
		for _, vic := range victims {
			if err := logb.Delete(encodeUint(vic.rev)); err != nil {
				return err
			}
			if vic.key != nil {
				if err := idx.Delete(keyRevKey(vic.key, vic.rev)); err != nil {
					return err
				}
			}
		}
		removed = len(victims)
		return nil
	})
	return next, removed, err
}

// revisionSample records the revision current at a point in time.
type revisionSample struct {
	at  time.Time
	rev uint64
}

// compactionTarget picks the revision to compact to at now: the newest
// revision sampled at least interval ago (the retention window), raised so
// that at most maxHistory revisions stay behind cur. It returns the samples
// still needed later.
func compactionTarget(samples []revisionSample, now time.Time, cur uint64, interval time.Duration, maxHistory int64) (uint64, []revisionSample) {
	var target uint64
	keep := samples[:0]
	for _, s := range samples {
		if now.Sub(s.at) >= interval {
			target = max(target, s.rev)
			continue
		}
		keep = append(keep, s)
	}
	if maxHistory > 0 && cur > uint64(maxHistory) {
		target = max(target, cur-uint64(maxHistory))
	}
	return target, append(keep, revisionSample{at: now, rev: cur})
}

// compactionLoop runs compactionTarget every minute (or every
// CompactionInterval when shorter).
func (b *Backend) compactionLoop() {
	defer b.loops.Done()
	if b.opts.CompactionInterval < 0 {
		return
	}
	logger := klog.Background().WithName("embedded-storage-compactor")
	period := min(b.opts.CompactionInterval, time.Minute)
	samples := []revisionSample{{at: time.Now(), rev: b.rev.Load()}}
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-b.stopCh:
			return
		case now := <-ticker.C:
			var target uint64
			target, samples = compactionTarget(samples, now, b.rev.Load(), b.opts.CompactionInterval, b.opts.MaxHistoryRevisions)
			if target <= b.compactRev.Load() {
				continue
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-b.stopCh:
					cancel()
				case <-ctx.Done():
				}
			}()
			if err := b.Compact(klog.NewContext(ctx, logger), target); err != nil {
				logger.Error(err, "Compaction failed; will retry at the next interval", "revision", target)
			}
			cancel()
		}
	}
}
