package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
)

// authenticatedData binds a stored value to its key for value.Transformer
// (encryption at rest), as etcd3 does.
type authenticatedData string

func (d authenticatedData) AuthenticatedData() []byte { return []byte(d) }

// transformerBox lets tests swap the transformer while watchers read it.
// raw is the configured transformer, effective what reads and writes use.
type transformerBox struct{ raw, effective value.Transformer }

// store is the storage.Interface of one resource over a shared Backend.
type store struct {
	backend        *Backend
	codec          runtime.Codec
	versioner      storage.Versioner
	transformer    atomic.Pointer[transformerBox]
	pathPrefix     string
	resourcePrefix string
	groupResource  schema.GroupResource
	newFunc        func() runtime.Object
	newListFunc    func() runtime.Object
	// aggregateCorrupt makes lists collect corrupt objects instead of
	// failing on the first (AllowUnsafeMalformedObjectDeletion), as etcd3.New.
	aggregateCorrupt bool
	// interpretCorrupt reports every unreadable value as a corrupt object;
	// StorageDecorator sets it with the feature, as etcd3's factory does.
	interpretCorrupt bool

	sizeMu        sync.Mutex
	sizeEstimates bool

	watchersWG sync.WaitGroup
}

var _ storage.Interface = (*store)(nil)

// StoreConfig describes one resource's store.
type StoreConfig struct {
	// Codec encodes objects for storage (storagebackend.Config.Codec).
	Codec runtime.Codec
	// Transformer transforms values at rest (encryption); nil means identity.
	Transformer value.Transformer
	// Prefix is prepended to every key, like storagebackend.Config.Prefix
	// ("/registry" by default in Kubernetes).
	Prefix string
	// ResourcePrefix is the key prefix of the resource, e.g. "/kruntimes.io/runs".
	ResourcePrefix string
	GroupResource  schema.GroupResource
	NewFunc        func() runtime.Object
	NewListFunc    func() runtime.Object
}

// NewStore returns the storage.Interface for one resource. Any number of
// stores share the backend's file and revision.
func (b *Backend) NewStore(cfg StoreConfig) (storage.Interface, error) {
	return b.newStore(cfg)
}

func (b *Backend) newStore(cfg StoreConfig) (*store, error) {
	if cfg.Codec == nil {
		return nil, errors.New("embedded storage needs a codec")
	}
	if cfg.ResourcePrefix == "" || cfg.ResourcePrefix == "/" || !strings.HasPrefix(cfg.ResourcePrefix, "/") {
		return nil, fmt.Errorf("resourcePrefix %q must start with / and name a resource", cfg.ResourcePrefix)
	}
	pathPrefix := path.Join("/", cfg.Prefix)
	if !strings.HasSuffix(pathPrefix, "/") {
		pathPrefix += "/"
	}
	transformer := cfg.Transformer
	if transformer == nil {
		transformer = identityTransformer{}
	}
	s := &store{
		backend:          b,
		codec:            cfg.Codec,
		versioner:        storage.APIObjectVersioner{},
		pathPrefix:       pathPrefix,
		resourcePrefix:   cfg.ResourcePrefix,
		groupResource:    cfg.GroupResource,
		newFunc:          cfg.NewFunc,
		newListFunc:      cfg.NewListFunc,
		aggregateCorrupt: utilfeature.DefaultFeatureGate.Enabled(features.AllowUnsafeMalformedObjectDeletion),
	}
	s.setTransformer(transformer)
	return s, nil
}

type identityTransformer struct{}

func (identityTransformer) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	return data, false, nil
}
func (identityTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}

func (s *store) getTransformer() value.Transformer { return s.transformer.Load().effective }

// setTransformer installs transformer; with corrupt-object support, read
// failures are reported as corrupt objects, as etcd3's factory arranges.
func (s *store) setTransformer(transformer value.Transformer) {
	box := &transformerBox{raw: transformer, effective: transformer}
	if s.interpretCorrupt {
		box.effective = &corruptInterpretingTransformer{transformer}
	}
	s.transformer.Store(box)
}

