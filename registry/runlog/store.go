package runlog

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// Resource is the group resource the records are stored as; it is not served.
var Resource = kruntimes.Resource("runlogs")

// UsageResource is the group resource the per-namespace counts of kept-log
// bytes are stored as; it is not served.
var UsageResource = kruntimes.Resource("runlogusages")

// UncachedDecorator is implemented by a RESTOptionsGetter whose store
// without a watch cache is not generic.UndecoratedStorage (the embedded
// backend's).
type UncachedDecorator interface {
	UncachedStorageDecorator() generic.StorageDecorator
}

// Limits bound what a Store keeps; zero is no bound.
type Limits struct {
	// NamespaceBytes bounds the kept-log bytes (as Size counts them) of
	// one namespace.
	NamespaceBytes int64
	// RecordBytes bounds one attempt's record: the largest value the
	// storage backend takes, less room for the record's metadata.
	RecordBytes int64
}

// Store keeps run logs and counts their bytes per namespace.
type Store struct {
	storage storage.Interface
	destroy factory.DestroyFunc
	prefix  string
	// usage holds one RunLogUsage per namespace that keeps logs.
	usage        storage.Interface
	destroyUsage factory.DestroyFunc
	usagePrefix  string
	limits       Limits
}

// NewStore builds the store on the backend optsGetter selects.
func NewStore(optsGetter generic.RESTOptionsGetter, limits Limits) (*Store, error) {
	s := &Store{limits: limits}
	var err error
	if s.storage, s.destroy, s.prefix, err = uncached(optsGetter, Resource, func() runtime.Object { return &kruntimes.RunLog{} }); err != nil {
		return nil, fmt.Errorf("building run log storage: %w", err)
	}
	if s.usage, s.destroyUsage, s.usagePrefix, err = uncached(optsGetter, UsageResource, func() runtime.Object { return &kruntimes.RunLogUsage{} }); err != nil {
		s.destroy()
		return nil, fmt.Errorf("building run log usage storage: %w", err)
	}
	return s, nil
}

// uncached is the backend's store of resource, without a watch cache.
func uncached(optsGetter generic.RESTOptionsGetter, resource schema.GroupResource, newFunc func() runtime.Object) (storage.Interface, factory.DestroyFunc, string, error) {
	opts, err := optsGetter.GetRESTOptions(resource, newFunc())
	if err != nil {
		return nil, nil, "", err
	}
	decorator := generic.UndecoratedStorage
	if u, ok := optsGetter.(UncachedDecorator); ok {
		decorator = u.UncachedStorageDecorator()
	}
	prefix := path.Join("/", opts.ResourcePrefix)
	s, destroy, err := decorator(opts.StorageConfig, prefix, nil, newFunc,
		func() runtime.Object { return &metav1.List{} }, nil, nil, nil)
	return s, destroy, prefix, err
}

// Destroy releases what the store holds.
func (s *Store) Destroy() {
	s.destroy()
	s.destroyUsage()
}

// key is <prefix>/<namespace>/<run>/<attempt>: Run names hold no slash.
func (s *Store) key(namespace, run string, attempt int32) string {
	return s.prefix + "/" + namespace + "/" + run + "/" + strconv.Itoa(int(attempt))
}

// Save keeps log as attempt's log of the Run namespace/run whose uid is
// runUID, replacing an earlier one (a hand-over sent again), and returns
// the record as kept: cut to the record bound, and to what is left of the
// namespace's limit, keeping its first and last bytes with DroppedBy
// saying which limit dropped bytes. A namespace at its limit keeps a log
// as the marker alone; logs already kept are never dropped for a new one.
func (s *Store) Save(ctx context.Context, namespace, run string, runUID types.UID, attempt int32, log *kruntimes.RunLog) (*kruntimes.RunLog, error) {
	record := &kruntimes.RunLog{
		ObjectMeta:   metav1.ObjectMeta{Namespace: namespace, Name: run + "." + strconv.Itoa(int(attempt)), UID: runUID},
		RunUID:       runUID,
		Attempt:      attempt,
		Chunks:       log.Chunks,
		DroppedBytes: log.DroppedBytes,
		DroppedAfter: min(max(log.DroppedAfter, 0), int32(len(log.Chunks))),
	}
	if s.limits.RecordBytes > 0 {
		record = shrink(record, s.limits.RecordBytes, kruntimes.RunLogDroppedByRecordLimit)
	}
	key := s.key(namespace, run, attempt)
	// The record it replaces gives its bytes back.
	replaced := &kruntimes.RunLog{}
	if err := s.storage.Get(ctx, key, storage.GetOptions{IgnoreNotFound: true}, replaced); err != nil {
		return nil, err
	}
	// Counted before it is written: a crash in between counts bytes that
	// are not there (the sweep gives them back), never the other way.
	kept := record
	grown, err := s.count(ctx, namespace, func(used int64) int64 {
		kept = record
		if s.limits.NamespaceBytes > 0 {
			kept = shrink(record, s.limits.NamespaceBytes-used+Size(replaced), kruntimes.RunLogDroppedByNamespaceLimit)
		}
		return Size(kept) - Size(replaced)
	})
	if err != nil {
		return nil, err
	}
	err = s.storage.GuaranteedUpdate(ctx, key, &kruntimes.RunLog{}, true, nil,
		func(runtime.Object, storage.ResponseMeta) (runtime.Object, *uint64, error) { return kept, nil, nil }, nil)
	if err != nil {
		if _, uerr := s.count(ctx, namespace, func(int64) int64 { return -grown }); uerr != nil {
			klog.FromContext(ctx).Error(uerr, "Bytes counted for a log that was not kept stay counted until the next sweep", "namespace", namespace)
		}
		return nil, err
	}
	return kept, nil
}

