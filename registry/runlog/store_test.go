package runlog_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver"
	"kruntimes.io/kruntimes/registry/runlog"
	"kruntimes.io/kruntimes/registry/storage/embedded"
)

// newEmbeddedStore is the store on a real embedded backend in a temporary
// directory, encoding as kruntimes-apiserver does by default (protobuf).
func newEmbeddedStore(tb testing.TB) *runlog.Store {
	tb.Helper()
	backend, err := embedded.Open(tb.TempDir(), embedded.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = backend.Close() })
	info, ok := runtime.SerializerInfoForMediaType(apiserver.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	require.True(tb, ok)
	codec := apiserver.Codecs.CodecForVersions(info.Serializer, apiserver.Codecs.UniversalDeserializer(), v1alpha1.SchemeGroupVersion, nil)
	store, err := runlog.NewStore(backend.RESTOptionsGetter(*storagebackend.NewDefaultConfig("/registry", codec)))
	require.NoError(tb, err)
	tb.Cleanup(store.Destroy)
	return store
}

func logOf(size int) *kruntimes.RunLog {
	return &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{{Stream: kruntimes.RunLogStreamStdout, UnixNano: 1, Data: bytes.Repeat([]byte{0xff}, size)}}}
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	store := newEmbeddedStore(t)
	const uid, laterUID = types.UID("uid-1"), types.UID("uid-2")

	require.NoError(t, store.Save(ctx, "ns", "a", uid, 1, logOf(3)))
	require.NoError(t, store.Save(ctx, "ns", "a", uid, 2, logOf(5)))
	require.NoError(t, store.Save(ctx, "ns", "a", uid, 2, logOf(7)), "a hand-over sent again replaces the record")
	got, err := store.Get(ctx, "ns", "a", uid, 2)
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Equal(t, int32(2), got.Attempt)
	assert.Equal(t, uid, got.RunUID)
	assert.Equal(t, bytes.Repeat([]byte{0xff}, 7), got.Chunks[0].Data)

	got, err = store.Get(ctx, "ns", "a", laterUID, 1)
	require.NoError(t, err)
	assert.Nil(t, got, "a record of an earlier Run of the name is never shown")
	got, err = store.Get(ctx, "ns", "b", uid, 1)
	require.NoError(t, err)
	assert.Nil(t, got, "no record, no log")

	require.NoError(t, store.Delete(ctx, "ns", "a", laterUID, 2))
	got, err = store.Get(ctx, "ns", "a", uid, 1)
	require.NoError(t, err)
	assert.NotNil(t, got, "deleting for a later Run of the name leaves this one's records")

	require.NoError(t, store.Delete(ctx, "ns", "a", uid, 2))
	for _, attempt := range []int32{1, 2} {
		got, err = store.Get(ctx, "ns", "a", uid, attempt)
		require.NoError(t, err)
		assert.Nil(t, got, "attempt %d is deleted", attempt)
	}
	require.NoError(t, store.Delete(ctx, "ns", "a", uid, 2), "deleting again is fine")
}

// BenchmarkSave is the cost runtimed pays per attempt before it writes the
// outcome, on the embedded backend (fsynced writes).
func BenchmarkSave(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			store := newEmbeddedStore(b)
			log := logOf(size)
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				i++
				if err := store.Save(context.Background(), "ns", fmt.Sprintf("run-%d", i), "uid", 1, log); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
