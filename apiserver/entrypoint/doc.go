// Package entrypoint wraps kruntimes-apiserver's delegated authenticator so
// a request reaching the server directly (its Service, a bearer token) is
// held to the same bar as one kube-apiserver proxied, and every audit event
// says which way the request came in.
//
// The wrapper adds three things to k8s.io/apiserver's delegated
// authentication (authenticatorfactory.DelegatingAuthenticatorConfig):
//
//   - A JWT whose exp has passed is refused even while the TokenReview cache
//     still holds its earlier answer: the cache (k8s.io/apiserver v0.37.2
//     pkg/authentication/token/cache) keeps a successful review for its
//     TTL whatever the token's expiry. The wrapper reads exp from the
//     token's payload without verifying it, so it can only refuse, never
//     accept, a token.
//   - Every authenticated request carries the audit annotation
//     kruntimes.io/entry-point: "aggregated" when the front proxy's
//     requestheader identity (kube-apiserver's aggregator) authenticated it,
//     "direct" otherwise.
//   - A request without credentials gets 401 except on the probes
//     (/healthz, /livez, /readyz and their checks): the generic options
//     turn anonymous authentication on whatever they are told.
//
// With the direct entry point off (--direct-entry-point=false), a direct
// caller is still authenticated, so its refusal is audited under its name,
// but its identity is marked (UserExtraKey) and Gate, the first of the
// server's authorizers, refuses it with 403 everything but the probes and
// /metrics. A 403 that says why beats a 401 that makes a valid token look
// wrong.
package entrypoint
