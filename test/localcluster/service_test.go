package localcluster

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
)

// replica is a TLS server that answers /readyz as told and names itself
// on every other path.
type replica struct {
	name  string
	ready atomic.Bool
	// hang makes /readyz answer only when the prober gives up.
	hang   atomic.Bool
	probes atomic.Int32
	server *httptest.Server
}

func newReplica(t *testing.T, name string) *replica {
	r := &replica{name: name}
	r.ready.Store(true)
	r.server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/readyz" {
			r.probes.Add(1)
			if r.hang.Load() {
				<-req.Context().Done()
				return
			}
			if !r.ready.Load() {
				http.Error(w, "not ready", http.StatusInternalServerError)
				return
			}
		}
		_, _ = io.WriteString(w, r.name)
	}))
	t.Cleanup(r.server.Close)
	return r
}

func (r *replica) address() string { return strings.TrimPrefix(r.server.URL, "https://") }

func TestServiceFrontHandsConnectionsToReadyReplicas(t *testing.T) {
	a, b := newReplica(t, "a"), newReplica(t, "b")
	ctx, cancel := context.WithCancel(t.Context())
	//nolint:gosec // test servers with self-signed certificates
	insecure := &tls.Config{InsecureSkipVerify: true}
	front, err := startServiceFront(ctx, "127.0.0.1:0", []string{a.address(), b.address()}, insecure)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); front.wait() })

	// A new connection per request, as each of kube-apiserver's would be
	// after the last one closed.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: insecure, DisableKeepAlives: true}}
	who := func() (string, error) {
		resp, err := client.Get("https://" + front.Addr() + "/who")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	answers := func(n int) map[string]int {
		seen := map[string]int{}
		for range n {
			name, err := who()
			if err != nil {
				name = "refused"
			}
			seen[name]++
		}
		return seen
	}

	assert.Equal(t, map[string]int{"a": 2, "b": 2}, answers(4), "both ready: connections alternate")

	b.ready.Store(false)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return answers(2)["b"] == 0, nil
	}), "b leaves within a few probe periods of failing /readyz")
	assert.Equal(t, map[string]int{"a": 6}, answers(6), "only the ready replica gets connections")

	a.ready.Store(false)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return answers(1)["refused"] == 1, nil
	}), "without a ready replica a connection is refused, as by a Service without endpoints")

	b.ready.Store(true)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return answers(1)["b"] == 1, nil
	}), "b comes back once ready")
	b.server.Close()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return answers(1)["refused"] == 1, nil
	}), "a replica that is gone fails its probe")
}

func TestServiceFrontKeepsAReplicaThroughASlowProbe(t *testing.T) {
	a, b := newReplica(t, "a"), newReplica(t, "b")
	ctx, cancel := context.WithCancel(t.Context())
	//nolint:gosec // test servers with self-signed certificates
	insecure := &tls.Config{InsecureSkipVerify: true}
	front, err := startServiceFront(ctx, "127.0.0.1:0", []string{a.address(), b.address()}, insecure)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); front.wait() })
	require.Equal(t, []string{"a", "b"}, readyBackends(front, a, b))

	a.hang.Store(true)
	before := a.probes.Load()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(readyBackends(front, a, b)) == 1, nil
	}), "a replica that stops answering its probes leaves")
	assert.Equal(t, []string{"b"}, readyBackends(front, a, b))
	assert.GreaterOrEqual(t, a.probes.Load()-before, int32(serviceProbeFailureThreshold),
		"a replica leaves only after %d probes in a row went unanswered, as with a kubelet's failureThreshold", serviceProbeFailureThreshold)

	a.hang.Store(false)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(readyBackends(front, a, b)) == 2, nil
	}), "a comes back with its first answered probe")
}

// readyBackends names the replicas the front would hand connections to.
func readyBackends(front *serviceFront, replicas ...*replica) []string {
	front.mu.Lock()
	defer front.mu.Unlock()
	var names []string
	for i, ready := range front.ready {
		if ready {
			names = append(names, replicas[i].name)
		}
	}
	return names
}

func TestStartRefusesReplicasOnEmbeddedStorage(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(t.Context(), Config{RepoRoot: dir, StateDir: dir, KruntimesReplicas: 2})
	require.EqualError(t, err, "2 kruntimes-apiserver replicas need etcd3 storage: the embedded backend's data file has one writer")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "refused before anything starts")
}
