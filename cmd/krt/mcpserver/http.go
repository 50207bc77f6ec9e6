package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// MCPPath is the path krt mcp --listen serves MCP's streamable HTTP on.
const MCPPath = "/mcp"

// checkListen refuses a listen address that is not loopback unless TLS is
// configured: a bearer token must not cross a network in clear text.
func checkListen(listen, certFile, keyFile string) error {
	if (certFile == "") != (keyFile == "") {
		return errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w (want HOST:PORT, e.g. 127.0.0.1:8080)", listen, err)
	}
	if certFile != "" || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("--listen %q is not a loopback address, and every request carries a Kubernetes bearer token: "+
		"serve it over TLS (--tls-cert-file and --tls-private-key-file) or listen on 127.0.0.1, [::1] or localhost", listen)
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// mcpHTTP serves MCP's streamable HTTP transport: every request is
// authenticated by its bearer token, each session belongs to the principal
// that created it, and only a token of that principal may use it; a
// session's calls act as the token of the request that makes them.
type mcpHTTP struct {
	tokens *tokenCache
	// sawToken, when set, hears of every authenticated request.
	sawToken func(id *identity)
	// allowedOrigins are the Origin headers (normalized by originKey)
	// a request may carry; a request without one is not a browser's.
	allowedOrigins map[string]bool
	// newSession builds the MCP server of a new session acting as id.
	newSession func(id *identity) (*mcp.Server, sessionBackend, error)
	log        io.Writer

	handler *mcp.StreamableHTTPHandler
	// versions answers the SDK's question of which protocol revisions the
	// server speaks for requests of existing sessions.
	versions *mcp.Server

	// maxSessionsPerUser bounds the sessions of one user, each of which
	// holds an MCP server and its tools.
	maxSessionsPerUser int
	// metrics count what is refused.
	metrics *httpMetrics

	mu       sync.Mutex
	sessions map[sessionBackend]struct{}
	// slots counts, by user, the live sessions and the requests that may
	// make one.
	slots  map[string]int
	closed bool
}

// sessionBackend is what feeds one session's tools: start begins it (once
// the session is initialized), stop ends it (when the session ends).
type sessionBackend interface {
	start()
	stop()
}

type pendingKey struct{}

// pending is the server of the session a request without a session ID may
// create; the SDK asks for it more than once per request.
type pending struct {
	id      *identity
	once    sync.Once
	server  *mcp.Server
	session sessionBackend
	err     error
}

// newMCPHTTP serves with o's --session-idle-timeout, --allowed-origin and
// --max-sessions-per-user.
func newMCPHTTP(tokens *tokenCache, newSession func(id *identity) (*mcp.Server, sessionBackend, error), o *mcpOptions, log io.Writer) *mcpHTTP {
	h := &mcpHTTP{
		tokens:         tokens,
		allowedOrigins: map[string]bool{},
		newSession:     newSession,
		log:            log,
		versions:       mcp.NewServer(&mcp.Implementation{Name: "krt", Version: "versions"}, nil),
		sessions:       map[sessionBackend]struct{}{},

		maxSessionsPerUser: o.maxSessionsPerUser,
		metrics:            newHTTPMetrics(),
		slots:              map[string]int{},
	}
	for _, origin := range o.allowedOrigins {
		h.allowedOrigins[originKey(origin)] = true
	}
	h.handler = mcp.NewStreamableHTTPHandler(h.server, &mcp.StreamableHTTPOptions{SessionTimeout: o.idleTimeout})
	return h
}

// originKey is how an Origin is compared: scheme and host are
// case-insensitive, a trailing "/" is not part of it.
func originKey(origin string) string {
	return strings.ToLower(strings.TrimSuffix(origin, "/"))
}

// checkOrigin parses an --allowed-origin: SCHEME://HOST[:PORT], as
// browsers send it, nothing more.
func checkOrigin(origin string) error {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--allowed-origin %q: want SCHEME://HOST[:PORT] as a browser sends it in Origin, e.g. http://localhost:6274", origin)
	}
	return nil
}

