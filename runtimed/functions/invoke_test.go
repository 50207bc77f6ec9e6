package functions

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/proto/pki"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/test/bench/cputime"
)

// invokeHop is runtimed's invoke server in front of the harness's function
// controller (the gate) and Runtime Server, on a loopback port with mutual
// TLS from files that the test may rewrite.
type invokeHop struct {
	address string
	dir     string
	ca      *pki.CA
}

func (h *invokeHop) path(name string) string { return filepath.Join(h.dir, name) }

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	// Written aside and renamed, as a kubelet updates a Secret volume.
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// issue writes a fresh serving pair for the runtimed and client pair for
// the apiserver, both of ca, and ca as the bundle both trust.
func (h *invokeHop) issue(t testing.TB, ca *pki.CA) {
	t.Helper()
	cert, key, err := ca.IssueServing(testNamespace, "python", time.Hour)
	require.NoError(t, err)
	writeFile(t, h.path("serving.crt"), cert)
	writeFile(t, h.path("serving.key"), key)
	cert, key, err = ca.IssueClient(time.Hour)
	require.NoError(t, err)
	writeFile(t, h.path("client.crt"), cert)
	writeFile(t, h.path("client.key"), key)
	writeFile(t, h.path("ca.crt"), ca.CertPEM)
	h.ca = ca
}

func startInvokeHop(t testing.TB, h *harness) *invokeHop {
	t.Helper()
	return startInvokeHopWith(t, h, invoke.DedupConfig{})
}

// startInvokeHopWith is startInvokeHop with invocation-ID deduplication
// bounded by dedup (off when its Window is 0).
func startInvokeHopWith(t testing.TB, h *harness, dedup invoke.DedupConfig) *invokeHop {
	t.Helper()
	ca, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
	require.NoError(t, err)
	hop := &invokeHop{dir: t.TempDir()}
	hop.issue(t, ca)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	serverTLS, err := pki.ServerTLS(ctx, hop.path("serving.crt"), hop.path("serving.key"), hop.path("ca.crt"), invocation.ClientCommonName)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(append(transport.ServerOptions(), grpc.Creds(credentials.NewTLS(serverTLS)))...)
	runtimedv1.RegisterRuntimedServer(gs, invoke.NewServer(h.controller, h.functions, "python").Deduplicate(dedup))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	hop.address = lis.Addr().String()
	return hop
}

// dial connects as the apiserver does, with the client TLS read from files.
func (hop *invokeHop) dial(t testing.TB, certFile, keyFile string) runtimedv1.RuntimedClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clientTLS, err := pki.ClientTLS(ctx, certFile, keyFile, hop.path("ca.crt"))
	require.NoError(t, err)
	clientTLS.ServerName = invocation.ServerName(testNamespace, "python")
	conn, err := grpc.NewClient(hop.address, append(transport.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return runtimedv1.NewRuntimedClient(conn)
}

func invokeRequest(run *v1alpha1.Run, input string) *runtimedv1.InvokeRequest {
	return &runtimedv1.InvokeRequest{RunUid: string(run.UID), Attempt: run.Status.Attempt, PodUid: string(testPodUID),
		InvocationId: "inv-1", Input: []byte(input), Caller: "alice"}
}

func TestInvokeHop(t *testing.T) {
	h := start(t, harnessOptions{})
	hop := startInvokeHop(t, h)
	h.scheduled(t, "echo", echoPython+"import time\ndef slow(event, context):\n    time.sleep(event)\n    return 'slept'\n", "handler.handle")
	run := h.waitFor(t, "echo", "Ready", phaseIs(lifecycle.Ready))
	client := hop.dial(t, hop.path("client.crt"), hop.path("client.key"))
	ctx := t.Context()

	t.Run("an invocation of the live registration returns the handler's output", func(t *testing.T) {
		resp, err := client.Invoke(ctx, invokeRequest(run, `{"a":1}`))
		require.NoError(t, err)
		assert.Equal(t, "inv-1", resp.GetInvocationId())
		assert.JSONEq(t, `{"echo":{"a":1}}`, string(resp.GetOutput()))
	})

	t.Run("the largest input and output cross both hops whole", func(t *testing.T) {
		h.scheduled(t, "identity", "def handle(event, context):\n    return event\n", "handler.handle")
		identity := h.waitFor(t, "identity", "Ready", phaseIs(lifecycle.Ready))
		input := `"` + strings.Repeat("x", invocation.MaxInputBytes-2) + `"`
		resp, err := client.Invoke(ctx, invokeRequest(identity, input))
		require.NoError(t, err)
		require.Nil(t, resp.GetError())
		assert.Equal(t, input, string(resp.GetOutput()))
		assert.Equal(t, invocation.ContentTypeJSON, resp.GetContentType(), "the output's content type comes back, so the apiserver writes it without scanning it")
	})

	t.Run("the content type goes on to the Runtime Server: application/json is not scanned again, and no content type is", func(t *testing.T) {
		req := invokeRequest(run, `{nope`)
		req.ContentType = invocation.ContentTypeJSON
		resp, err := client.Invoke(ctx, req)
		require.NoError(t, err, "the apiserver vouched for the input")
		assert.Equal(t, "JSONDecodeError", resp.GetError().GetType(), "only the worker's parse, before the handler, reads it")

		_, err = client.Invoke(ctx, invokeRequest(run, `{nope`))
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "without a content type the Runtime Server checks the input")
	})

	t.Run("a tuple that is not runtimed's live registration is refused before dispatch", func(t *testing.T) {
		for name, mutate := range map[string]func(*runtimedv1.InvokeRequest){
			"another attempt": func(r *runtimedv1.InvokeRequest) { r.Attempt = 2 },
			"another Pod":     func(r *runtimedv1.InvokeRequest) { r.PodUid = "another-pod" },
			"another Run":     func(r *runtimedv1.InvokeRequest) { r.RunUid = "not-a-run" },
		} {
			req := invokeRequest(run, `{}`)
			mutate(req)
			_, err := client.Invoke(ctx, req)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %v", name, err)
		}
	})

	t.Run("bad requests are refused", func(t *testing.T) {
		req := invokeRequest(run, `{}`)
		req.InvocationId = string(make([]byte, 129))
		_, err := client.Invoke(ctx, req)
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
	})

	t.Run("a certificate rotated on disk is used for new connections, and a new CA too", func(t *testing.T) {
		oldCA := hop.ca
		newCA, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
		require.NoError(t, err)
		hop.issue(t, newCA)
		// First the CA files list both CAs while the leaves move over, then
		// only the new one: a new connection then works only if runtimed
		// reloaded its serving pair and its client CA.
		writeFile(t, hop.path("ca.crt"), append(append([]byte{}, newCA.CertPEM...), oldCA.CertPEM...))
		writeFile(t, hop.path("ca.crt"), newCA.CertPEM)
		var lastErr error
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			fresh := hop.dial(t, hop.path("client.crt"), hop.path("client.key"))
			_, lastErr = fresh.Invoke(ctx, invokeRequest(run, `{}`))
			return lastErr == nil, nil
		})
		require.NoError(t, err, "a new connection with the new pairs works: %v", lastErr)
		_, err = client.Invoke(ctx, invokeRequest(run, `{}`))
		assert.NoError(t, err, "the connection made before the rotation keeps working")
	})

	t.Run("a client certificate of another CA, or of another name, is refused", func(t *testing.T) {
		other, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
		require.NoError(t, err)
		dir := t.TempDir()
		cert, key, err := other.IssueClient(time.Hour)
		require.NoError(t, err)
		writeFile(t, filepath.Join(dir, "other.crt"), cert)
		writeFile(t, filepath.Join(dir, "other.key"), key)
		_, err = hop.dial(t, filepath.Join(dir, "other.crt"), filepath.Join(dir, "other.key")).Invoke(ctx, invokeRequest(run, `{}`))
		assert.Equal(t, codes.Unavailable, status.Code(err), "the handshake fails: %v", err)

		// A runtimed's own serving certificate is no client certificate.
		_, err = hop.dial(t, hop.path("serving.crt"), hop.path("serving.key")).Invoke(ctx, invokeRequest(run, `{}`))
		assert.Equal(t, codes.Unavailable, status.Code(err), "the handshake fails: %v", err)
	})

	t.Run("a second concurrent invocation is ResourceExhausted", func(t *testing.T) {
		h.scheduled(t, "slow", "import time\ndef handle(event, context):\n    time.sleep(event)\n    return 'slept'\n", "handler.handle")
		slow := h.waitFor(t, "slow", "Ready", phaseIs(lifecycle.Ready))
		done := make(chan error, 1)
		go func() {
			_, err := client.Invoke(ctx, invokeRequest(slow, `3`))
			done <- err
		}()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return h.registrations(t)[slow.UID].GetInFlight() == 1, nil
		})
		require.NoError(t, err, "the first invocation is in flight")
		_, err = client.Invoke(ctx, invokeRequest(slow, `0`))
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
		require.NoError(t, <-done, "the first invocation completes")
	})
}

