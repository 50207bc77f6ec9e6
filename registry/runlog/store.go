package runlog

import (
	"context"
	"fmt"
	"path"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// Resource is the group resource the records are stored as; it is not served.
var Resource = kruntimes.Resource("runlogs")

// UncachedDecorator is implemented by a RESTOptionsGetter whose store
// without a watch cache is not generic.UndecoratedStorage (the embedded
// backend's).
type UncachedDecorator interface {
	UncachedStorageDecorator() generic.StorageDecorator
}

// Store keeps run logs.
type Store struct {
	storage storage.Interface
	destroy factory.DestroyFunc
	prefix  string
}

// NewStore builds the store on the backend optsGetter selects.
func NewStore(optsGetter generic.RESTOptionsGetter) (*Store, error) {
	opts, err := optsGetter.GetRESTOptions(Resource, &kruntimes.RunLog{})
	if err != nil {
		return nil, err
	}
	decorator := generic.UndecoratedStorage
	if u, ok := optsGetter.(UncachedDecorator); ok {
		decorator = u.UncachedStorageDecorator()
	}
	prefix := path.Join("/", opts.ResourcePrefix)
	s, destroy, err := decorator(opts.StorageConfig, prefix, nil,
		func() runtime.Object { return &kruntimes.RunLog{} },
		func() runtime.Object { return &metav1.List{} },
		nil, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("building run log storage: %w", err)
	}
	return &Store{storage: s, destroy: destroy, prefix: prefix}, nil
}

// Destroy releases what the store holds.
func (s *Store) Destroy() { s.destroy() }

// key is <prefix>/<namespace>/<run>/<attempt>: Run names hold no slash.
func (s *Store) key(namespace, run string, attempt int32) string {
	return s.prefix + "/" + namespace + "/" + run + "/" + strconv.Itoa(int(attempt))
}

// Save keeps log as attempt's log of the Run namespace/run whose uid is
// runUID, replacing an earlier one (a hand-over sent again).
func (s *Store) Save(ctx context.Context, namespace, run string, runUID types.UID, attempt int32, log *kruntimes.RunLog) error {
	record := &kruntimes.RunLog{
		ObjectMeta:   metav1.ObjectMeta{Namespace: namespace, Name: run + "." + strconv.Itoa(int(attempt)), UID: runUID},
		RunUID:       runUID,
		Attempt:      attempt,
		Chunks:       log.Chunks,
		DroppedBytes: log.DroppedBytes,
		DroppedAfter: log.DroppedAfter,
	}
	return s.storage.GuaranteedUpdate(ctx, s.key(namespace, run, attempt), &kruntimes.RunLog{}, true, nil,
		func(runtime.Object, storage.ResponseMeta) (runtime.Object, *uint64, error) { return record, nil, nil }, nil)
}

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
	for a := int32(1); a <= attempts; a++ {
		if err := s.DeleteAttempt(ctx, namespace, run, runUID, a); err != nil {
			return err
		}
	}
	return nil
}

// DeleteAttempt removes attempt's log of the Run namespace/run whose uid
// is runUID, if it has one.
func (s *Store) DeleteAttempt(ctx context.Context, namespace, run string, runUID types.UID, attempt int32) error {
	err := s.storage.Delete(ctx, s.key(namespace, run, attempt), &kruntimes.RunLog{}, &storage.Preconditions{UID: &runUID}, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
	if err != nil && !storage.IsNotFound(err) && !storage.IsInvalidObj(err) {
		return fmt.Errorf("delete the log of attempt %d of Run %s/%s: %w", attempt, namespace, run, err)
	}
	return nil
}
