package mcpserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

// BenchmarkToolsList is krt mcp's own share of a tools/list with 500 Ready
// function Runs of which the caller may invoke 100: the sync against the
// watch's cache and the SDK's answer over its in-memory transport, with
// every access answer cached (a later list) or none (the first list of a
// session, the reviews answered at once). The cluster's share (the list
// of the Runs, the reviews) is TestKrtMCPToolsListScale's.
func BenchmarkToolsList(b *testing.B) {
	const total, invocable = 500, 100
	for _, tc := range []struct {
		name       string
		namespaces []string
	}{
		{"one namespace", []string{"ns"}},
		{"five namespaces", []string{"ns-0", "ns-1", "ns-2", "ns-3", "ns-4"}},
	} {
		for _, cold := range []bool{false, true} {
			name := tc.name + "/answers cached"
			if cold {
				name = tc.name + "/answers asked"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
				ready := []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue}}
				allowed := map[string]bool{}
				for i := range total {
					ns := tc.namespaces[i%len(tc.namespaces)]
					run := &v1alpha1.Run{
						ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("tool-%03d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))},
						Spec:       v1alpha1.RunSpec{Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "h.h"}}},
						Status:     v1alpha1.RunStatus{Conditions: ready},
					}
					require.NoError(b, indexer.Add(run))
					allowed[ns+"/"+run.Name] = i%(total/invocable) == 0
				}
				review := func(_ context.Context, ns, name string) (bool, error) { return allowed[ns+"/"+name], nil }
				server := mcp.NewServer(&mcp.Implementation{Name: "krt", Version: "bench"}, nil)
				tools := &toolSet{
					server:  server,
					listers: []listersv1alpha1.RunLister{listersv1alpha1.NewRunLister(indexer)},
					access:  &accessCache{now: time.Now, review: review},
					scope:   toolScope{namespaces: tc.namespaces},
					served:  map[string]servedTool{},
				}
				server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
					return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
						if method == "tools/list" {
							if cold {
								tools.access = &accessCache{now: time.Now, review: review}
							}
							tools.sync(ctx)
						}
						return next(ctx, method, req)
					}
				})
				st, ct := mcp.NewInMemoryTransports()
				ss, err := server.Connect(ctx, st, nil)
				require.NoError(b, err)
				defer ss.Close()
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"}, nil).Connect(ctx, ct, nil)
				require.NoError(b, err)
				defer cs.Close()
				b.ResetTimer()
				for b.Loop() {
					res, err := cs.ListTools(ctx, nil)
					if err != nil || len(res.Tools) != invocable {
						b.Fatalf("tools/list: %d tools, %v", len(res.Tools), err)
					}
				}
			})
		}
	}
}
