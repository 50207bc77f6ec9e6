package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// fakeCluster answers what krt mcp --listen asks of a cluster: who a
// token is, whether it may invoke, the Runs of namespace ns (a list, and
// watches that stay open until endWatches), and invocations; it records
// the token of every request.
type fakeCluster struct {
	runs []v1alpha1.Run

	mu       sync.Mutex
	users    map[string]string // by accepted token
	requests []fakeRequest
	open     map[string]int // open watches, by token
	ended    chan struct{}  // closed to end the open watches
}

type fakeRequest struct{ what, token string }

func newFakeCluster(t *testing.T, runs ...v1alpha1.Run) (*fakeCluster, *rest.Config) {
	c := &fakeCluster{
		runs:  runs,
		users: map[string]string{"alice-token": "alice", "alice-token-2": "alice", "bob-token": "bob"},
		open:  map[string]int{},
		ended: make(chan struct{}),
	}
	server := httptest.NewServer(c)
	t.Cleanup(func() {
		c.endWatches()
		server.Close()
	})
	return c, &rest.Config{Host: server.URL}
}

func (c *fakeCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	what := r.Method + " " + r.URL.Path
	switch {
	case r.URL.Query().Get("watch") == "true":
		what = "watch"
	case r.Method == http.MethodGet && r.URL.Query().Get("limit") == "1":
		what = "probe"
	case r.Method == http.MethodGet:
		what = "list"
	}
	c.mu.Lock()
	c.requests = append(c.requests, fakeRequest{what: what, token: token})
	user, ok := c.users[token]
	ended := c.ended
	c.mu.Unlock()
	answer := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 401, Reason: metav1.StatusReasonUnauthorized})
		return
	}
	switch {
	case what == "POST /apis/authentication.k8s.io/v1/selfsubjectreviews":
		answer(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "status": map[string]any{"userInfo": map[string]any{"username": user}}})
	case what == "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
		answer(map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "status": map[string]any{"allowed": true}})
	case what == "watch":
		c.mu.Lock()
		c.open[token]++
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.open[token]--
			c.mu.Unlock()
		}()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-ended:
		}
	case what == "list" || what == "probe":
		answer(&v1alpha1.RunList{TypeMeta: metav1.TypeMeta{Kind: "RunList", APIVersion: "kruntimes.io/v1alpha1"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: c.runs})
	case strings.HasSuffix(what, "/invoke"):
		answer(map[string]any{"invocationId": "inv", "output": map[string]any{"ok": true}})
	default:
		http.NotFound(w, r)
	}
}

// count is how many requests of kind what were made with a token of user.
func (c *fakeCluster) count(what, user string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.requests {
		if r.what == what && c.userOf(r.token) == user {
			n++
		}
	}
	return n
}

func (c *fakeCluster) userOf(token string) string {
	return map[string]string{"alice-token": "alice", "alice-token-2": "alice", "bob-token": "bob"}[token]
}

// openWatches is how many watches are open, by user.
func (c *fakeCluster) openWatches(user string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for token, open := range c.open {
		if c.userOf(token) == user {
			n += open
		}
	}
	return n
}

// tokensSince are the tokens of the requests since the first n.
func (c *fakeCluster) tokensSince(n int) map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tokens := map[string]bool{}
	for _, r := range c.requests[n:] {
		tokens[r.token] = true
	}
	return tokens
}

func (c *fakeCluster) requestCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.requests)
}

func (c *fakeCluster) revoke(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.users, token)
}

func (c *fakeCluster) endWatches() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.ended)
	c.ended = make(chan struct{})
}

// bigSource is more source than the rest of a Run.
var bigSource = strings.Repeat("x", 64<<10)

func toolRun(name string) v1alpha1.Run {
	return v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Generation: 1, ResourceVersion: "1",
			Labels:      map[string]string{"kruntimes.io/tool": "true"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": bigSource},
		},
		Spec: v1alpha1.RunSpec{
			Runtime: "python",
			Source:  v1alpha1.RunSource{Inline: bigSource},
			Env:     []v1alpha1.EnvVar{{Name: "API_KEY", Value: "secret-value"}},
			Mode:    v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "tools.forecast", Description: "Forecasts."}},
		},
		Status: v1alpha1.RunStatus{Conditions: []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue}}},
	}
}

// testClusterMCPHTTP serves krt mcp --listen's sessions against cluster,
// as serveMCPHTTP builds them.
func testClusterMCPHTTP(t *testing.T, config *rest.Config) (*testMCPHTTP, *sharedRunSources) {
	scope := toolScope{namespaces: []string{"ns"}}
	o := &mcpOptions{idleTimeout: time.Minute, maxSessionsPerUser: 8}
	tokens := &tokenCache{authenticate: selfSubjectReviewer(config), now: time.Now}
	sources := newSharedRunSources(config, scope, labels.Everything())
	h := newMCPHTTP(tokens, newHTTPSession(config, sources, scope, labels.Everything(), o), o, newTestWriter(t))
	h.sawToken = sources.sawToken
	mux := http.NewServeMux()
	mux.Handle(MCPPath, h)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		ts.Close()
		h.close()
	})
	return &testMCPHTTP{url: ts.URL + MCPPath}, sources
}