// BenchmarkInvoke measures runtimed's invoke hop as the apiserver calls it:
// gRPC with mutual TLS on a loopback TCP socket to the real invoke server,
// whose gate is the function controller, in front of the real Runtime
// Server on a unix socket with a warm Python worker running a no-op
// handler. cpu-µs/op is this process's CPU per invocation (the apiserver's
// side of the hop, runtimed, the Runtime Server); child-cpu-µs/op the
// Python worker's. Run with
//
//	go test ./runtimed/functions -run '^$' -bench Invoke -benchtime 5000x -count 5
//
// Three cases, interleaved by -count: a minted ID (not deduplicated), a new
// caller-sent ID each call (run and recorded), and one caller-sent ID
// repeated (replayed from the table, the handler not run).
func BenchmarkInvoke(b *testing.B) {
	h := start(b, harnessOptions{})
	hop := startInvokeHopWith(b, h, invoke.DedupConfig{Window: 10 * time.Minute, MaxEntries: 1000, MaxBytes: 4 << 20})
	h.scheduled(b, "noop", "def handle(event, context):\n    return None\n", "handler.handle")
	run := h.waitFor(b, "noop", "Ready", phaseIs(lifecycle.Ready))
	client := hop.dial(b, hop.path("client.crt"), hop.path("client.key"))
	ctx := b.Context()
	for _, bc := range []struct {
		name       string
		callerSent bool
		sameID     bool
	}{
		{name: "minted-id"},
		{name: "caller-id", callerSent: true},
		{name: "replayed", callerSent: true, sameID: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := invokeRequest(run, `{}`)
			// As the apiserver sends it: the input validated as JSON.
			req.ContentType = invocation.ContentTypeJSON
			req.CallerSentId = bc.callerSent
			prefix := bc.name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
			// The first calls set up the connection and warm the worker
			// (and record the replayed ID).
			for i := range 10 {
				req.InvocationId = prefix + strconv.Itoa(i)
				if bc.sameID {
					req.InvocationId = prefix
				}
				if _, err := client.Invoke(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu := cputime.Now()
			for i := 0; b.Loop(); i++ {
				if !bc.sameID {
					req.InvocationId = prefix + strconv.Itoa(10+i)
				}
				resp, err := client.Invoke(ctx, req)
				if err != nil || resp.GetError() != nil {
					b.Fatalf("invoke: %v %v", err, resp.GetError())
				}
			}
			cputime.Report(b, cpu)
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}
