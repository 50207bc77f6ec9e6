package entrypoint

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// reviewer is a TokenReview API as kube-apiserver serves it: the tokens
// it knows are authenticated, whatever their exp (the review happened
// before).
type reviewer struct {
	known   map[string]string // token → user name
	reviews atomic.Int32
}

func (r *reviewer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
		http.NotFound(w, req)
		return
	}
	r.reviews.Add(1)
	var review authenticationv1.TokenReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if name, ok := r.known[review.Spec.Token]; ok {
		review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: name}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// jwt returns an unsigned token with the claims given (TokenReview is what
// checks signatures; the wrapper reads exp only).
func jwt(t testing.TB, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(payload) + "." + enc([]byte("signature"))
}

// frontProxyPKI returns a requestheader configuration over a fresh CA and a
// client certificate for the front proxy that CA signed.
func frontProxyPKI(t testing.TB) (*authenticatorfactory.RequestHeaderConfig, *x509.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "front-proxy-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "front-proxy-client"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	caContent, err := dynamiccertificates.NewStaticCAContent("front-proxy", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	if err != nil {
		t.Fatal(err)
	}
	return &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
		CAContentProvider:   caContent,
		AllowedClientNames:  headerrequest.StaticStringSlice{"front-proxy-client"},
	}, cert
}

// newAuthenticator builds the real delegated authenticator (union,
// TokenReview webhook and its cache, requestheader, anonymous on, as the
// generic options build it) against r over HTTP, and wraps it.
func newAuthenticator(t testing.TB, r *reviewer) (*Authenticator, *testingclock.FakeClock, *x509.Certificate) {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	frontProxy, proxyCert := frontProxyPKI(t)
	backoff := wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1, Steps: 1}
	delegated, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: true},
		CacheTTL:                 TokenReviewCacheTTL,
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: 5 * time.Second,
		WebhookRetryBackoff:      &backoff,
		RequestHeaderConfig:      frontProxy,
	}.New()
	if err != nil {
		t.Fatal(err)
	}
	a := New(delegated, frontProxy, DirectServed)
	clock := testingclock.NewFakeClock(time.Now())
	a.clock = clock
	return a, clock, proxyCert
}

type outcome struct {
	resp       *authenticator.Response
	ok         bool
	err        error
	entryPoint string
}

func authenticate(a *Authenticator, req *http.Request) outcome {
	ctx := audit.WithAuditContext(req.Context())
	req = req.WithContext(ctx)
	resp, ok, err := a.AuthenticateRequest(req)
	return outcome{resp, ok, err, audit.AuditContextFrom(ctx).GetEventAnnotations()[AuditAnnotation]}
}

