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
package entrypoint
