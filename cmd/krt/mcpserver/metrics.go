package mcpserver

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsPath is where krt mcp --listen --serve-metrics answers Prometheus.
const MetricsPath = "/metrics"

// Reasons of kruntimes_krt_mcp_requests_refused_total.
const (
	// refusedTooManySessions: the user already holds
	// --max-sessions-per-user sessions (429).
	refusedTooManySessions = "TooManySessions"
	// refusedOrigin: a web page of an Origin not in --allowed-origin (403).
	refusedOrigin = "OriginNotAllowed"
	// refusedUnauthenticated: no bearer token, or one the cluster does
	// not accept (401).
	refusedUnauthenticated = "Unauthenticated"
)

// httpMetrics are the counters of one krt mcp --listen. A registry of its
// own, not the process-wide default: krt is a CLI, and a test runs several
// servers in one process.
type httpMetrics struct {
	registry *prometheus.Registry
	// refused counts requests refused before they reached MCP, by reason
	// (bounded: the constants above; never a user's name).
	refused *prometheus.CounterVec
}

func newHTTPMetrics() *httpMetrics {
	m := &httpMetrics{
		registry: prometheus.NewRegistry(),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kruntimes_krt_mcp_requests_refused_total",
			Help: "Requests krt mcp --listen refused before they reached MCP, by reason (TooManySessions: 429 at --max-sessions-per-user; OriginNotAllowed: 403; Unauthenticated: 401).",
		}, []string{"reason"}),
	}
	m.registry.MustRegister(m.refused)
	// Every reason shows from the start, at 0, so a rate needs no
	// first refusal to exist.
	for _, reason := range []string{refusedTooManySessions, refusedOrigin, refusedUnauthenticated} {
		m.refused.WithLabelValues(reason)
	}
	return m
}

// handler serves the counters in Prometheus' text format.
func (m *httpMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