func withToken(path, token string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

const invokePath = "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/fn/invoke"

func TestTokens(t *testing.T) {
	now := time.Now()
	live := jwt(t, map[string]any{"sub": "live", "exp": now.Add(time.Hour).Unix()})
	noExp := jwt(t, map[string]any{"sub": "no-exp"})
	r := &reviewer{known: map[string]string{live: "live", noExp: "no-exp", "opaque-token": "opaque"}}
	a, _, _ := newAuthenticator(t, r)

	for token, name := range r.known {
		got := authenticate(a, withToken(invokePath, token))
		if !got.ok || got.err != nil || got.resp.User.GetName() != name {
			t.Errorf("token of %s: ok=%v err=%v, want authenticated", name, got.ok, got.err)
			continue
		}
		if got.entryPoint != Direct {
			t.Errorf("token of %s: entry point %q, want %q", name, got.entryPoint, Direct)
		}
		if !slices.Contains(got.resp.User.GetGroups(), user.AllAuthenticated) {
			t.Errorf("token of %s: groups %v lack %s", name, got.resp.User.GetGroups(), user.AllAuthenticated)
		}
	}
	if got := authenticate(a, withToken(invokePath, "unknown")); got.ok {
		t.Errorf("a token TokenReview refuses was authenticated as %q", got.resp.User.GetName())
	}
}

// TestExpiredTokenStillCached shows the TokenReview cache answering for a
// token past its exp (no second review), and the wrapper refusing it.
func TestExpiredTokenStillCached(t *testing.T) {
	start := time.Now()
	token := jwt(t, map[string]any{"sub": "short", "exp": start.Add(2 * time.Second).Unix()})
	r := &reviewer{known: map[string]string{token: "short"}}
	a, clock, _ := newAuthenticator(t, r)
	clock.SetTime(start)

	if got := authenticate(a, withToken(invokePath, token)); !got.ok || got.err != nil {
		t.Fatalf("live token: ok=%v err=%v", got.ok, got.err)
	}
	clock.SetTime(start.Add(3 * time.Second)) // past exp, within the cache TTL
	got := authenticate(a, withToken(invokePath, token))
	if got.ok || got.err == nil {
		t.Fatalf("expired token: ok=%v err=%v, want refused with an error", got.ok, got.err)
	}
	if n := r.reviews.Load(); n != 1 {
		t.Errorf("%d TokenReviews, want 1: the second answer should have come from the cache", n)
	}
	if got.entryPoint != "" {
		t.Errorf("a refused request was labelled %q", got.entryPoint)
	}
}

func TestExpired(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name  string
		token string
		want  bool
	}{
		{"exp passed", jwt(t, map[string]any{"exp": now.Unix() - 1}), true},
		{"exp now", jwt(t, map[string]any{"exp": now.Unix()}), true},
		{"exp ahead", jwt(t, map[string]any{"exp": now.Unix() + 1}), false},
		{"exp as a float", jwt(t, map[string]any{"exp": float64(now.Unix()) - 0.5}), true},
		{"no exp", jwt(t, map[string]any{"sub": "x"}), false},
		{"exp not a number", jwt(t, map[string]any{"exp": "soon"}), false},
		{"opaque", "abcdef.0123456789abcdef", false},
		{"three parts, not base64", "a.b!.c", false},
		{"payload not JSON", "a." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + ".c", false},
	} {
		if got := expired(tc.token, now); got != tc.want {
			t.Errorf("%s: expired=%v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFrontProxyIsAggregated(t *testing.T) {
	a, _, proxyCert := newAuthenticator(t, &reviewer{})
	req := httptest.NewRequest(http.MethodPost, invokePath, nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{proxyCert}}
	req.Header.Set("X-Remote-User", "alice")
	req.Header.Set("X-Remote-Group", "devs")
	got := authenticate(a, req)
	if !got.ok || got.err != nil || got.resp.User.GetName() != "alice" {
		t.Fatalf("front proxy request: ok=%v err=%v", got.ok, got.err)
	}
	if got.entryPoint != Aggregated {
		t.Errorf("entry point %q, want %q", got.entryPoint, Aggregated)
	}
	if groups := got.resp.User.GetGroups(); !slices.Contains(groups, "devs") || !slices.Contains(groups, user.AllAuthenticated) {
		t.Errorf("groups %v, want devs and %s", groups, user.AllAuthenticated)
	}

	// The same headers without the front proxy's certificate are not an
	// identity: no credentials, so 401.
	forged := httptest.NewRequest(http.MethodPost, invokePath, nil)
	forged.Header.Set("X-Remote-User", "alice")
	if got := authenticate(a, forged); got.ok {
		t.Errorf("requestheader headers without the proxy's certificate authenticated %q", got.resp.User.GetName())
	}
}

func TestAnonymousOnlyOnProbes(t *testing.T) {
	a, _, _ := newAuthenticator(t, &reviewer{})
	for path, want := range map[string]bool{
		"/healthz":      true,
		"/livez":        true,
		"/readyz":       true,
		"/readyz/ping":  true,
		"/healthz/etcd": true,
		"/healthzz":     false,
		"/":             false,
		"/apis":         false,
		"/metrics":      false,
		"/openapi/v2":   false,
		invokePath:      false,
	} {
		got := authenticate(a, httptest.NewRequest(http.MethodGet, path, nil))
		if got.ok != want || got.err != nil {
			t.Errorf("%s without credentials: ok=%v err=%v, want ok=%v", path, got.ok, got.err, want)
			continue
		}
		if want && got.resp.User.GetName() != user.Anonymous {
			t.Errorf("%s: user %q, want %q", path, got.resp.User.GetName(), user.Anonymous)
		}
	}
}

// BenchmarkAuthenticatorOverhead: a cached bearer token through the
// delegated authenticator alone and through the wrapper (front proxy
// check, exp parse, audit annotation).
func BenchmarkAuthenticatorOverhead(b *testing.B) {
	token := jwt(b, map[string]any{"sub": "bench", "exp": time.Now().Add(time.Hour).Unix()})
	a, _, _ := newAuthenticator(b, &reviewer{known: map[string]string{token: "bench"}})
	a.clock = clock.RealClock{}
	for name, authn := range map[string]authenticator.Request{"delegated": a.delegated, "wrapped": a} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				req := withToken(invokePath, token)
				req = req.WithContext(audit.WithAuditContext(req.Context()))
				if _, ok, err := authn.AuthenticateRequest(req); !ok || err != nil {
					b.Fatalf("ok=%v err=%v", ok, err)
				}
			}
		})
	}
}

