package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// tokenTTL bounds how long krt mcp --listen trusts a token the cluster
// authenticated, before asking again.
const tokenTTL = 30 * time.Second

// identity is the caller of one HTTP request: its bearer token, the
// token's SHA-256 (what a session is bound to), and who the cluster says
// it is.
type identity struct {
	token string
	hash  string
	user  string
}

type identityKey struct{}

// tokenAuthenticator asks the cluster who a token is.
type tokenAuthenticator func(ctx context.Context, token string) (user string, err error)

// errUnauthenticated: the cluster does not accept the token.
var errUnauthenticated = errors.New("the cluster does not accept the bearer token")

// selfSubjectReviewer authenticates a token with a SelfSubjectReview made as
// the token against the cluster of base (its server and CA, none of its
// credentials).
func selfSubjectReviewer(base *rest.Config) tokenAuthenticator {
	return func(ctx context.Context, token string) (string, error) {
		kube, err := kubernetes.NewForConfig(bearerConfig(base, token))
		if err != nil {
			return "", err
		}
		review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if apierrors.IsUnauthorized(err) {
			return "", errUnauthenticated
		}
		if err != nil {
			return "", err
		}
		return review.Status.UserInfo.Username, nil
	}
}

// bearerConfig reaches the cluster of base as token: base's server and
// TLS trust, none of base's credentials.
func bearerConfig(base *rest.Config, token string) *rest.Config {
	config := rest.AnonymousClientConfig(base)
	config.BearerToken = token
	return config
}

// tokenCache keeps the cluster's answer for each token (by its hash) for
// tokenTTL.
type tokenCache struct {
	authenticate tokenAuthenticator
	now          func() time.Time

	mu    sync.Mutex
	users map[string]cachedUser
}

type cachedUser struct {
	user string
	at   time.Time
}

func (c *tokenCache) identify(ctx context.Context, token string) (*identity, error) {
	sum := sha256.Sum256([]byte(token))
	hash := hex.EncodeToString(sum[:])
	now := c.now()
	c.mu.Lock()
	cached, ok := c.users[hash]
	c.mu.Unlock()
	if ok && now.Sub(cached.at) < tokenTTL {
		return &identity{token: token, hash: hash, user: cached.user}, nil
	}
	user, err := c.authenticate(ctx, token)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.users == nil {
		c.users = map[string]cachedUser{}
	}
	for h, u := range c.users {
		if now.Sub(u.at) >= tokenTTL {
			delete(c.users, h)
		}
	}
	c.users[hash] = cachedUser{user: user, at: now}
	c.mu.Unlock()
	return &identity{token: token, hash: hash, user: user}, nil
}

// bearerToken is the token of the request's Authorization header.
func bearerToken(r *http.Request) (string, bool) {
	fields := strings.Fields(r.Header.Get("Authorization"))
	if len(fields) != 2 || !strings.EqualFold(fields[0], "Bearer") {
		return "", false
	}
	return fields[1], true
}

func unauthorized(w http.ResponseWriter, message string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="krt mcp"`)
	http.Error(w, message, http.StatusUnauthorized)
}
