package invoke

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	requestsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "requests_total",
		Help:           "Invocations through runs/invoke, by HTTP status code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"code"})
	requestDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "duration_seconds",
		Help:           "Time from receiving an invocation to answering it, in this server.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 18),
		StabilityLevel: metrics.ALPHA,
	})
	inFlight = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "in_flight",
		Help:           "Invocations this server is handling now.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requestsTotal, requestDuration, inFlight)
	})
}