// TestDirectRefused: with the direct entry point off, a direct caller is
// still authenticated (so its request is audited with its name) but marked,
// and Gate refuses it everything but the probes and /metrics; a request
// kube-apiserver proxied is neither marked nor refused.
func TestDirectRefused(t *testing.T) {
	token := jwt(t, map[string]any{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()})
	a, _, proxyCert := newAuthenticator(t, &reviewer{known: map[string]string{token: "bob"}})
	a.direct = DirectRefused

	direct := authenticate(a, withToken(invokePath, token))
	if !direct.ok || direct.err != nil || direct.resp.User.GetName() != "bob" {
		t.Fatalf("direct request with a valid token: ok=%v err=%v", direct.ok, direct.err)
	}
	if direct.entryPoint != Direct {
		t.Errorf("entry point %q, want %q", direct.entryPoint, Direct)
	}
	if got := direct.resp.User.GetExtra()[UserExtraKey]; !slices.Equal(got, []string{Direct}) {
		t.Errorf("extra %s = %v, want [%s]", UserExtraKey, got, Direct)
	}

	proxied := httptest.NewRequest(http.MethodPost, invokePath, nil)
	proxied.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{proxyCert}}
	proxied.Header.Set("X-Remote-User", "alice")
	aggregated := authenticate(a, proxied)
	if !aggregated.ok || aggregated.err != nil {
		t.Fatalf("front proxy request: ok=%v err=%v", aggregated.ok, aggregated.err)
	}
	if _, marked := aggregated.resp.User.GetExtra()[UserExtraKey]; marked {
		t.Errorf("a proxied request is marked direct: %v", aggregated.resp.User.GetExtra())
	}

	served, _, _ := newAuthenticator(t, &reviewer{known: map[string]string{token: "bob"}})
	if got := authenticate(served, withToken(invokePath, token)); len(got.resp.User.GetExtra()[UserExtraKey]) != 0 {
		t.Errorf("with the direct entry point served, a direct caller is marked: %v", got.resp.User.GetExtra())
	}

	for _, tc := range []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"invoke, direct", authorizer.AttributesRecord{User: direct.resp.User, ResourceRequest: true, APIGroup: "kruntimes.io", Resource: "runs", Subresource: "invoke", Verb: "create"}, authorizer.DecisionDeny},
		{"list runs, direct", authorizer.AttributesRecord{User: direct.resp.User, ResourceRequest: true, APIGroup: "kruntimes.io", Resource: "runs", Verb: "list"}, authorizer.DecisionDeny},
		{"discovery, direct", authorizer.AttributesRecord{User: direct.resp.User, Path: "/apis/kruntimes.io/v1alpha1", Verb: "get"}, authorizer.DecisionDeny},
		{"/metrics, direct", authorizer.AttributesRecord{User: direct.resp.User, Path: "/metrics", Verb: "get"}, authorizer.DecisionNoOpinion},
		{"/readyz/ping, direct", authorizer.AttributesRecord{User: direct.resp.User, Path: "/readyz/ping", Verb: "get"}, authorizer.DecisionNoOpinion},
		{"/metricsx, direct", authorizer.AttributesRecord{User: direct.resp.User, Path: "/metricsx", Verb: "get"}, authorizer.DecisionDeny},
		{"invoke, aggregated", authorizer.AttributesRecord{User: aggregated.resp.User, ResourceRequest: true, APIGroup: "kruntimes.io", Resource: "runs", Subresource: "invoke", Verb: "create"}, authorizer.DecisionNoOpinion},
	} {
		decision, reason, err := Gate{}.Authorize(context.Background(), tc.attrs)
		if err != nil || decision != tc.want {
			t.Errorf("%s: decision %v (%q, %v), want %v", tc.name, decision, reason, err, tc.want)
		}
		if decision == authorizer.DecisionDeny && !strings.Contains(reason, "--direct-entry-point=false") {
			t.Errorf("%s: the reason %q does not say why", tc.name, reason)
		}
	}
}