// server is the SDK's getServer: it is called for every request.
func (h *mcpHTTP) server(r *http.Request) *mcp.Server {
	p, ok := r.Context().Value(pendingKey{}).(*pending)
	if !ok {
		return h.versions
	}
	p.once.Do(func() {
		p.server, p.session, p.err = h.newSession(p.id)
		if p.err != nil {
			fmt.Fprintf(h.log, "krt mcp: a session for %s: %v\n", p.id.user, p.err)
		}
	})
	if p.err != nil {
		return nil
	}
	return p.server
}

func (h *mcpHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// MCP's streamable HTTP transport asks servers to validate Origin:
	// a web page whose name was rebound to this address must not reach
	// it through the browser that shows the page.
	if origin := r.Header.Get("Origin"); origin != "" && !h.allowedOrigins[originKey(origin)] {
		h.metrics.refused.WithLabelValues(refusedOrigin).Inc()
		http.Error(w, fmt.Sprintf("krt mcp: requests from web pages of origin %q are refused; start krt mcp with --allowed-origin %s to accept them", origin, origin), http.StatusForbidden)
		return
	}
	token, ok := bearerToken(r)
	if !ok {
		h.metrics.refused.WithLabelValues(refusedUnauthenticated).Inc()
		unauthorized(w, "krt mcp: every request needs an Authorization: Bearer <Kubernetes token> header")
		return
	}
	id, err := h.tokens.identify(r.Context(), token)
	if errors.Is(err, errUnauthenticated) {
		h.metrics.refused.WithLabelValues(refusedUnauthenticated).Inc()
		unauthorized(w, "krt mcp: "+err.Error())
		return
	}
	if err != nil {
		http.Error(w, "krt mcp: could not ask the cluster who the bearer token is: "+err.Error(), http.StatusBadGateway)
		return
	}
	if h.sawToken != nil {
		h.sawToken(id)
	}
	ctx := r.Context()
	var p *pending
	initialize, err := isInitialize(w, r)
	if err != nil {
		http.Error(w, "krt mcp: reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if initialize {
		// A slot is taken before the session exists, so that concurrent
		// initializations cannot pass the bound together.
		if !h.takeSlot(id.user) {
			h.metrics.refused.WithLabelValues(refusedTooManySessions).Inc()
			http.Error(w, fmt.Sprintf("krt mcp: %s has %d MCP sessions, the most --max-sessions-per-user allows; end one (an HTTP DELETE with its Mcp-Session-Id) or wait until one is idle for --session-idle-timeout", id.user, h.maxSessionsPerUser), http.StatusTooManyRequests)
			return
		}
		p = &pending{id: id}
		ctx = context.WithValue(ctx, pendingKey{}, p)
	}
	// The SDK binds a session to the TokenInfo.UserID of the request that
	// created it and answers 403 to a request of the session with another.
	bound := auth.RequireBearerToken(func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: id.principal}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h.handler)
	bound.ServeHTTP(w, r.WithContext(ctx))
	if p == nil {
		return
	}
	if p.session == nil || !h.adopt(p) {
		h.freeSlot(id.user)
	}
}

// isInitialize says whether r is an initialize request, the only one
// that makes a session; it leaves r's body to be read again. Clients ask
// other questions before one (the SDK's server/discover, to learn whether
// the server is stateless) and those must neither take a slot nor make a
// session, or a user's slots run out while they are answered.
func isInitialize(w http.ResponseWriter, r *http.Request) (bool, error) {
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || r.Body == nil {
		return false, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, mcp.DefaultMaxRequestBodyBytes))
	if err != nil {
		return false, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var call struct {
		Method string `json:"method"`
	}
	// A batch or a malformed body is no initialize (which the protocol
	// forbids in a batch); the SDK answers it.
	return json.Unmarshal(body, &call) == nil && call.Method == "initialize", nil
}

func (h *mcpHTTP) takeSlot(user string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.slots[user] >= h.maxSessionsPerUser {
		return false
	}
	h.slots[user]++
	return true
}

func (h *mcpHTTP) freeSlot(user string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.slots[user]--; h.slots[user] <= 0 {
		delete(h.slots, user)
	}
}

