package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/apitesting"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

var scheme = runtime.NewScheme()
var codecs = serializer.NewCodecFactory(scheme)

// defaultTestPrefix is what the suite's PrefixTransformer prepends, as in
// etcd3's tests.
const defaultTestPrefix = "test!"

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))
}

type setupOptions struct {
	codec          runtime.Codec
	transformer    value.Transformer
	prefix         string
	resourcePrefix string
	backend        Options
}

type setupOption func(*setupOptions)

func withCodec(c runtime.Codec) setupOption { return func(o *setupOptions) { o.codec = c } }
func withTransformer(t value.Transformer) setupOption {
	return func(o *setupOptions) { o.transformer = t }
}
func withBackendOptions(b Options) setupOption { return func(o *setupOptions) { o.backend = b } }

func newTestTransformer() value.Transformer {
	return storagetesting.NewPrefixTransformer([]byte(defaultTestPrefix), false)
}

// openTestBackend opens a backend in a fresh directory. fsync stays on unless
// the caller opts out: the suite must exercise the real commit path.
func openTestBackend(t testing.TB, opts Options) *Backend {
	t.Helper()
	if opts.CompactionInterval == 0 {
		// Tests compact explicitly; a background run would race them.
		opts.CompactionInterval = -1
	}
	b, err := Open(t.TempDir(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func testSetup(t testing.TB, opts ...setupOption) (context.Context, *store, *Backend) {
	t.Helper()
	o := setupOptions{
		codec:          apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion),
		transformer:    newTestTransformer(),
		resourcePrefix: "/pods/",
		backend:        Options{NoSync: true},
	}
	for _, opt := range opts {
		opt(&o)
	}
	b := openTestBackend(t, o.backend)
	s, err := b.newStore(StoreConfig{
		Codec:          o.codec,
		Transformer:    o.transformer,
		Prefix:         o.prefix,
		ResourcePrefix: o.resourcePrefix,
		GroupResource:  schema.GroupResource{Resource: "pods"},
		NewFunc:        func() runtime.Object { return &example.Pod{} },
		NewListFunc:    func() runtime.Object { return &example.PodList{} },
	})
	require.NoError(t, err)
	return context.Background(), s, b
}

// checkStorageInvariants reads the raw stored value: it must carry the
// transformer's prefix and no resourceVersion or selfLink.
func checkStorageInvariants(s *store) storagetesting.KeyValidation {
	return func(ctx context.Context, t *testing.T, key string) {
		rec, _, err := s.backend.current(key)
		require.NoError(t, err)
		require.NotNil(t, rec, "expecting a stored value at %s", key)
		decoded, err := runtime.Decode(s.codec, rec.value[len(defaultTestPrefix):])
		require.NoError(t, err)
		obj := decoded.(*example.Pod)
		require.Empty(t, obj.ResourceVersion, "stored object should have empty resource version")
		require.Empty(t, obj.SelfLink, "stored object should have empty selfLink")
	}
}

// putRaw writes an unrelated key, the equivalent of etcd3's test client Put.
func putRaw(ctx context.Context, b *Backend, key string, value []byte) (uint64, error) {
	for {
		rec, _, err := b.current(key)
		if err != nil {
			return 0, err
		}
		var expected uint64
		if rec != nil {
			expected = rec.modRev
		}
		op := &writeOp{key: []byte(key), value: value, expectedRev: expected}
		if err := b.submit(ctx, op); err != nil {
			return 0, err
		}
		if op.succeeded {
			return op.rev, nil
		}
	}
}

func increaseRVFunc(b *Backend) storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		rev, err := putRaw(ctx, b, "increaseRV", []byte("ok"))
		require.NoError(t, err)
		return int64(rev)
	}
}

func compactStorage(b *Backend) storagetesting.Compaction {
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
		require.NoError(t, err)
		require.NoError(t, b.Compact(ctx, rv))
		// etcd3's Compact records the compaction under a key, which moves
		// the revision; the suite's expectations count on that.
		_, err = putRaw(ctx, b, "compact_rev_key", []byte(resourceVersion))
		require.NoError(t, err)
	}
}

