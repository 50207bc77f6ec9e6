package embedded

import (
	"bytes"
	"context"
	"fmt"
	"reflect"

	bolt "go.etcd.io/bbolt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
)

// Messages copied from etcd3/errors.go: clients and the conformance suite
// match them.
const (
	expiredList  = "The resourceVersion for the provided list is too old."
	expiredWatch = "The resourceVersion for the provided watch is too old."
	// continueExpired is used when a fresh continue token cannot be built.
	continueExpired = "The provided continue parameter is too old " +
		"to display a consistent list result. You can start a new list without " +
		"the continue parameter."
	inconsistentContinue = "The provided continue parameter is too old " +
		"to display a consistent list result. You can start a new list without " +
		"the continue parameter, or use the continue token in this response to " +
		"retrieve the remainder of the results. Continuing with the provided " +
		"token results in an inconsistent list - objects that were created, " +
		"modified, or deleted between the time the first chunk was returned " +
		"and now may show up in the list."
)

// compactedListError mirrors etcd3's interpretListError for ErrCompacted.
func compactedListError(paging bool, continueKey, keyPrefix string) error {
	if !paging {
		return apierrors.NewResourceExpired(expiredList)
	}
	// RV -1 asks the next page to continue at the latest revision.
	newToken, err := storage.EncodeContinue(continueKey, keyPrefix, -1)
	if err != nil {
		utilruntime.HandleError(err)
		return apierrors.NewResourceExpired(continueExpired)
	}
	statusError := apierrors.NewResourceExpired(inconsistentContinue)
	statusError.ErrStatus.ListMeta.Continue = newToken
	return statusError
}

// kvVisitor receives a key's value at the read revision; value is only valid
// during the call. Returning false stops the range.
type kvVisitor func(key, value []byte, modRev uint64) bool

// rangeAt visits the keys in [start, end of prefix) as of readRev, in key
// order. When readRev is the committed revision it reads the kv bucket,
// otherwise it resolves every key's latest revision <= readRev from history.
func rangeAt(tx *bolt.Tx, prefix, start []byte, recursive bool, readRev, currentRev uint64, visit kvVisitor) error {
	if !recursive {
		rec, ok, err := getAt(tx, prefix, readRev, currentRev)
		if err != nil || !ok {
			return err
		}
		visit(prefix, rec.value, rec.modRev)
		return nil
	}
	if readRev == currentRev {
		c := tx.Bucket(bucketKV).Cursor()
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			rec, err := decodeKV(v)
			if err != nil {
				return fmt.Errorf("key %q: %w", k, err)
			}
			if !visit(k, rec.value, rec.modRev) {
				return nil
			}
		}
		return nil
	}
	logb := tx.Bucket(bucketLog)
	c := tx.Bucket(bucketKeyRev).Cursor()
	var curKey []byte
	var best uint64
	emit := func() (bool, error) {
		if curKey == nil || best == 0 {
			return true, nil
		}
		e, err := decodeLogEntry(logb.Get(encodeUint(best)))
		if err != nil {
			return false, fmt.Errorf("history of key %q at revision %d: %w", curKey, best, err)
		}
		if e.typ != entryPut {
			return true, nil
		}
		return visit(curKey, e.value, best), nil
	}
	for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		key, rev, ok := splitKeyRev(k)
		if !ok {
			return fmt.Errorf("malformed history index entry %q", k)
		}
		if bytes.Compare(key, start) < 0 {
			continue
		}
		if !bytes.Equal(key, curKey) {
			if more, err := emit(); err != nil || !more {
				return err
			}
			curKey, best = append(curKey[:0:0], key...), 0
		}
		if rev <= readRev {
			best = rev
		}
	}
	_, err := emit()
	return err
}

// getAt returns key's record as of readRev.
func getAt(tx *bolt.Tx, key []byte, readRev, currentRev uint64) (kvRecord, bool, error) {
	if readRev == currentRev {
		raw := tx.Bucket(bucketKV).Get(key)
		if raw == nil {
			return kvRecord{}, false, nil
		}
		rec, err := decodeKV(raw)
		return rec, err == nil, err
	}
	c := tx.Bucket(bucketKeyRev).Cursor()
	k, _ := c.Seek(keyRevKey(key, readRev+1))
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	if k == nil {
		return kvRecord{}, false, nil
	}
	found, rev, ok := splitKeyRev(k)
	if !ok || !bytes.Equal(found, key) || rev > readRev {
		return kvRecord{}, false, nil
	}
	e, err := decodeLogEntry(tx.Bucket(bucketLog).Get(encodeUint(rev)))
	if err != nil {
		return kvRecord{}, false, fmt.Errorf("history of key %q at revision %d: %w", key, rev, err)
	}
	if e.typ != entryPut {
		return kvRecord{}, false, nil
	}
	return kvRecord{modRev: rev, value: e.value}, true, nil
}

// maxChunk caps how many values one read transaction copies out for a
// paginated list; like etcd3's page growth it doubles from the limit.
const maxChunk = 10000