func toolNames(ctx context.Context, t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestMCPHTTPSharesOneStrippedWatchPerPrincipal: the sessions of one user
// share one list and watch of the Runs (one per namespace), not one each;
// another user has its own; the shared cache holds no Run's source, env or
// annotations (a Run of more than 128 KiB is less than 2 KiB there); the
// watch, and the token it acts as, end with the user's last session.
func TestMCPHTTPSharesOneStrippedWatchPerPrincipal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, config := newFakeCluster(t, toolRun("forecast"))
	s, sources := testClusterMCPHTTP(t, config)

	var alice []*mcp.ClientSession
	for range 3 {
		cs := s.connect(ctx, t, "alice-token", nil)
		defer cs.Close()
		alice = append(alice, cs)
		assert.Equal(t, []string{"forecast"}, toolNames(ctx, t, cs))
	}
	bob := s.connect(ctx, t, "bob-token", nil)
	defer bob.Close()
	assert.Equal(t, []string{"forecast"}, toolNames(ctx, t, bob))

	assert.Equal(t, 1, cluster.count("list", "alice"), "one list for alice's three sessions")
	assert.Equal(t, 1, cluster.count("watch", "alice"), "one watch for alice's three sessions")
	assert.Equal(t, 1, cluster.count("list", "bob"))
	assert.Equal(t, 2, sources.count(), "a source per principal")

	var held []*heldToken
	sources.mu.Lock()
	for _, shared := range sources.byPrincipal {
		held = append(held, shared.token)
		for _, lister := range shared.source.listers {
			runs, err := lister.List(labels.Everything())
			require.NoError(t, err)
			require.Len(t, runs, 1)
			run := runs[0]
			assert.Zero(t, len(run.Spec.Source.Inline), "no source in the cache")
			assert.Zero(t, len(run.Spec.Env), "no env in the cache")
			assert.Zero(t, len(run.Annotations), "no annotations (kubectl apply's copy of the Run) in the cache")
			assert.Equal(t, "Forecasts.", run.Spec.Mode.Function.Description, "what the tools read is kept")
			held, err := json.Marshal(run)
			require.NoError(t, err)
			assert.Less(t, len(held), 2<<10, "bytes a cached Run holds")
		}
	}
	sources.mu.Unlock()

	for _, cs := range alice {
		require.NoError(t, cs.Close())
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return sources.count() == 1 && cluster.openWatches("alice") == 0, nil
	}), "alice's watch ends with her last session")
	assert.Equal(t, 1, cluster.openWatches("bob"), "bob's goes on")
	var kept []string
	for _, token := range held {
		if token.get() != "" {
			kept = append(kept, token.get())
		}
	}
	assert.Equal(t, []string{"bob-token"}, kept, "alice's token is forgotten with her last session")
}

// switchableBearer is bearer whose token can be changed, as a client's
// whose token is refreshed.
type switchableBearer struct {
	token atomic.Value
	next  http.RoundTripper
}

func (b *switchableBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token.Load().(string))
	return b.next.RoundTrip(r)
}

// TestMCPHTTPCallsActAsTheRequestsToken: krt mcp --listen keeps no
// session's creating token: once the client's token is refreshed and the
// old one revoked, the session goes on, its calls act as the token of
// the request that makes them, and the shared watch reconnects with the
// newest token; nothing is sent with the revoked token any more.
func TestMCPHTTPCallsActAsTheRequestsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, config := newFakeCluster(t, toolRun("forecast"))
	s, _ := testClusterMCPHTTP(t, config)
	transport := &switchableBearer{next: http.DefaultTransport}
	transport.token.Store("alice-token")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.url,
		HTTPClient: &http.Client{Transport: transport},
		MaxRetries: -1,
	}, nil)
	require.NoError(t, err)
	defer cs.Close()
	require.Equal(t, []string{"forecast"}, toolNames(ctx, t, cs))
	assert.Equal(t, `{"ok":true}`, callText(ctx, t, cs, "forecast"))

	transport.token.Store("alice-token-2")
	cluster.revoke("alice-token")
	since := cluster.requestCount()
	assert.Equal(t, `{"ok":true}`, callText(ctx, t, cs, "forecast"), "the session outlives the token that created it")
	assert.Equal(t, map[string]bool{"alice-token-2": true}, cluster.tokensSince(since), "the call acts as its request's token")

	cluster.endWatches()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cluster.mu.Lock()
		defer cluster.mu.Unlock()
		return cluster.open["alice-token-2"] == 1, nil
	}), "the watch reconnects with the newest token: %v", cluster.tokensSince(since))
	assert.NotContains(t, cluster.tokensSince(since), "alice-token", fmt.Sprintf("nothing uses the revoked token after %d requests", since))
}

func TestPrincipalOf(t *testing.T) {
	alice := authenticationv1.UserInfo{Username: "alice", UID: "1", Groups: []string{"a", "b"}, Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=1"}}}
	refreshed := authenticationv1.UserInfo{Username: "alice", UID: "1", Groups: []string{"b", "a"}, Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=2"}}}
	assert.Equal(t, principalOf(alice), principalOf(refreshed), "a refreshed token (another credential ID, groups in another order) is the same principal")
	for name, other := range map[string]authenticationv1.UserInfo{
		"another user":               {Username: "bob", UID: "1", Groups: []string{"a", "b"}},
		"another UID":                {Username: "alice", UID: "2", Groups: []string{"a", "b"}},
		"fewer groups":               {Username: "alice", UID: "1", Groups: []string{"a"}},
		"a UID that ends in a group": {Username: "alice", UID: "1\x00a", Groups: []string{"b"}},
	} {
		assert.NotEqual(t, principalOf(alice), principalOf(other), name)
	}
}