// adopt keeps the watch of a new session while the session lives, and
// stops it (and frees the user's slot) when the session ends; a request
// that made no session stops it at once, and adopt says false.
func (h *mcpHTTP) adopt(p *pending) bool {
	var live *mcp.ServerSession
	for ss := range p.server.Sessions() {
		live = ss
	}
	h.mu.Lock()
	if live == nil || h.closed {
		h.mu.Unlock()
		p.session.stop()
		return false
	}
	h.sessions[p.session] = struct{}{}
	h.mu.Unlock()
	// The session outlives the request; the request's token must not.
	session, user := p.session, p.id.user
	session.start()
	fmt.Fprintf(h.log, "krt mcp: session %s… of %s started\n", sessionPrefix(live.ID()), user)
	go func() {
		_ = live.Wait()
		h.mu.Lock()
		delete(h.sessions, session)
		h.mu.Unlock()
		session.stop()
		h.freeSlot(user)
		fmt.Fprintf(h.log, "krt mcp: session %s… of %s ended\n", sessionPrefix(live.ID()), user)
	}()
	return true
}

// sessionPrefix is enough of a session ID to tell sessions apart in a log,
// not enough to use one.
func sessionPrefix(id string) string {
	if len(id) > 6 {
		return id[:6]
	}
	return id
}

// close stops the watches of every session.
func (h *mcpHTTP) close() {
	h.mu.Lock()
	h.closed = true
	sessions := h.sessions
	h.sessions = map[sessionBackend]struct{}{}
	h.mu.Unlock()
	for s := range sessions {
		s.stop()
	}
}

// newSharedRunSources watches the Runs of the cluster of base once per
// principal.
func newSharedRunSources(base *rest.Config, scope toolScope, selector labels.Selector) *sharedRunSources {
	return &sharedRunSources{newSource: func(token *heldToken) (*runSource, error) {
		// The watch's requests are few; client-go's default limit is fine.
		client, err := versioned.NewForConfig(heldConfig(base, token))
		if err != nil {
			return nil, err
		}
		return newRunSource(client, scope, selector), nil
	}}
}

// newHTTPSession builds a session for the principal of id, on its shared
// watch of the Runs; nothing of the session keeps id's token.
func newHTTPSession(base *rest.Config, sources *sharedRunSources, scope toolScope, selector labels.Selector, o *mcpOptions) func(id *identity) (*mcp.Server, sessionBackend, error) {
	return func(id *identity) (*mcp.Server, sessionBackend, error) {
		source, token, release, err := sources.acquire(id)
		if err != nil {
			return nil, nil, err
		}
		s, err := newMCPSession(context.Background(), heldConfig(base, token), source, release, scope, selector, o, nil)
		if err != nil {
			release()
			return nil, nil, err
		}
		return s.server, s, nil
	}
}

func serveMCPHTTP(ctx context.Context, config *rest.Config, scope toolScope, selector labels.Selector, streams genericiooptions.IOStreams, o *mcpOptions) error {
	tokens := &tokenCache{authenticate: selfSubjectReviewer(config), now: time.Now}
	sources := newSharedRunSources(config, scope, selector)
	h := newMCPHTTP(tokens, newHTTPSession(config, sources, scope, selector, o), o, streams.ErrOut)
	h.sawToken = sources.sawToken
	defer h.close()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(MCPPath, h)
	if o.serveMetrics {
		mux.Handle(MetricsPath, h.metrics.handler())
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(streams.ErrOut, "krt mcp: ", 0)}
	scheme := "http"
	if o.tlsCertFile != "" {
		scheme = "https"
	}
	fmt.Fprintf(streams.ErrOut, "krt mcp: serving the Ready function Runs of %s matching %q at %s://%s%s (MCP %s, streamable HTTP)\n",
		scope, selector.String(), scheme, ln.Addr(), MCPPath, MCPProtocolRevision)
	served := make(chan error, 1)
	go func() {
		if o.tlsCertFile != "" {
			served <- server.ServeTLS(ln, o.tlsCertFile, o.tlsKeyFile)
		} else {
			served <- server.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h.close()
	_ = server.Shutdown(shutdown)
	return nil
}
