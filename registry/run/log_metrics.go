package run

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The metrics of kept logs: what the server's limits cut from hand-overs
// and what the orphan sweep took back.
var (
	logDroppedBytes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "kruntimes", Subsystem: "apiserver",
		Name:           "run_log_dropped_bytes_total",
		Help:           "Bytes of handed-over task logs not kept, by the limit that dropped them (NamespaceLimit, RecordLimit).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"limit"})
	logSweptRecords = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "kruntimes", Subsystem: "apiserver",
		Name:           "run_log_swept_records_total",
		Help:           "Kept-log records the sweep deleted because no Run held them any more.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerLogMetricsOnce sync.Once

func registerLogMetrics() {
	registerLogMetricsOnce.Do(func() {
		legacyregistry.MustRegister(logDroppedBytes, logSweptRecords)
	})
}