// Versioner implements storage.Interface.
func (s *store) Versioner() storage.Versioner { return s.versioner }

// ReadinessCheck implements storage.Interface.
func (s *store) ReadinessCheck() error {
	s.backend.closeMu.RLock()
	defer s.backend.closeMu.RUnlock()
	if s.backend.closed {
		return storage.ErrStorageNotReady
	}
	return nil
}

// RequestWatchProgress implements storage.Interface: every watch opened with
// ProgressNotify gets a bookmark at the current revision once it has caught up.
func (s *store) RequestWatchProgress(context.Context) error {
	s.backend.notify.requestProgress()
	return nil
}

// GetCurrentResourceVersion implements storage.Interface.
func (s *store) GetCurrentResourceVersion(context.Context) (uint64, error) {
	return s.backend.rev.Load(), nil
}

// CompactRevision implements storage.Interface.
func (s *store) CompactRevision() int64 { return int64(s.backend.compactRev.Load()) }

// EnableResourceSizeEstimation implements storage.Interface. Sizes are read
// from the file directly, so the keys function is not needed.
func (s *store) EnableResourceSizeEstimation(getKeys storage.KeysFunc) error {
	if getKeys == nil {
		return errors.New("KeysFunc cannot be nil")
	}
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	s.sizeEstimates = true
	return nil
}

// Stats implements storage.Interface.
func (s *store) Stats(ctx context.Context) (storage.Stats, error) {
	prefix, err := s.prepareKey(s.resourcePrefix, true)
	if err != nil {
		return storage.Stats{}, err
	}
	s.sizeMu.Lock()
	withSize := s.sizeEstimates
	s.sizeMu.Unlock()
	var count, size int64
	err = s.backend.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketKV).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			count++
			size += int64(len(v) - 16)
		}
		return nil
	})
	if err != nil {
		return storage.Stats{}, err
	}
	stats := storage.Stats{ObjectCount: count}
	if withSize && count > 0 {
		stats.EstimatedAverageObjectSizeBytes = size / count
	}
	return stats, nil
}

// Get implements storage.Interface.
func (s *store) Get(ctx context.Context, key string, opts storage.GetOptions, out runtime.Object) error {
	preparedKey, err := s.prepareKey(key, false)
	if err != nil {
		return err
	}
	rec, rev, err := s.backend.current(preparedKey)
	if err != nil {
		return err
	}
	if err := s.validateMinimumResourceVersion(opts.ResourceVersion, rev); err != nil {
		return err
	}
	if rec == nil {
		if opts.IgnoreNotFound {
			return runtime.SetZeroValue(out)
		}
		return storage.NewKeyNotFoundError(preparedKey, 0)
	}
	data, _, err := s.getTransformer().TransformFromStorage(ctx, rec.value, authenticatedData(preparedKey))
	if err != nil {
		return storage.NewInternalError(err)
	}
	return s.decode(data, out, rec.modRev)
}

// current reads a key's record (nil if absent) and the committed revision
// in one snapshot.
func (b *Backend) current(key string) (*kvRecord, uint64, error) {
	var rec *kvRecord
	var rev uint64
	err := b.view(func(tx *bolt.Tx) error {
		rev, _ = decodeUint(tx.Bucket(bucketMeta).Get(metaRev))
		raw := tx.Bucket(bucketKV).Get([]byte(key))
		if raw == nil {
			return nil
		}
		r, err := decodeKV(raw)
		if err != nil {
			return fmt.Errorf("key %q in %s: %w", key, b.path, err)
		}
		r.value = append([]byte(nil), r.value...)
		rec = &r
		return nil
	})
	return rec, rev, err
}

func (s *store) decode(data []byte, out runtime.Object, rev uint64) error {
	if _, err := conversion.EnforcePtr(out); err != nil {
		return fmt.Errorf("unable to convert output object to pointer: %w", err)
	}
	if _, _, err := s.codec.Decode(data, nil, out); err != nil {
		if s.interpretCorrupt {
			return &corruptObjectError{err: err, errType: undecodable, revision: rev}
		}
		return err
	}
	if err := s.versioner.UpdateObject(out, rev); err != nil {
		klog.Background().Error(err, "Failed to set resourceVersion on decoded object")
	}
	return nil
}

