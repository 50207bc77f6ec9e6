//go:build etcdcompare

// The same benchmarks against etcd3 over an in-process etcd, with fsync on
// both sides. Behind a build tag because building etcd's server doubles the
// package's test build time:
//
//	go test ./registry/storage/embedded -tags etcdcompare -run xxx -bench Compare

package embedded

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/apitesting"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/utils/clock"
)

func newEtcdStore(b *testing.B) storage.Interface {
	cfg := testserver.NewTestConfig(b)
	// NewTestConfig turns fsync off; a fair comparison needs it on.
	cfg.UnsafeNoFsync = false
	client := testserver.RunEtcd(b, cfg)
	codec := apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)
	versioner := storage.APIObjectVersioner{}
	compactor := etcd3.NewCompactor(client.Client, 0, clock.RealClock{}, nil)
	b.Cleanup(compactor.Stop)
	s, err := etcd3.New(client, compactor, codec,
		func() runtime.Object { return &example.Pod{} }, func() runtime.Object { return &example.PodList{} },
		"", "/pods/", schema.GroupResource{Resource: "pods"}, identityTransformer{},
		etcd3.NewDefaultLeaseManagerConfig(), etcd3.NewDefaultDecoder(codec, versioner), versioner)
	require.NoError(b, err)
	return s
}

func compareBackends(b *testing.B) []struct {
	name string
	new  func(b *testing.B) storage.Interface
} {
	return []struct {
		name string
		new  func(b *testing.B) storage.Interface
	}{
		{"embedded", func(b *testing.B) storage.Interface { return podStore(b, openTestBackend(b, Options{})) }},
		{"etcd3", newEtcdStore},
	}
}

func BenchmarkCompareCreate(b *testing.B) {
	for _, backend := range compareBackends(b) {
		for _, writers := range []int{1, 25, 64} {
			b.Run(fmt.Sprintf("%s/Writers=%d", backend.name, writers), func(b *testing.B) {
				benchmarkConcurrentCreates(b, backend.new(b), writers)
			})
		}
		b.Run(backend.name+"/Paced=1000/s", func(b *testing.B) {
			benchmarkPacedCreates(b, backend.new(b), 1000)
		})
	}
}

func BenchmarkCompareStoreList(b *testing.B) {
	for _, backend := range compareBackends(b) {
		b.Run(backend.name, func(b *testing.B) {
			s := backend.new(b)
			ctx := context.Background()
			data := storagetesting.PrepareBenchmarkData(benchDims.namespaces, benchDims.podsPerNamespace, benchDims.nodes)
			precreate(ctx, b, s, data)
			storagetesting.RunBenchmarkStoreList(ctx, b, s, data, false)
		})
	}
}

func BenchmarkCompareWriteThroughput(b *testing.B) {
	for _, backend := range compareBackends(b) {
		b.Run(backend.name, func(b *testing.B) {
			s := backend.new(b)
			ctx := context.Background()
			data := storagetesting.PrepareBenchmarkData(benchDims.namespaces, benchDims.podsPerNamespace, benchDims.nodes)
			precreate(ctx, b, s, data)
			b.ResetTimer()
			storagetesting.RunBenchmarkWriteThroughput(ctx, b, s, data, false, nil)
		})
	}
}

func BenchmarkCompareStoreStats(b *testing.B) {
	for _, backend := range compareBackends(b) {
		b.Run(backend.name, func(b *testing.B) {
			s := backend.new(b)
			ctx := context.Background()
			data := storagetesting.PrepareBenchmarkData(benchDims.namespaces, benchDims.podsPerNamespace, benchDims.nodes)
			precreate(ctx, b, s, data)
			storagetesting.RunBenchmarkStoreStats(ctx, b, s)
		})
	}
}
