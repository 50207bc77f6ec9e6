package entrypoint

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/clock"
)

// AuditAnnotation is the audit annotation that names a request's entry
// point.
const AuditAnnotation = "kruntimes.io/entry-point"

// Entry points, the values of AuditAnnotation.
const (
	// Aggregated is a request kube-apiserver proxied: the front proxy's
	// requestheader identity authenticated it.
	Aggregated = "aggregated"
	// Direct is any other authenticated request: a bearer token or a client
	// certificate presented to kruntimes-apiserver itself.
	Direct = "direct"
)

// Cache lifetimes of the delegated decisions, set explicitly rather than
// left to the generic options' defaults: how long a revoked token or a
// removed RoleBinding keeps working on the direct path.
const (
	// TokenReviewCacheTTL is how long a TokenReview answer is kept (but
	// never past a JWT's exp, which the wrapper checks).
	TokenReviewCacheTTL = 10 * time.Second
	// AuthorizationCacheTTL is how long a SubjectAccessReview's allow and
	// its deny are each kept.
	AuthorizationCacheTTL = 10 * time.Second
	// MaxAuthorizationCacheTTL is the most an operator may set either to.
	MaxAuthorizationCacheTTL = 30 * time.Second
)

// errExpired is what an expired JWT gets, whatever the TokenReview cache says.
var errExpired = errors.New("the bearer token has expired")

// probePaths may be reached without credentials, so kubelet probes work.
var probePaths = []string{"/healthz", "/livez", "/readyz"}

// DirectPolicy says whether the server serves its API to callers that reach
// it directly.
type DirectPolicy bool

const (
	// DirectServed serves direct callers as kube-apiserver's proxied ones.
	DirectServed DirectPolicy = true
	// DirectRefused marks every direct caller's identity (UserExtraKey) so
	// that Gate refuses it everything but the probes and /metrics.
	DirectRefused DirectPolicy = false
)

// UserExtraKey is the key of the user's extra that marks a direct request
// while the direct entry point is off; its value is Direct.
const UserExtraKey = AuditAnnotation

// Authenticator is the wrapped authenticator; build it with New.
type Authenticator struct {
	delegated  authenticator.Request
	frontProxy authenticator.Request
	direct     DirectPolicy
	clock      clock.PassiveClock
}

// New wraps delegated, the authenticator the delegated authentication
// options built. frontProxy is the requestheader configuration those
// options found (AuthenticationInfo.RequestHeaderConfig); nil when there is
// none, and then no request is labelled aggregated. direct says whether
// direct callers are served or only marked for Gate to refuse.
func New(delegated authenticator.Request, frontProxy *authenticatorfactory.RequestHeaderConfig, direct DirectPolicy) *Authenticator {
	a := &Authenticator{delegated: delegated, direct: direct, clock: clock.RealClock{}}
	if frontProxy != nil {
		// As the delegated union builds it, and with the group it adds.
		a.frontProxy = group.NewAuthenticatedGroupAdder(headerrequest.NewDynamicVerifyOptionsSecure(
			frontProxy.CAContentProvider.VerifyOptions,
			frontProxy.AllowedClientNames,
			frontProxy.UsernameHeaders,
			frontProxy.UIDHeaders,
			frontProxy.GroupHeaders,
			frontProxy.ExtraHeaderPrefixes,
		))
	}
	return a
}

// AuthenticateRequest implements authenticator.Request.
func (a *Authenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if a.frontProxy != nil {
		// An error (a certificate not allowed, say) falls through to the
		// delegated union, which tries the front proxy again and reports it.
		if resp, ok, err := a.frontProxy.AuthenticateRequest(req); ok && err == nil {
			audit.AddAuditAnnotation(req.Context(), AuditAnnotation, Aggregated)
			return resp, true, nil
		}
	}
	// Read before the bearer token authenticator removes the header.
	token := bearerToken(req.Header)
	resp, ok, err := a.delegated.AuthenticateRequest(req)
	if !ok || err != nil {
		return resp, ok, err
	}
	if resp.User.GetName() == user.Anonymous && !isProbe(req.URL.Path) {
		// Unauthenticated: the handler chain answers 401.
		return nil, false, nil
	}
	if token != "" && expired(token, a.clock.Now()) {
		return nil, false, errExpired
	}
	audit.AddAuditAnnotation(req.Context(), AuditAnnotation, Direct)
	if a.direct == DirectRefused {
		resp = markDirect(resp)
	}
	return resp, true, nil
}

// markDirect returns resp with its user's extra UserExtraKey set to Direct,
// whatever the token's reviewer said of that key.
func markDirect(resp *authenticator.Response) *authenticator.Response {
	u := resp.User
	extra := make(map[string][]string, len(u.GetExtra())+1)
	for k, v := range u.GetExtra() {
		extra[k] = v
	}
	extra[UserExtraKey] = []string{Direct}
	return &authenticator.Response{
		Audiences: resp.Audiences,
		User:      &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: extra},
	}
}

func isProbe(path string) bool {
	for _, p := range probePaths {
		if pathUnder(path, p) {
			return true
		}
	}
	return false
}

// pathUnder says whether path is p or below it.
func pathUnder(path, p string) bool {
	return path == p || strings.HasPrefix(path, p+"/")
}

// bearerToken returns the token of an Authorization: Bearer header, or "".
func bearerToken(h http.Header) string {
	auth := strings.TrimSpace(h.Get("Authorization"))
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// expired says whether token is a JWT whose exp is at or before now. Opaque
// tokens and JWTs without exp are not expired as far as this check goes
// (TokenReview decides); the signature is not checked, so this can only
// refuse a token TokenReview accepted.
func expired(token string, now time.Time) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return false
	}
	exp, err := claims.Exp.Float64()
	if err != nil {
		return false
	}
	return !now.Before(time.Unix(int64(exp), 0))
}
