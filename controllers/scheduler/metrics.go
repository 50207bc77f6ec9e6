package scheduler

import (
	"sync"

	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Results of one scheduling attempt; the only label values of
// kruntimes_scheduler_attempts_total.
const (
	resultScheduled       = "scheduled"
	resultNoCapacity      = "no_capacity"
	resultRuntimeNotFound = "runtime_not_found"
	resultConflict        = "conflict"
	resultError           = "error"
	resultCancelled       = "cancelled"
)

// The queues of kruntimes_scheduler_queue_depth.
const (
	queueActive = "active"
	queueParked = "parked"
	queueNotes  = "notes"
)

// missingRuntime is the runtime label of Runs whose Runtime does not exist.
const missingRuntime = "<missing>"

var (
	attempts = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Name:           "kruntimes_scheduler_attempts_total",
		Help:           "Scheduling attempts of Pending Runs by result (scheduled, no_capacity, runtime_not_found, conflict, error, cancelled).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"result"})
	bindingDuration = compbasemetrics.NewHistogram(&compbasemetrics.HistogramOpts{
		Name:           "kruntimes_scheduler_binding_duration_seconds",
		Help:           "Latency of the status update that binds a Run to a Runtime Pod.",
		Buckets:        compbasemetrics.ExponentialBuckets(0.0005, 2, 14),
		StabilityLevel: compbasemetrics.ALPHA,
	})
	pendingDuration = compbasemetrics.NewHistogram(&compbasemetrics.HistogramOpts{
		Name:           "kruntimes_scheduler_pending_duration_seconds",
		Help:           "Time from a Run's creation to its binding, for first attempts.",
		Buckets:        compbasemetrics.ExponentialBuckets(0.001, 2, 18),
		StabilityLevel: compbasemetrics.ALPHA,
	})

	pendingRuns = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Name: "kruntimes_scheduler_pending_runs",
		Help: "Pending Runs the scheduler is placing or has parked, by namespace and Runtime. " +
			"Runs naming a Runtime that does not exist are counted under runtime=\"<missing>\", " +
			"so Runs cannot add series; Runtime names are chosen by those who may create Runtimes.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"namespace", "runtime"})
	queueDepth = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Name: "kruntimes_scheduler_queue_depth",
		Help: "Runs in each of the scheduler's queues: active (to be tried, namespaces in turn), " +
			"parked (waiting for an event that can give their Runtime a slot), notes (Pending notes to write).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"queue"})

	metricsOnce sync.Once
)

func registerMetrics() {
	metricsOnce.Do(func() {
		legacyregistry.MustRegister(attempts, bindingDuration, pendingDuration, pendingRuns, queueDepth)
	})
}

func observeAttempt(result string) { attempts.WithLabelValues(result).Inc() }
