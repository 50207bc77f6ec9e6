package invocation

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds of one invocation. The apiserver checks them where the request
// enters; runtimed and the Runtime Server check them again.
const (
	// MaxIDBytes bounds an invocation ID, and every other ID a Runtime
	// Server is handed (a Run UID, a task ID, an error type).
	MaxIDBytes = 128
	// MaxInputBytes bounds the body of an invoke request.
	MaxInputBytes = 1 << 20
	// MaxInputDepth bounds how deeply an invoke request's JSON nests
	// arrays and objects: an interpreter parses JSON recursively (Python
	// within its recursion limit of 1,000 frames), so a deeper input would
	// fail there, after dispatch, rather than here with a clear answer.
	MaxInputDepth = 512
	// MaxOutputBytes bounds a handler's output.
	MaxOutputBytes = 1 << 20
)

// DefaultMaxTimeout bounds one invocation whatever the request asks: below
// kube-apiserver's 60 s request timeout for aggregated APIs.
const DefaultMaxTimeout = 55 * time.Second

// ContentTypeJSON is the content type of invoke inputs and outputs.
const ContentTypeJSON = "application/json"

// Headers of the HTTP invoke protocol.
const (
	// HeaderID carries the invocation ID: sent by the caller or minted by
	// the apiserver, always returned.
	HeaderID = "X-Kruntime-Invocation-ID"
	// HeaderRunUID is the UID precondition, as ?uid= is.
	HeaderRunUID = "X-Kruntime-Run-UID"
	// HeaderFunctionError names the type of the error the handler raised,
	// on a 200.
	HeaderFunctionError = "X-Kruntime-Function-Error"
	// HeaderDeduplicated is "true" on the answer to a repeat of a
	// caller-sent invocation ID: the recorded outcome of the first, the
	// handler not run again.
	HeaderDeduplicated = "X-Kruntime-Deduplicated"
	// HeaderServerTiming breaks the answer's time down by hop.
	HeaderServerTiming = "Server-Timing"
)

// MetadataDeduplicated is the gRPC response header by which runtimed marks
// a replayed outcome, an answer or an error; its value is "true".
const MetadataDeduplicated = "x-kruntime-deduplicated"

// MetadataRuntimedNanos is the gRPC response header by which runtimed says
// how long it spent on a call that ended in an error (an answer carries it
// as runtimed_nanos): decimal nanoseconds.
const MetadataRuntimedNanos = "x-kruntime-runtimed-nanos"

// CauseOutcomeEvicted is the cause type of the 409 that answers a repeat of
// a caller-sent invocation ID whose recorded outcome runtimed evicted
// within its window: the first may have run, its outcome is no longer
// known, and this repeat did not run. Send a new ID to run it again.
const CauseOutcomeEvicted = "InvocationOutcomeEvicted"

// ClientCommonName is the CommonName of the only client certificate
// runtimed accepts: the apiserver's, issued by the kruntimes CA for client
// authentication.
const ClientCommonName = "kruntimes-apiserver"

// MetricsClientCommonName is the CommonName of the client certificate
// runtimed's /metrics accepts: a scraper's, issued by the kruntimes CA.
// It is not ClientCommonName, so a scraper cannot invoke.
const MetricsClientCommonName = "kruntimes-metrics"

// MetricsServerName is a name every runtimed serving certificate is also
// made for, so that one scrape configuration verifies the runtimeds of all
// Runtimes. Invocations verify ServerName, which is per Runtime.
const MetricsServerName = "metrics.runtimed.kruntimes.io"

// ServerName is the name the serving certificate of the runtimed of a
// Runtime is made for, and what the apiserver verifies when it dials one of
// its Pods: a certificate of another Runtime does not pass.
func ServerName(namespace, runtime string) string {
	return runtime + "." + namespace + ".runtimed.kruntimes.io"
}

// CheckID says why id cannot be an invocation ID, or nil when it can: it
// has 1..MaxIDBytes bytes of UTF-8 and no control character, so it travels
// in a header, a protobuf string and a log line unchanged.
func CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("an invocation ID must not be empty")
	case len(id) > MaxIDBytes:
		return fmt.Errorf("an invocation ID has at most %d bytes; this one has %d", MaxIDBytes, len(id))
	case !utf8.ValidString(id):
		return fmt.Errorf("an invocation ID must be UTF-8")
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("an invocation ID must not hold a control character (%U at byte %d)", r, i)
		}
	}
	return nil
}

// Bases of the two entry points of runs/invoke inside a cluster.
const (
	// DefaultAggregatedBase is kube-apiserver as Pods reach it; the
	// aggregator proxies runs/invoke to kruntimes-apiserver.
	DefaultAggregatedBase = "https://kubernetes.default.svc"
	// DefaultDirectBase is kruntimes-apiserver's own Service.
	DefaultDirectBase = "https://kruntimes-apiserver.kruntimes-system.svc"
)

// EndpointURL is the invoke URL of a function Run under base (scheme and
// authority, no path): its runs/invoke subresource, with ?uid= so a Run
// created again under the same name is never addressed by it. The server
// writes it into status.endpoint; runtimed proposes it.
func EndpointURL(base, namespace, name, uid string) string {
	return strings.TrimSuffix(base, "/") + "/apis/kruntimes.io/v1alpha1/namespaces/" + url.PathEscape(namespace) +
		"/runs/" + url.PathEscape(name) + "/invoke?uid=" + url.QueryEscape(uid)
}

// NestingDepth is how deeply the valid JSON b nests arrays and objects: 0
// for a scalar, 1 for a flat array or object.
func NestingDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