// count adds what delta answers for the namespace's count of bytes to it,
// and returns what it added.
func (s *Store) count(ctx context.Context, namespace string, delta func(used int64) int64) (int64, error) {
	var added int64
	err := s.usage.GuaranteedUpdate(ctx, s.usageKey(namespace), &kruntimes.RunLogUsage{}, true, nil,
		func(obj runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			usage := obj.(*kruntimes.RunLogUsage).DeepCopy()
			added = delta(usage.Bytes)
			usage.Name, usage.Namespace = namespace, namespace
			usage.Bytes = max(usage.Bytes+added, 0)
			return usage, nil, nil
		}, nil)
	if err != nil {
		return 0, fmt.Errorf("count the kept-log bytes of namespace %s: %w", namespace, err)
	}
	return added, nil
}

// Usage is the namespace's count of kept-log bytes.
func (s *Store) Usage(ctx context.Context, namespace string) (int64, error) {
	usage := &kruntimes.RunLogUsage{}
	if err := s.usage.Get(ctx, s.usageKey(namespace), storage.GetOptions{IgnoreNotFound: true}, usage); err != nil {
		return 0, err
	}
	return usage.Bytes, nil
}

func (s *Store) usageKey(namespace string) string { return s.usagePrefix + "/" + namespace }

// Get returns attempt's log of the Run namespace/run whose uid is runUID;
// nil when none is kept (a record of an earlier Run of the name is none).
func (s *Store) Get(ctx context.Context, namespace, run string, runUID types.UID, attempt int32) (*kruntimes.RunLog, error) {
	out := &kruntimes.RunLog{}
	err := s.storage.Get(ctx, s.key(namespace, run, attempt), storage.GetOptions{}, out)
	if storage.IsNotFound(err) || (err == nil && out.RunUID != runUID) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete removes the logs of attempts 1..attempts of the Run namespace/run
// whose uid is runUID, leaving those of a later Run of the name alone.
func (s *Store) Delete(ctx context.Context, namespace, run string, runUID types.UID, attempts int32) error {
	return s.deleteAttempts(ctx, namespace, run, runUID, 1, attempts)
}

// deleteAttempts removes the logs of attempts first..last and gives their
// bytes back to the namespace's count.
func (s *Store) deleteAttempts(ctx context.Context, namespace, run string, runUID types.UID, first, last int32) error {
	var freed int64
	var errs []error
	for a := first; a <= last; a++ {
		n, err := s.remove(ctx, namespace, run, runUID, a)
		freed += n
		if err != nil {
			errs = append(errs, err)
			break
		}
	}
	if freed > 0 {
		if _, err := s.count(ctx, namespace, func(int64) int64 { return -freed }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DeleteAttempt removes attempt's log of the Run namespace/run whose uid
// is runUID, if it has one.
func (s *Store) DeleteAttempt(ctx context.Context, namespace, run string, runUID types.UID, attempt int32) error {
	return s.deleteAttempts(ctx, namespace, run, runUID, attempt, attempt)
}

// remove deletes one record and returns its size.
func (s *Store) remove(ctx context.Context, namespace, run string, runUID types.UID, attempt int32) (int64, error) {
	deleted := &kruntimes.RunLog{}
	err := s.storage.Delete(ctx, s.key(namespace, run, attempt), deleted, &storage.Preconditions{UID: &runUID}, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
	if storage.IsNotFound(err) || storage.IsInvalidObj(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("delete the log of attempt %d of Run %s/%s: %w", attempt, namespace, run, err)
	}
	return Size(deleted), nil
}