// checkStorageCallsInvariants checks how many values a list decoded. The
// etcd3 variant also counts etcd range calls; a local file has no such calls
// (one read transaction per list), so only the value reads are pinned.
func checkStorageCallsInvariants(transformer *storagetesting.PrefixTransformer) storagetesting.CallsValidation {
	return func(t *testing.T, pageSize, estimatedProcessedObjects uint64) {
		if reads := transformer.GetReadsAndReset(); reads != estimatedProcessedObjects {
			t.Errorf("unexpected reads: %d, expected: %d", reads, estimatedProcessedObjects)
		}
	}
}

// storeWithPrefixTransformer and storeWithTransformerOverride let the suite
// swap the value transformer, as etcd3's tests do.
type storeWithPrefixTransformer struct{ *store }

func (s *storeWithPrefixTransformer) UpdatePrefixTransformer(modifier storagetesting.PrefixTransformerModifier) func() {
	original := s.transformer.Load()
	transformer := *original.raw.(*storagetesting.PrefixTransformer)
	s.setTransformer(modifier(&transformer))
	return func() { s.transformer.Store(original) }
}

type storeWithTransformerOverride struct {
	storage.Interface
	store *store
}

func (s *storeWithTransformerOverride) UpdateTransformer(modifier storagetesting.TransformerModifier) func() {
	original := s.store.transformer.Load()
	s.store.setTransformer(modifier(original.raw))
	return func() { s.store.transformer.Store(original) }
}

type testTransformer struct {
	value.Transformer
	fail atomic.Bool
}

func (tt *testTransformer) setFailing(c bool) { tt.fail.Store(c) }

func (tt *testTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	if tt.fail.Load() {
		return nil, false, errors.New("synthetic error")
	}
	return tt.Transformer.TransformFromStorage(ctx, data, dataCtx)
}

type testCodec struct {
	runtime.Codec
	fail atomic.Bool
}

func (tc *testCodec) setFailing(c bool) { tc.fail.Store(c) }

func (tc *testCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if tc.fail.Load() {
		return nil, nil, errors.New("synthetic error")
	}
	return tc.Codec.Decode(data, defaults, into)
}

func TestCreate(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestCreate(ctx, t, s, checkStorageInvariants(s))
}

func TestCreateWithTTL(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestCreateWithTTL(ctx, t, s)
}

func TestCreateWithKeyExist(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestCreateWithKeyExist(ctx, t, s)
}

func TestGet(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGet(ctx, t, s)
}

func TestUnconditionalDelete(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestUnconditionalDelete(ctx, t, s)
}

func TestConditionalDelete(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestConditionalDelete(ctx, t, s)
}

func TestDeleteWithSuggestion(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestion(ctx, t, s)
}

func TestDeleteWithSuggestionAndConflict(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestionAndConflict(ctx, t, s)
}

func TestDeleteWithSuggestionOfDeletedObject(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestionOfDeletedObject(ctx, t, s)
}

func TestValidateDeletionWithSuggestion(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestValidateDeletionWithSuggestion(ctx, t, s)
}

func TestValidateDeletionWithOnlySuggestionValid(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestValidateDeletionWithOnlySuggestionValid(ctx, t, s)
}

func TestDeleteWithConflict(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestDeleteWithConflict(ctx, t, s)
}

func TestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	codec := &testCodec{Codec: apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)}
	ctx, s, _ := testSetup(t, withCodec(codec))
	storagetesting.RunTestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(ctx, t, s, codec.setFailing)
}

func TestDeleteWithConflictAndExpectedTransformError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	transformer := &testTransformer{Transformer: newTestTransformer()}
	ctx, s, _ := testSetup(t, withTransformer(transformer))
	storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, s, transformer.setFailing)
}

func TestDeleteWithConflictAndExpectedDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	codec := &testCodec{Codec: apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)}
	ctx, s, _ := testSetup(t, withCodec(codec))
	storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, s, codec.setFailing)
}

func TestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeFailure(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeError(ctx, t, s)
}

func TestPreconditionalDeleteWithSuggestion(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestPreconditionalDeleteWithSuggestion(ctx, t, s)
}

func TestPreconditionalDeleteWithSuggestionPass(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass(ctx, t, s)
}

func TestListPaging(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestListPaging(ctx, t, s)
}