// rawKV is a value copied out of a read transaction. Transformers and
// decoders never run inside one: a long read transaction blocks bbolt from
// growing the file, and a transformer may itself write.
type rawKV struct {
	key    string
	value  []byte
	modRev uint64
}

// readChunk copies up to limit (0: all) values from start at readRev, and
// counts the keys from start to the end of the range. readRev 0 reads at the
// committed revision, which it returns.
func (s *store) readChunk(keyPrefix, start string, recursive bool, readRev uint64, limit int64, minRV string, paging bool, continueKey string) (items []rawKV, count int64, rev uint64, err error) {
	err = s.backend.view(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		currentRev, _ := decodeUint(meta.Get(metaRev))
		compactRev, _ := decodeUint(meta.Get(metaCompact))
		switch {
		case readRev == 0:
			if err := s.validateMinimumResourceVersion(minRV, currentRev); err != nil {
				return err
			}
			readRev = currentRev
		case readRev > currentRev:
			return storage.NewTooLargeResourceVersionError(readRev, currentRev, 0)
		case readRev < compactRev:
			return compactedListError(paging, continueKey, keyPrefix)
		}
		return rangeAt(tx, []byte(keyPrefix), []byte(start), recursive, readRev, currentRev, func(k, val []byte, modRev uint64) bool {
			count++
			if limit <= 0 || int64(len(items)) < limit {
				items = append(items, rawKV{key: string(k), value: bytes.Clone(val), modRev: modRev})
			}
			return true
		})
	})
	return items, count, readRev, err
}

// GetList implements storage.Interface.
func (s *store) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	keyPrefix, err := s.prepareKey(key, opts.Recursive)
	if err != nil {
		return err
	}
	v, err := listItems(listObj)
	if err != nil {
		return err
	}
	withRev, continueKey, err := storage.ValidateListOptions(keyPrefix, s.versioner, opts)
	if err != nil {
		return err
	}
	pred := opts.Predicate
	paging := pred.Limit > 0
	newItemFunc := getNewItemFunc(listObj, v)
	transformer := s.getTransformer()

	start := keyPrefix
	if continueKey != "" {
		start = continueKey
	}
	readRev := uint64(withRev)
	chunkLimit := int64(0)
	if paging {
		chunkLimit = pred.Limit
	}
	var lastKey string
	var hasMore bool
	var firstCount int64
	var aggregator listItemErrors = &abortOnFirstError{}
	if s.aggregateCorrupt {
		aggregator = &corruptObjErrAggregator{maxCount: maxCorruptObjErrsToAggregate}
	}
	for first := true; ; first = false {
		items, count, rev, err := s.readChunk(keyPrefix, start, opts.Recursive, readRev, chunkLimit, opts.ResourceVersion, len(pred.Continue) > 0, continueKey)
		if err != nil {
			return err
		}
		readRev = rev
		if first {
			// PrepareContinueToken derives remainingItemCount as count -
			// limit: count covers the keys from the start of this page.
			firstCount = count
		}
		chunkHasMore := count > int64(len(items))
		filled := false
		for i := range items {
			if paging && int64(v.Len()) >= pred.Limit {
				filled = true
				break
			}
			it := &items[i]
			lastKey = it.key
			data, _, err := transformer.TransformFromStorage(ctx, it.value, authenticatedData(it.key))
			if err != nil {
				if aggregator.Append(it.key, storage.NewInternalError(fmt.Errorf("unable to transform key %q: %w", it.key, err))) {
					return aggregator.Aggregate()
				}
				continue
			}
			if ctx.Err() != nil {
				return storage.NewTimeoutError(it.key, "request did not complete within requested timeout")
			}
			obj, _, err := s.codec.Decode(data, nil, newItemFunc())
			if err != nil {
				if s.interpretCorrupt {
					err = &corruptObjectError{err: err, errType: undecodable, revision: it.modRev}
				}
				if aggregator.Append(it.key, err) {
					return aggregator.Aggregate()
				}
				continue
			}
			if err := s.versioner.UpdateObject(obj, it.modRev); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to set resourceVersion on listed object")
			}
			if matched, err := pred.Matches(obj); err == nil && matched {
				v.Set(reflect.Append(v, reflect.ValueOf(obj).Elem()))
			}
			*it = rawKV{}
		}
		if filled {
			hasMore = true
			break
		}
		if !chunkHasMore {
			hasMore = false
			break
		}
		if paging && int64(v.Len()) >= pred.Limit {
			hasMore = true
			break
		}
		start = lastKey + "\x00"
		if chunkLimit < maxChunk {
			chunkLimit = min(chunkLimit*2, maxChunk)
		}
	}
	if err := aggregator.Aggregate(); err != nil {
		return err
	}
	continueValue, remainingItemCount, err := storage.PrepareContinueToken(lastKey, keyPrefix, int64(readRev), firstCount, hasMore, opts)
	if err != nil {
		return err
	}
	if v.IsNil() {
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
	}
	if err := s.versioner.UpdateList(listObj, readRev, continueValue, remainingItemCount); err != nil {
		return err
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.ShardedListAndWatch) {
		pred.SetShardInfoOnList(listObj)
	}
	return nil
}
