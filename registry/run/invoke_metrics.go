package run

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The metrics of runs/invoke, by the code each invocation was answered
// with: the handler sees every answer, including those the router never
// hears of (413, 415, a caller that went away).
var (
	invokeRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "requests_total",
		Help:           "Invocations through runs/invoke, by HTTP status code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"code"})
	invokeDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "duration_seconds",
		Help:           "Time from receiving an invocation to answering it, in this server.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 18),
		StabilityLevel: metrics.ALPHA,
	})
	invokeWaitDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "wait_for_ready_seconds",
		Help:           "Time invocations of a function on its way to Ready (scheduled, registering, relocating) waited for it, of those that waited.",
		Buckets:        metrics.ExponentialBuckets(0.01, 2, 12),
		StabilityLevel: metrics.ALPHA,
	})
	invokeRefused = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "refused_total",
		Help:           "Invocations refused before they were sent (429) because a bound was reached, by reason (TooManyWaiting: as many invocations as may wait for one function on its way to Ready already wait).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	invokeInFlight = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "kruntimes", Subsystem: "invoke",
		Name:           "in_flight",
		Help:           "Invocations this server is handling now.",
		StabilityLevel: metrics.ALPHA,
	})
)

// refusedTooManyWaiting labels invokeRefused: the Run's waiting
// invocations are at InvokeSettings.MaxWaitingPerRun.
const refusedTooManyWaiting = "TooManyWaiting"

var registerInvokeMetricsOnce sync.Once

func registerInvokeMetrics() {
	registerInvokeMetricsOnce.Do(func() {
		legacyregistry.MustRegister(invokeRequests, invokeDuration, invokeWaitDuration, invokeRefused, invokeInFlight)
	})
}
