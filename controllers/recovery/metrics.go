package recovery

import (
	"sync"

	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Outcomes of a recovery; with the reasons, the only label values of
// kruntimes_recovery_recoveries_total.
const (
	// outcomeRequeued: back to Pending for another attempt.
	outcomeRequeued = "requeued"
	// outcomeFailed: no attempt left, or the Run's timeout passed.
	outcomeFailed = "failed"
	// outcomeCancelled: the user had asked for cancellation.
	outcomeCancelled = "cancelled"
	// outcomeFinalized: a deleting Run's registration-cleanup finalizer was
	// removed, and the Run went.
	outcomeFinalized = "finalized"
)

var (
	recoveries = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Name:           "kruntimes_recovery_recoveries_total",
		Help:           "Runs recovered from a lost Runtime Pod, by what was lost (reason: PodGone, PodDeleting, HeartbeatLost) and outcome (requeued, failed, cancelled, finalized).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"reason", "outcome"})
	fenceDuration = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Name:           "kruntimes_recovery_fence_duration_seconds",
		Help:           "Time from detecting that a Run's Pod is lost to confirming a fence (the Pod gone or deleting), by reason.",
		Buckets:        compbasemetrics.ExponentialBuckets(0.001, 2, 18),
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"reason"})
	recoveryDuration = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Name:           "kruntimes_recovery_duration_seconds",
		Help:           "Time from detecting that a Run's Pod is lost to the Run's recovery (requeued, failed, cancelled or finalized), by reason.",
		Buckets:        compbasemetrics.ExponentialBuckets(0.001, 2, 18),
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"reason"})
	podDeletions = compbasemetrics.NewCounter(&compbasemetrics.CounterOpts{
		Name:           "kruntimes_recovery_pod_deletions_total",
		Help:           "Runtime Pods deleted because their runtimed heartbeat was not renewed for longer than the grace period while they held Runs.",
		StabilityLevel: compbasemetrics.ALPHA,
	})

	metricsOnce sync.Once
)

func registerMetrics() {
	metricsOnce.Do(func() { legacyregistry.MustRegister(recoveries, fenceDuration, recoveryDuration, podDeletions) })
}
