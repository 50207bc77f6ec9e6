package invokerouter

import (
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestRuntimedConns(t *testing.T) {
	podAt := func(ip string) *corev1.Pod { return &corev1.Pod{Status: corev1.PodStatus{PodIP: ip}} }
	cases := []struct {
		name string
		// then happens to the pool after it dialed python and bash at
		// 10.0.0.1 and python at 10.0.0.2.
		then func(*runtimedConns)
		kept []connKey
	}{
		{"one connection per runtimed and Runtime", func(*runtimedConns) {},
			[]connKey{{"10.0.0.1", "python.ns.runtimed.kruntimes.io"}, {"10.0.0.1", "bash.ns.runtimed.kruntimes.io"}, {"10.0.0.2", "python.ns.runtimed.kruntimes.io"}}},
		{"a deleted Pod's connections go", func(c *runtimedConns) { c.forgetPod(podAt("10.0.0.1")) },
			[]connKey{{"10.0.0.2", "python.ns.runtimed.kruntimes.io"}}},
		{"a Pod deleted while the watch was down goes too", func(c *runtimedConns) {
			c.forgetPod(cache.DeletedFinalStateUnknown{Key: "ns/pod", Obj: podAt("10.0.0.2")})
		}, []connKey{{"10.0.0.1", "python.ns.runtimed.kruntimes.io"}, {"10.0.0.1", "bash.ns.runtimed.kruntimes.io"}}},
		{"a Pod whose IP changed loses the old IP's connections", func(c *runtimedConns) { c.podUpdated(podAt("10.0.0.2"), podAt("10.0.0.3")) },
			[]connKey{{"10.0.0.1", "python.ns.runtimed.kruntimes.io"}, {"10.0.0.1", "bash.ns.runtimed.kruntimes.io"}}},
		{"a Pod updated with its IP unchanged keeps them", func(c *runtimedConns) { c.podUpdated(podAt("10.0.0.2"), podAt("10.0.0.2")) },
			[]connKey{{"10.0.0.1", "python.ns.runtimed.kruntimes.io"}, {"10.0.0.1", "bash.ns.runtimed.kruntimes.io"}, {"10.0.0.2", "python.ns.runtimed.kruntimes.io"}}},
		{"a Pod without an IP has none to close", func(c *runtimedConns) { c.forgetPod(podAt("")) },
			[]connKey{{"10.0.0.1", "python.ns.runtimed.kruntimes.io"}, {"10.0.0.1", "bash.ns.runtimed.kruntimes.io"}, {"10.0.0.2", "python.ns.runtimed.kruntimes.io"}}},
		{"close closes them all", func(c *runtimedConns) { c.close() }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conns := newRuntimedConns(&tls.Config{MinVersion: tls.VersionTLS13})
			t.Cleanup(conns.close)
			for _, dial := range []struct{ ip, runtime string }{{"10.0.0.1", "python"}, {"10.0.0.1", "bash"}, {"10.0.0.2", "python"}, {"10.0.0.1", "python"}} {
				client, err := conns.client(dial.ip, "ns", dial.runtime)
				require.NoError(t, err)
				require.NotNil(t, client)
			}
			tc.then(conns)
			conns.mu.Lock()
			defer conns.mu.Unlock()
			kept := make([]connKey, 0, len(conns.conns))
			for key := range conns.conns {
				kept = append(kept, key)
			}
			assert.ElementsMatch(t, tc.kept, kept)
		})
	}
}
