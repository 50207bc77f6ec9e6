package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
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
// token's SHA-256, who the cluster says it is, and its principal (what a
// session is bound to and what shares a watch): a digest of the user's
// name, UID and groups, which are what RBAC decides on, so that a
// refreshed token of the same ServiceAccount keeps its sessions.
type identity struct {
	token     string
	hash      string
	user      string
	principal string
}

// tokenAuthenticator asks the cluster who a token is.
type tokenAuthenticator func(ctx context.Context, token string) (authenticationv1.UserInfo, error)

// errUnauthenticated: the cluster does not accept the token.
var errUnauthenticated = errors.New("the cluster does not accept the bearer token")

// selfSubjectReviewer authenticates a token with a SelfSubjectReview made as
// the token against the cluster of base (its server and CA, none of its
// credentials).
func selfSubjectReviewer(base *rest.Config) tokenAuthenticator {
	return func(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
		kube, err := kubernetes.NewForConfig(bearerConfig(base, token))
		if err != nil {
			return authenticationv1.UserInfo{}, err
		}
		review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if apierrors.IsUnauthorized(err) {
			return authenticationv1.UserInfo{}, errUnauthenticated
		}
		if err != nil {
			return authenticationv1.UserInfo{}, err
		}
		return review.Status.UserInfo, nil
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
	user      string
	principal string
	at        time.Time
}

// principalOf digests what RBAC decides on: the user's name, UID and
// groups (not extra, which holds e.g. a ServiceAccount token's own ID).
func principalOf(info authenticationv1.UserInfo) string {
	groups := append([]string(nil), info.Groups...)
	sort.Strings(groups)
	// JSON, so that no name can pass for another name and a group.
	encoded, _ := json.Marshal([]any{info.Username, info.UID, groups})
	sum := sha256.Sum256(encoded)
	return hex.EncodeToString(sum[:])
}

func (c *tokenCache) identify(ctx context.Context, token string) (*identity, error) {
	sum := sha256.Sum256([]byte(token))
	hash := hex.EncodeToString(sum[:])
	now := c.now()
	c.mu.Lock()
	cached, ok := c.users[hash]
	c.mu.Unlock()
	if ok && now.Sub(cached.at) < tokenTTL {
		return &identity{token: token, hash: hash, user: cached.user, principal: cached.principal}, nil
	}
	info, err := c.authenticate(ctx, token)
	if err != nil {
		return nil, err
	}
	user, principal := info.Username, principalOf(info)
	c.mu.Lock()
	if c.users == nil {
		c.users = map[string]cachedUser{}
	}
	for h, u := range c.users {
		if now.Sub(u.at) >= tokenTTL {
			delete(c.users, h)
		}
	}
	c.users[hash] = cachedUser{user: user, principal: principal, at: now}
	c.mu.Unlock()
	return &identity{token: token, hash: hash, user: user, principal: principal}, nil
}

// bearerToken is the token of the request's Authorization header.
func bearerToken(r *http.Request) (string, bool) {
	return bearerTokenOf(r.Header)
}

func bearerTokenOf(header http.Header) (string, bool) {
	fields := strings.Fields(header.Get("Authorization"))
	if len(fields) != 2 || !strings.EqualFold(fields[0], "Bearer") {
		return "", false
	}
	return fields[1], true
}

func unauthorized(w http.ResponseWriter, message string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="krt mcp"`)
	http.Error(w, message, http.StatusUnauthorized)
}