func expiryFor(ttl uint64) int64 {
	if ttl == 0 {
		return 0
	}
	return time.Now().Add(time.Duration(ttl) * time.Second).UnixNano()
}

// Create implements storage.Interface.
func (s *store) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	preparedKey, err := s.prepareKey(key, false)
	if err != nil {
		return err
	}
	if version, err := s.versioner.ObjectResourceVersion(obj); err == nil && version != 0 {
		return storage.ErrResourceVersionSetOnCreate
	}
	if err := s.versioner.PrepareObjectForStorage(obj); err != nil {
		return fmt.Errorf("PrepareObjectForStorage failed: %w", err)
	}
	data, err := runtime.Encode(s.codec, obj)
	if err != nil {
		return err
	}
	newData, err := s.getTransformer().TransformToStorage(ctx, data, authenticatedData(preparedKey))
	if err != nil {
		return storage.NewInternalError(err)
	}
	op := &writeOp{key: []byte(preparedKey), value: newData, expiry: expiryFor(ttl)}
	if err := s.backend.submit(ctx, op); err != nil {
		return storage.NewInternalError(err)
	}
	if !op.succeeded {
		return storage.NewKeyExistsError(preparedKey, 0)
	}
	if out != nil {
		return s.decode(data, out, op.rev)
	}
	return nil
}

// objState is the decoded current state of a key, as in etcd3.
type objState struct {
	obj   runtime.Object
	meta  *storage.ResponseMeta
	rev   uint64
	data  []byte
	stale bool
}

// Delete implements storage.Interface.
func (s *store) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	preparedKey, err := s.prepareKey(key, false)
	if err != nil {
		return err
	}
	v, err := conversion.EnforcePtr(out)
	if err != nil {
		return fmt.Errorf("unable to convert output object to pointer: %w", err)
	}
	expectBroken := false
	if utilfeature.DefaultFeatureGate.Enabled(features.AllowUnsafeMalformedObjectDeletion) {
		expectBroken = opts.ExpectTransformOrDecodeError
	}
	getCurrentState := s.getCurrentState(ctx, preparedKey, v, false, expectBroken)

	var origState *objState
	var origStateIsCurrent bool
	if cachedExistingObject != nil && !expectBroken {
		origState, err = s.getStateFromObject(cachedExistingObject)
	} else {
		origState, err = getCurrentState()
		origStateIsCurrent = true
	}
	if err != nil {
		return err
	}

	for {
		if preconditions != nil {
			if err := preconditions.Check(preparedKey, origState.obj); err != nil {
				if origStateIsCurrent {
					return err
				}
				// The cached object may be stale: check against storage.
				cachedRev, cachedErr := origState.rev, err
				if origState, err = getCurrentState(); err != nil {
					return err
				}
				origStateIsCurrent = true
				if cachedRev == origState.rev {
					return cachedErr
				}
				continue
			}
		}
		if err := validateDeletion(ctx, origState.obj); err != nil {
			if origStateIsCurrent {
				return err
			}
			cachedRev, cachedErr := origState.rev, err
			if origState, err = getCurrentState(); err != nil {
				return err
			}
			origStateIsCurrent = true
			if cachedRev == origState.rev {
				return cachedErr
			}
			continue
		}

		op := &writeOp{key: []byte(preparedKey), delete: true, expectedRev: origState.rev}
		if err := s.backend.submit(ctx, op); err != nil {
			return storage.NewInternalError(err)
		}
		if !op.succeeded {
			klog.FromContext(ctx).V(4).Info("Deletion conflicted, retrying", "key", preparedKey)
			if origState, err = s.getState(ctx, op.current, preparedKey, v, false, expectBroken); err != nil {
				return err
			}
			origStateIsCurrent = true
			continue
		}
		if !expectBroken {
			return s.decode(origState.data, out, op.rev)
		}
		return nil
	}
}

