package options

import (
	"fmt"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"kruntimes.io/kruntimes/apiserver/entrypoint"
)

// setDelegationCaches sets the lifetimes of the delegated TokenReview and
// SubjectAccessReview caches explicitly, rather than inheriting whatever
// the generic options default to: they are how long a revoked token or a
// removed RoleBinding keeps working on the direct entry point. The
// --authentication-token-webhook-cache-ttl and
// --authorization-webhook-cache-{authorized,unauthorized}-ttl flags still
// override them.
func setDelegationCaches(r *genericoptions.RecommendedOptions) {
	r.Authentication.CacheTTL = entrypoint.TokenReviewCacheTTL
	r.Authorization.AllowCacheTTL = entrypoint.AuthorizationCacheTTL
	r.Authorization.DenyCacheTTL = entrypoint.AuthorizationCacheTTL
}

// validateDelegationCaches bounds the authorization cache lifetimes, so a
// removed RoleBinding stops working on the direct entry point within
// entrypoint.MaxAuthorizationCacheTTL.
func validateDelegationCaches(r *genericoptions.RecommendedOptions) []error {
	if r.Authorization == nil {
		return nil
	}
	var errs []error
	for _, c := range []struct {
		flag string
		ttl  time.Duration
	}{
		{"--authorization-webhook-cache-authorized-ttl", r.Authorization.AllowCacheTTL},
		{"--authorization-webhook-cache-unauthorized-ttl", r.Authorization.DenyCacheTTL},
	} {
		if c.ttl > entrypoint.MaxAuthorizationCacheTTL {
			errs = append(errs, fmt.Errorf("%s must be at most %s: a decision is kept that long after RBAC changes, got %s",
				c.flag, entrypoint.MaxAuthorizationCacheTTL, c.ttl))
		}
	}
	return errs
}

// wrapAuthenticator puts the entrypoint wrapper around the authenticator
// the delegated options built (it refuses expired JWTs, anonymous requests
// off the probes, labels audit events with their entry point, and marks
// direct callers for entrypoint.Gate when direct is DirectRefused). In
// standalone mode there is none to wrap.
func wrapAuthenticator(c *genericapiserver.RecommendedConfig, direct entrypoint.DirectPolicy) {
	if c.Authentication.Authenticator == nil {
		return
	}
	c.Authentication.Authenticator = entrypoint.New(c.Authentication.Authenticator, c.Authentication.RequestHeaderConfig, direct)
}
