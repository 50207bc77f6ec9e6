package runtime

import (
	"sync"
	"time"

	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// syncDuration times each reconcile of a Runtime; its only label is the
// outcome, so cardinality stays fixed.
var (
	syncDuration = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Name:           "kruntimes_runtime_controller_sync_duration_seconds",
		Help:           "Time to reconcile one Runtime into its Deployment, RBAC and status, by result (success, error).",
		Buckets:        compbasemetrics.ExponentialBuckets(0.001, 2, 14),
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"result"})

	metricsOnce sync.Once
)

func registerMetrics() {
	metricsOnce.Do(func() { legacyregistry.MustRegister(syncDuration) })
}

func observeSync(err error, d time.Duration) {
	result := "success"
	if err != nil {
		result = "error"
	}
	syncDuration.WithLabelValues(result).Observe(d.Seconds())
}