// GuaranteedUpdate implements storage.Interface.
func (s *store) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	preparedKey, err := s.prepareKey(key, false)
	if err != nil {
		return err
	}
	v, err := conversion.EnforcePtr(destination)
	if err != nil {
		return fmt.Errorf("unable to convert output object to pointer: %w", err)
	}
	getCurrentState := s.getCurrentState(ctx, preparedKey, v, ignoreNotFound, false)

	var origState *objState
	var origStateIsCurrent bool
	if cachedExistingObject != nil {
		origState, err = s.getStateFromObject(cachedExistingObject)
	} else {
		origState, err = getCurrentState()
		origStateIsCurrent = true
	}
	if err != nil {
		return err
	}

	for {
		if err := preconditions.Check(preparedKey, origState.obj); err != nil {
			if origStateIsCurrent {
				return err
			}
			if origState, err = getCurrentState(); err != nil {
				return err
			}
			origStateIsCurrent = true
			continue
		}

		ret, ttl, err := s.updateState(origState, tryUpdate)
		if err != nil {
			if origStateIsCurrent {
				return err
			}
			cachedRev, cachedErr := origState.rev, err
			if origState, err = getCurrentState(); err != nil {
				return err
			}
			origStateIsCurrent = true
			if cachedRev == origState.rev {
				return cachedErr
			}
			continue
		}

		data, err := runtime.Encode(s.codec, ret)
		if err != nil {
			return err
		}
		if !origState.stale && bytes.Equal(data, origState.data) {
			// No change: skip the write, but only after confirming the
			// (possibly cached) original is what storage holds.
			if !origStateIsCurrent {
				if origState, err = getCurrentState(); err != nil {
					return err
				}
				origStateIsCurrent = true
				if !bytes.Equal(data, origState.data) {
					continue
				}
			}
			if !origState.stale {
				return s.decode(origState.data, destination, origState.rev)
			}
		}

		newData, err := s.getTransformer().TransformToStorage(ctx, data, authenticatedData(preparedKey))
		if err != nil {
			return storage.NewInternalError(err)
		}
		op := &writeOp{key: []byte(preparedKey), value: newData, expectedRev: origState.rev, expiry: expiryFor(ttl)}
		if err := s.backend.submit(ctx, op); err != nil {
			return storage.NewInternalError(err)
		}
		if !op.succeeded {
			klog.FromContext(ctx).V(4).Info("GuaranteedUpdate conflicted, retrying", "key", preparedKey)
			if origState, err = s.getState(ctx, op.current, preparedKey, v, ignoreNotFound, false); err != nil {
				return err
			}
			origStateIsCurrent = true
			continue
		}
		return s.decode(data, destination, op.rev)
	}
}

func (s *store) getCurrentState(ctx context.Context, key string, v reflect.Value, ignoreNotFound, expectBroken bool) func() (*objState, error) {
	return func() (*objState, error) {
		rec, _, err := s.backend.current(key)
		if err != nil {
			return nil, err
		}
		return s.getState(ctx, rec, key, v, ignoreNotFound, expectBroken)
	}
}

// getState decodes rec (nil: absent). With expectBroken (unsafe deletion of a
// malformed object) it succeeds only when the value cannot be read, as etcd3.
func (s *store) getState(ctx context.Context, rec *kvRecord, key string, v reflect.Value, ignoreNotFound, expectBroken bool) (*objState, error) {
	state := &objState{meta: &storage.ResponseMeta{}}
	if u, ok := v.Addr().Interface().(runtime.Unstructured); ok {
		state.obj = u.NewEmptyInstance()
	} else {
		state.obj = reflect.New(v.Type()).Interface().(runtime.Object)
	}
	if rec == nil {
		if !ignoreNotFound {
			return nil, storage.NewKeyNotFoundError(key, 0)
		}
		if err := runtime.SetZeroValue(state.obj); err != nil {
			return nil, err
		}
		return state, nil
	}
	state.rev = rec.modRev
	state.meta.ResourceVersion = rec.modRev
	data, stale, err := s.getTransformer().TransformFromStorage(ctx, rec.value, authenticatedData(key))
	if err != nil {
		if !expectBroken {
			return nil, storage.NewInternalError(err)
		}
		state.obj, state.stale = nil, true
		return state, nil
	}
	state.data, state.stale = data, stale
	if err := s.decode(state.data, state.obj, state.rev); err != nil {
		if !expectBroken {
			return nil, err
		}
		state.obj = nil
		return state, nil
	}
	if expectBroken {
		return nil, storage.NewInvalidObjError(key, "unsafe deletion is not allowed because the object is decodable from storage")
	}
	return state, nil
}

