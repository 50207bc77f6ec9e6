package mcpserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

func TestCheckListen(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "127.0.0.1:8080", "[::1]:8080", "localhost:8080"} {
		assert.NoError(t, checkListen(addr, "", ""), addr)
	}
	for _, addr := range []string{":8080", "0.0.0.0:8080", "[::]:8080", "10.1.2.3:8080", "mcp.example.com:443"} {
		err := checkListen(addr, "", "")
		require.Error(t, err, addr)
		assert.Contains(t, err.Error(), "is not a loopback address")
		assert.Contains(t, err.Error(), "--tls-cert-file and --tls-private-key-file")
		assert.NoError(t, checkListen(addr, "tls.crt", "tls.key"), "%s with TLS", addr)
	}
	assert.ErrorContains(t, checkListen("127.0.0.1:1", "tls.crt", ""), "go together")
	assert.ErrorContains(t, checkListen("8080", "", ""), "HOST:PORT")
}

// fakeBackend counts what the HTTP server does with a session's backend.
type fakeBackend struct{ started, stopped atomic.Int32 }

func (b *fakeBackend) start() { b.started.Add(1) }
func (b *fakeBackend) stop()  { b.stopped.Add(1) }

// bearer adds a token (and an Origin, when set) to every request of an
// http.Client.
type bearer struct {
	token  string
	origin string
	next   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.origin != "" {
		r.Header.Set("Origin", b.origin)
	}
	return b.next.RoundTrip(r)
}

// testMaxSessionsPerUser is the --max-sessions-per-user of newTestMCPHTTP.
const testMaxSessionsPerUser = 3

type testMCPHTTP struct {
	url string
	// metricsURL answers the server's counters, as --serve-metrics does.
	metricsURL string
	mu         sync.Mutex
	servers    map[string]*mcp.Server // by user
	backends   map[string]*fakeBackend
	byUser     map[string][]*fakeBackend
	all        []*fakeBackend
	asked      atomic.Int32
}

// newTestMCPHTTP serves mcpHTTP on loopback; the cluster accepts the
// tokens alice-token and bob-token, and each session's server has a tool
// whoami that answers the session's user.
func newTestMCPHTTP(t *testing.T) *testMCPHTTP {
	s := &testMCPHTTP{servers: map[string]*mcp.Server{}, backends: map[string]*fakeBackend{}, byUser: map[string][]*fakeBackend{}}
	tokens := &tokenCache{now: time.Now, authenticate: func(_ context.Context, token string) (authenticationv1.UserInfo, error) {
		s.asked.Add(1)
		user, ok := map[string]string{"alice-token": "alice", "bob-token": "bob"}[token]
		if !ok {
			return authenticationv1.UserInfo{}, errUnauthenticated
		}
		return authenticationv1.UserInfo{Username: user}, nil
	}}
	h := newMCPHTTP(tokens, func(id *identity) (*mcp.Server, sessionBackend, error) {
		server := mcp.NewServer(&mcp.Implementation{Name: "krt", Version: "test"}, nil)
		user := id.user
		server.AddTool(&mcp.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: user}}}, nil
		})
		b := &fakeBackend{}
		s.mu.Lock()
		s.servers[user], s.backends[user] = server, b
		s.all = append(s.all, b)
		s.byUser[user] = append(s.byUser[user], b)
		s.mu.Unlock()
		return server, b, nil
	}, &mcpOptions{idleTimeout: time.Minute, allowedOrigins: []string{"http://localhost:6274"}, maxSessionsPerUser: testMaxSessionsPerUser}, newTestWriter(t))
	mux := http.NewServeMux()
	mux.Handle(MCPPath, h)
	mux.Handle(MetricsPath, h.metrics.handler())
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		ts.Close()
		h.close()
	})
	s.url = ts.URL + MCPPath
	s.metricsURL = ts.URL + MetricsPath
	return s
}

