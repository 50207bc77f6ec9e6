package invokerouter

import (
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"kruntimes.io/kruntimes/apis/runtimepod"
)

// pod is a Runtime Pod as the connections see it: a UID and an IP.
func pod(uid types.UID, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: corev1.PodStatus{PodIP: ip}}
}

// kept is what the pool holds: each Pod UID with the address dialed.
func kept(t *testing.T, d *runtimedConns) map[types.UID]string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]string{}
	for uid, c := range d.conns {
		out[uid] = c.ip + " " + c.serverName
	}
	return out
}

func TestRuntimedConns(t *testing.T) {
	const (
		python = "python.ns.runtimed.kruntimes.io"
		bash   = "bash.ns.runtimed.kruntimes.io"
	)
	// Each case starts from a pool that dialed Pod a (python) and Pod b
	// (bash), which share 127.0.0.1 (as Pods on one node's host network
	// do, or one IP reused after a Pod went), and Pod c (python) at
	// 127.0.0.2.
	cases := []struct {
		name string
		then func(t *testing.T, d *runtimedConns)
		kept map[types.UID]string
	}{
		{"one connection per Pod, whatever its IP", func(*testing.T, *runtimedConns) {},
			map[types.UID]string{"a": "127.0.0.1 " + python, "b": "127.0.0.1 " + bash, "c": "127.0.0.2 " + python}},
		{"forgetting a Pod closes its own connection only, not those of a Pod on the same IP", func(_ *testing.T, d *runtimedConns) {
			d.forgetPod(pod("a", "127.0.0.1"))
		}, map[types.UID]string{"b": "127.0.0.1 " + bash, "c": "127.0.0.2 " + python}},
		{"a Pod deleted while the watch was down goes too", func(_ *testing.T, d *runtimedConns) {
			d.forgetPod(cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: pod("c", "127.0.0.2")})
		}, map[types.UID]string{"a": "127.0.0.1 " + python, "b": "127.0.0.1 " + bash}},
		{"a Pod forgotten after its IP was lost still goes", func(_ *testing.T, d *runtimedConns) {
			d.forgetPod(pod("c", ""))
		}, map[types.UID]string{"a": "127.0.0.1 " + python, "b": "127.0.0.1 " + bash}},
		{"a Pod whose IP changed loses its connection, and its alone", func(_ *testing.T, d *runtimedConns) {
			d.podUpdated(pod("a", "127.0.0.1"), pod("a", "127.0.0.3"))
		}, map[types.UID]string{"b": "127.0.0.1 " + bash, "c": "127.0.0.2 " + python}},
		{"a Pod routed at a new IP before its update arrived is dialed there", func(t *testing.T, d *runtimedConns) {
			_, err := d.client("a", "127.0.0.3", "ns", "python")
			require.NoError(t, err)
		}, map[types.UID]string{"a": "127.0.0.3 " + python, "b": "127.0.0.1 " + bash, "c": "127.0.0.2 " + python}},
		{"a Pod updated with its IP unchanged keeps it", func(_ *testing.T, d *runtimedConns) {
			d.podUpdated(pod("a", "127.0.0.1"), pod("a", "127.0.0.1"))
		}, map[types.UID]string{"a": "127.0.0.1 " + python, "b": "127.0.0.1 " + bash, "c": "127.0.0.2 " + python}},
		{"close closes them all, and dials no more", func(t *testing.T, d *runtimedConns) {
			d.close()
			_, err := d.client("d", "127.0.0.4", "ns", "python")
			require.Error(t, err)
		}, map[types.UID]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conns := newRuntimedConns(&tls.Config{MinVersion: tls.VersionTLS13}, clocktesting.NewFakePassiveClock(time.Now()))
			t.Cleanup(conns.close)
			for _, dial := range []struct {
				uid         types.UID
				ip, runtime string
			}{{"a", "127.0.0.1", "python"}, {"b", "127.0.0.1", "bash"}, {"c", "127.0.0.2", "python"}, {"a", "127.0.0.1", "python"}} {
				client, err := conns.client(dial.uid, dial.ip, "ns", dial.runtime)
				require.NoError(t, err)
				require.NotNil(t, client)
			}
			assert.Equal(t, tc.kept, func() map[types.UID]string { tc.then(t, conns); return kept(t, conns) }())
		})
	}
}

// TestRuntimedConnsRemovalRacingARoute: a Route that read the cache before
// its Pod's removal asks for the connection after it. It gets an error (a
// 503 to the caller), not a new connection that no removal would close;
// after goneMemory the UID is forgotten, and so is the memory of it.
func TestRuntimedConnsRemovalRacingARoute(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	conns := newRuntimedConns(&tls.Config{MinVersion: tls.VersionTLS13}, clk)
	t.Cleanup(conns.close)
	_, err := conns.client("a", "127.0.0.1", "ns", "python")
	require.NoError(t, err)

	conns.forgetPod(pod("a", "127.0.0.1"))
	_, err = conns.client("a", "127.0.0.1", "ns", "python")
	require.ErrorContains(t, err, "Pod a was removed a moment ago")
	assert.Empty(t, kept(t, conns), "nothing was dialed")
	_, err = conns.client("b", "127.0.0.1", "ns", "python")
	require.NoError(t, err, "a Pod that took over the IP is dialed")

	clk.SetTime(clk.Now().Add(goneMemory - time.Second))
	_, err = conns.client("a", "127.0.0.1", "ns", "python")
	require.Error(t, err, "still remembered just before the window ends")

	clk.SetTime(clk.Now().Add(time.Second))
	conns.forgetPod(pod("c", "127.0.0.2"))
	conns.mu.Lock()
	_, remembered := conns.gone["a"]
	conns.mu.Unlock()
	assert.False(t, remembered, "an expired UID is dropped at the next removal: the memory stays bounded")
	_, err = conns.client("a", "127.0.0.1", "ns", "python")
	require.NoError(t, err, "once the window ended the UID is not refused")
}

// TestRuntimedConnsWarm: warming a Pod's connection dials its runtimed at
// once, before any invocation asks for it; a Pod removed a moment ago is
// not dialed.
func TestRuntimedConnsWarm(t *testing.T) {
	// A loopback address of this test's own at runtimed's port.
	ln, err := net.Listen("tcp", net.JoinHostPort("127.77.0.1", strconv.Itoa(runtimepod.RuntimedInvokePort)))
	if err != nil {
		t.Skipf("cannot listen on 127.77.0.1:%d: %v", runtimepod.RuntimedInvokePort, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	conns := newRuntimedConns(&tls.Config{MinVersion: tls.VersionTLS13}, clocktesting.NewFakePassiveClock(time.Now()))
	t.Cleanup(conns.close)

	conns.forgetPod(pod("gone", "127.77.0.1"))
	conns.warm("gone", "127.77.0.1", "ns", "python")
	assert.NotContains(t, kept(t, conns), types.UID("gone"), "a removed Pod is not dialed")

	conns.warm("a", "127.77.0.1", "ns", "python")
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("warm did not dial the Pod's runtimed")
	}
	assert.Equal(t, map[types.UID]string{"a": "127.77.0.1 python.ns.runtimed.kruntimes.io"}, kept(t, conns))
}