func (s *store) getStateFromObject(obj runtime.Object) (*objState, error) {
	state := &objState{obj: obj, meta: &storage.ResponseMeta{}}
	rv, err := s.versioner.ObjectResourceVersion(obj)
	if err != nil {
		return nil, fmt.Errorf("couldn't get resource version: %w", err)
	}
	state.rev = rv
	state.meta.ResourceVersion = rv
	// The stored form has no resourceVersion: clear it to compare bytes.
	if err := s.versioner.PrepareObjectForStorage(obj); err != nil {
		return nil, fmt.Errorf("PrepareObjectForStorage failed: %w", err)
	}
	if state.data, err = runtime.Encode(s.codec, obj); err != nil {
		return nil, err
	}
	if err := s.versioner.UpdateObject(state.obj, rv); err != nil {
		klog.Background().Error(err, "Failed to restore resourceVersion on cached object")
	}
	return state, nil
}

func (s *store) updateState(st *objState, userUpdate storage.UpdateFunc) (runtime.Object, uint64, error) {
	ret, ttlPtr, err := userUpdate(st.obj, *st.meta)
	if err != nil {
		return nil, 0, err
	}
	if err := s.versioner.PrepareObjectForStorage(ret); err != nil {
		return nil, 0, fmt.Errorf("PrepareObjectForStorage failed: %w", err)
	}
	var ttl uint64
	if ttlPtr != nil {
		ttl = *ttlPtr
	}
	return ret, ttl, nil
}

// validateMinimumResourceVersion enforces "at least resourceVersion" reads.
func (s *store) validateMinimumResourceVersion(minimumResourceVersion string, actualRevision uint64) error {
	if minimumResourceVersion == "" {
		return nil
	}
	minimumRV, err := s.versioner.ParseResourceVersion(minimumResourceVersion)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("invalid resource version: %v", err))
	}
	if minimumRV > actualRevision {
		return storage.NewTooLargeResourceVersionError(minimumRV, actualRevision, 0)
	}
	return nil
}

func (s *store) prepareKey(key string, recursive bool) (string, error) {
	key, err := storage.PrepareKey(s.resourcePrefix, key, recursive)
	if err != nil {
		return "", err
	}
	return s.pathPrefix + strings.TrimPrefix(key, "/"), nil
}

// Watch implements storage.Interface.
func (s *store) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	preparedKey, err := s.prepareKey(key, opts.Recursive)
	if err != nil {
		return nil, err
	}
	rev, err := s.versioner.ParseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	return s.watch(ctx, preparedKey, rev, opts)
}

func getNewItemFunc(listObj runtime.Object, v reflect.Value) func() runtime.Object {
	// Unstructured lists keep their group/version on the items.
	if ul, ok := listObj.(*unstructured.UnstructuredList); ok {
		if apiVersion := ul.GetAPIVersion(); len(apiVersion) > 0 {
			return func() runtime.Object {
				return &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": apiVersion}}
			}
		}
	}
	elem := v.Type().Elem()
	return func() runtime.Object {
		return reflect.New(elem).Interface().(runtime.Object)
	}
}

func listItems(listObj runtime.Object) (reflect.Value, error) {
	listPtr, err := meta.GetItemsPtr(listObj)
	if err != nil {
		return reflect.Value{}, err
	}
	v, err := conversion.EnforcePtr(listPtr)
	if err != nil || v.Kind() != reflect.Slice {
		return reflect.Value{}, fmt.Errorf("need ptr to slice: %v", err)
	}
	return v, nil
}