func TestGetListNonRecursive(t *testing.T) {
	ctx, s, b := testSetup(t)
	storagetesting.RunTestGetListNonRecursive(ctx, t, increaseRVFunc(b), s)
}

func TestGetListRecursivePrefix(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGetListRecursivePrefix(ctx, t, s)
}

func TestKeySchema(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestKeySchema(ctx, t, s)
}

func TestGuaranteedUpdate(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdate(ctx, t, &storeWithPrefixTransformer{s}, checkStorageInvariants(s))
}

func TestGuaranteedUpdateWithTTL(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateWithTTL(ctx, t, s)
}

func TestGuaranteedUpdateChecksStoredData(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateChecksStoredData(ctx, t, &storeWithPrefixTransformer{s})
}

func TestGuaranteedUpdateWithConflict(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateWithConflict(ctx, t, s)
}

func TestGuaranteedUpdateWithSuggestionAndConflict(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict(ctx, t, s)
}

func TestTransformationFailure(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestTransformationFailure(ctx, t, &storeWithPrefixTransformer{s})
}

func TestList(t *testing.T) {
	ctx, s, b := testSetup(t)
	storagetesting.RunTestList(ctx, t, s, compactStorage(b), false, nil)
}

func TestConsistentList(t *testing.T) {
	ctx, s, b := testSetup(t)
	storagetesting.RunTestConsistentList(ctx, t, s, increaseRVFunc(b), false, true, false)
}

func TestCompactRevision(t *testing.T) {
	ctx, s, b := testSetup(t)
	storagetesting.RunTestCompactRevision(ctx, t, s, increaseRVFunc(b), compactStorage(b))
}

func TestListContinuation(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestListContinuation(ctx, t, s, checkStorageCallsInvariants(s.transformer.Load().raw.(*storagetesting.PrefixTransformer)))
}

func TestListPaginationRareObject(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestListPaginationRareObject(ctx, t, s, checkStorageCallsInvariants(s.transformer.Load().raw.(*storagetesting.PrefixTransformer)))
}

func TestListContinuationWithFilter(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestListContinuationWithFilter(ctx, t, s, checkStorageCallsInvariants(s.transformer.Load().raw.(*storagetesting.PrefixTransformer)))
}

func TestNamespaceScopedList(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestNamespaceScopedList(ctx, t, s)
}

func TestListInconsistentContinuation(t *testing.T) {
	ctx, s, b := testSetup(t)
	storagetesting.RunTestListInconsistentContinuation(ctx, t, s, compactStorage(b))
}

func TestListResourceVersionMatch(t *testing.T) {
	ctx, s, _ := testSetup(t)
	storagetesting.RunTestListResourceVersionMatch(ctx, t, &storeWithPrefixTransformer{s})
}

func TestStats(t *testing.T) {
	for _, sizeBasedListCostEstimate := range []bool{true, false} {
		t.Run(fmt.Sprintf("SizeBasedListCostEstimate=%v", sizeBasedListCostEstimate), func(t *testing.T) {
			ctx, s, _ := testSetup(t)
			if sizeBasedListCostEstimate {
				require.NoError(t, s.EnableResourceSizeEstimation(func(context.Context) ([]string, error) { return nil, nil }))
			}
			storagetesting.RunTestStats(ctx, t, s, s.codec, s.transformer.Load().raw, sizeBasedListCostEstimate)
		})
	}
}

func TestGetListWithErrorAggregation(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	ctx, s, _ := testSetup(t)
	corruptErr := &corruptObjectError{err: fmt.Errorf("bits flipped"), errType: untransformable}
	storagetesting.RunTestGetListWithErrorAggregation(ctx, t, &storeWithTransformerOverride{Interface: newCorruptObjectDeleter(s, s.groupResource), store: s}, corruptErr)
}

func TestGetListWithoutErrorAggregation(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, false)
	ctx, s, _ := testSetup(t)
	corruptErr := &corruptObjectError{err: fmt.Errorf("bits flipped"), errType: untransformable}
	storagetesting.RunTestGetListWithoutErrorAggregation(ctx, t, &storeWithTransformerOverride{Interface: s, store: s}, corruptErr)
}