// refused scrapes the server's kruntimes_krt_mcp_requests_refused_total
// of reason.
func (s *testMCPHTTP) refused(t *testing.T, reason string) float64 {
	t.Helper()
	resp, err := http.Get(s.metricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	series := fmt.Sprintf("kruntimes_krt_mcp_requests_refused_total{reason=%q} ", reason)
	for line := range strings.SplitSeq(string(body), "\n") {
		if value, ok := strings.CutPrefix(line, series); ok {
			v, err := strconv.ParseFloat(value, 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("no series of reason %s", reason)
	return 0
}

// testWriter logs to t until the test ends, and drops what is written
// later (a session's goroutine may log its end after the test returned).
type testWriter struct {
	mu    sync.Mutex
	t     *testing.T
	ended bool
}

func newTestWriter(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.ended = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (s *testMCPHTTP) connect(ctx context.Context, t *testing.T, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, opts)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.url,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}},
		MaxRetries: -1,
	}, nil)
	require.NoError(t, err)
	return cs
}

// post sends one JSON-RPC ping of the session sessionID with the
// Authorization header auth (none when empty).
func (s *testMCPHTTP) post(t *testing.T, authz, sessionID string) *http.Response {
	t.Helper()
	return s.postFrom(t, "", authz, sessionID)
}

// postFrom is post with the Origin header origin (none when empty), as a
// browser sends it.
func (s *testMCPHTTP) postFrom(t *testing.T, origin, authz, sessionID string) *http.Response {
	t.Helper()
	return s.postCall(t, origin, authz, sessionID, `{"jsonrpc":"2.0","id":99,"method":"ping"}`)
}

// initialize sends an initialize request, which makes a session, with the
// Authorization header authz.
func (s *testMCPHTTP) initialize(t *testing.T, authz string) *http.Response {
	t.Helper()
	return s.postCall(t, "", authz, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"v0"}}}`)
}

func (s *testMCPHTTP) postCall(t *testing.T, origin, authz, sessionID, call string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url, strings.NewReader(call))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func callText(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string) string {
	t.Helper()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
	require.NoError(t, err)
	require.False(t, r.IsError)
	return textOf(t, r)
}

func TestMCPHTTPNeedsABearerToken(t *testing.T) {
	s := newTestMCPHTTP(t)
	for name, authz := range map[string]string{
		"no Authorization header":             "",
		"not a bearer token":                  "Basic YWxpY2U6cHc=",
		"a token the cluster does not accept": "Bearer mallory-token",
	} {
		t.Run(name, func(t *testing.T) {
			resp := s.post(t, authz, "")
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			assert.Equal(t, `Bearer realm="krt mcp"`, resp.Header.Get("WWW-Authenticate"))
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Empty(t, s.servers, "no session was made")
}

// TestMCPHTTPSessionIsBoundToItsToken: each session belongs to the user
// whose token created it, and a request of the session with another's
// token (or none) is refused; notifications/tools/list_changed still reach the session;
// the session's backend starts when it is initialized and stops when it
// ends.
func TestMCPHTTPSessionIsBoundToItsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newTestMCPHTTP(t)
	changed := make(chan struct{}, 4)
	alice := s.connect(ctx, t, "alice-token", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	defer alice.Close()
	bob := s.connect(ctx, t, "bob-token", nil)
	defer bob.Close()
	assert.Equal(t, "alice", callText(ctx, t, alice, "whoami"))
	assert.Equal(t, "bob", callText(ctx, t, bob, "whoami"))
	require.NotEmpty(t, alice.ID(), "a stateful session")

	t.Run("a request that made no session stops what it built", func(t *testing.T) {
		s.mu.Lock()
		defer s.mu.Unlock()
		started := 0
		for _, b := range s.all {
			started += int(b.started.Load())
			if b.started.Load() == 0 {
				assert.EqualValues(t, 1, b.stopped.Load(), "e.g. the SDK client's server/discover probe")
			}
		}
		assert.Equal(t, 2, started, "one backend per session")
	})

	t.Run("another token on the session is refused", func(t *testing.T) {
		resp := s.post(t, "Bearer bob-token", alice.ID())
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		resp = s.post(t, "", alice.ID())
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		resp = s.post(t, "Bearer mallory-token", alice.ID())
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		resp = s.post(t, "Bearer alice-token", alice.ID())
		assert.Equal(t, http.StatusOK, resp.StatusCode, "the session's own token")
		assert.Equal(t, "alice", callText(ctx, t, alice, "whoami"), "the session is unharmed")
	})

	t.Run("the cluster's answer for a token is reused", func(t *testing.T) {
		before := s.asked.Load()
		callText(ctx, t, alice, "whoami")
		assert.Equal(t, before, s.asked.Load())
	})

	t.Run("list_changed reaches the session", func(t *testing.T) {
		s.mu.Lock()
		server := s.servers["alice"]
		s.mu.Unlock()
		server.AddTool(&mcp.Tool{Name: "late", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil
		})
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no notifications/tools/list_changed")
		}
		res, err := alice.ListTools(ctx, nil)
		require.NoError(t, err)
		assert.Len(t, res.Tools, 2)
		res, err = bob.ListTools(ctx, nil)
		require.NoError(t, err)
		assert.Len(t, res.Tools, 1, "bob's session has its own server")
	})

	t.Run("the backend starts with the session and stops with it", func(t *testing.T) {
		s.mu.Lock()
		b := s.backends["alice"]
		s.mu.Unlock()
		assert.EqualValues(t, 1, b.started.Load())
		assert.EqualValues(t, 0, b.stopped.Load())
		require.NoError(t, alice.Close())
		deadline := time.Now().Add(10 * time.Second)
		for b.stopped.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		assert.EqualValues(t, 1, b.stopped.Load())
	})
}

// TestMCPHTTPValidatesOrigin: as MCP's streamable HTTP transport asks, a
// request a web page sends (it has an Origin) is refused with 403 unless
// --allowed-origin names its origin, before the cluster is asked about its
// token; a request without Origin is not a browser's and is served.
func TestMCPHTTPValidatesOrigin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newTestMCPHTTP(t)
	alice := s.connect(ctx, t, "alice-token", nil)
	defer alice.Close()

	for _, origin := range []string{"http://evil.example", "http://localhost:6275", "https://localhost:6274", "null"} {
		t.Run("refused: "+origin, func(t *testing.T) {
			asked := s.asked.Load()
			resp := s.postFrom(t, origin, "Bearer alice-token", "")
			assert.Equal(t, http.StatusForbidden, resp.StatusCode)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Contains(t, string(body), "--allowed-origin "+origin)
			resp = s.postFrom(t, origin, "Bearer alice-token", alice.ID())
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "nor on an existing session")
			assert.Equal(t, asked, s.asked.Load(), "the token was not sent to the cluster")
		})
	}

	t.Run("an allowed origin is served", func(t *testing.T) {
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   s.url,
			HTTPClient: &http.Client{Transport: bearer{token: "bob-token", origin: "HTTP://LOCALHOST:6274/", next: http.DefaultTransport}},
			MaxRetries: -1,
		}, nil)
		require.NoError(t, err)
		defer cs.Close()
		assert.Equal(t, "bob", callText(ctx, t, cs, "whoami"))
	})

	t.Run("no Origin is served", func(t *testing.T) {
		assert.Equal(t, "alice", callText(ctx, t, alice, "whoami"))
	})
}

// TestMCPHTTPCapsSessionsPerUser: one user has at most
// --max-sessions-per-user sessions (so at most that many backends were
// started for it); one more is refused with 429 naming the flag, other
// users are not affected, and a session that ends frees its slot.
func TestMCPHTTPCapsSessionsPerUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newTestMCPHTTP(t)
	var sessions []*mcp.ClientSession
	for range testMaxSessionsPerUser {
		cs := s.connect(ctx, t, "alice-token", nil)
		defer cs.Close()
		sessions = append(sessions, cs)
	}
	// started counts the backends of user's live sessions.
	startedFor := func(user string) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, b := range s.byUser[user] {
			if b.started.Load() > 0 && b.stopped.Load() == 0 {
				n++
			}
		}
		return n
	}
	// A session's backend starts once its initialize was answered.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return startedFor("alice") == testMaxSessionsPerUser, nil
	}))
	s.mu.Lock()
	assert.Len(t, s.byUser["alice"], testMaxSessionsPerUser, "a backend is built for each initialize alone, not for the client's server/discover before it")
	s.mu.Unlock()

	// Questions before a session (a ping here, the SDK's server/discover)
	// are answered and take no slot.
	assert.Equal(t, http.StatusOK, s.post(t, "Bearer alice-token", "").StatusCode)
	assert.Zero(t, s.refused(t, refusedTooManySessions), "nothing refused yet")
	resp := s.initialize(t, "Bearer alice-token")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, float64(1), s.refused(t, refusedTooManySessions), "the refusal is counted")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), "--max-sessions-per-user")
	connect := func() (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   s.url,
			HTTPClient: &http.Client{Transport: bearer{token: "alice-token", next: http.DefaultTransport}},
			MaxRetries: -1,
		}, nil)
	}
	_, err = connect()
	assert.ErrorContains(t, err, "Too Many Requests", "one session more than the cap")
	assert.Equal(t, testMaxSessionsPerUser, startedFor("alice"), "no backend for a refused session")

	bob := s.connect(ctx, t, "bob-token", nil)
	defer bob.Close()
	assert.Equal(t, "bob", callText(ctx, t, bob, "whoami"), "another user's sessions are not counted")

	require.NoError(t, sessions[0].Close())
	// The slot is freed once the closed session's backend has stopped.
	var again *mcp.ClientSession
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		again, err = connect()
		return err == nil, nil
	}), "the closed session's slot is free: %v", err)
	defer again.Close()
	assert.Equal(t, "alice", callText(ctx, t, again, "whoami"), "the closed session's slot is free")
}

func TestCheckOrigin(t *testing.T) {
	for _, origin := range []string{"http://localhost:6274", "https://mcp.example.com", "http://127.0.0.1:8080/"} {
		assert.NoError(t, checkOrigin(origin), origin)
	}
	for _, origin := range []string{"localhost:6274", "ftp://example.com", "http://example.com/path", "http://", "*", "http://u@example.com"} {
		assert.ErrorContains(t, checkOrigin(origin), "want SCHEME://HOST[:PORT]", origin)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMCPListenTLS: with TLS files krt mcp --listen serves HTTPS (a request
// without a token is 401 there, before the cluster is asked anything) and
// stops when its context ends.
func TestMCPListenTLS(t *testing.T) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errOut := &lockedBuffer{}
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut}
	o := &mcpOptions{listen: "127.0.0.1:0", tlsCertFile: certFile, tlsKeyFile: keyFile, idleTimeout: time.Minute, maxSessionsPerUser: 1}
	served := make(chan error, 1)
	go func() {
		served <- serveMCPHTTP(ctx, &rest.Config{Host: "https://127.0.0.1:1"}, toolScope{namespaces: []string{"ns"}}, labels.Everything(), streams, o)
	}()
	address := regexp.MustCompile(`at (https://127\.0\.0\.1:\d+/mcp) `)
	var url string
	deadline := time.Now().Add(10 * time.Second)
	for url == "" && time.Now().Before(deadline) {
		if m := address.FindStringSubmatch(errOut.String()); m != nil {
			url = m[1]
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.NotEmpty(t, url, "the https URL on standard error: %s", errOut.String())

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(certPEM))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, `Bearer realm="krt mcp"`, resp.Header.Get("WWW-Authenticate"))
	resp, err = http.Post("http"+strings.TrimPrefix(url, "https"), "application/json", strings.NewReader(`{}`))
	if err == nil {
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the TLS port")
	}

	cancel()
	select {
	case err := <-served:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("krt mcp --listen did not stop with its context")
	}
}
