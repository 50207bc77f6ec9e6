package metrics

import (
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"kruntimes.io/kruntimes/apis/lifecycle"
)

const (
	namespace = "kruntimes"
	subsystem = "runtimed"
)

var (
	// Executions counts finished executions by the phase they led to
	// (a terminal phase, or Pending for a retry) and a kruntimes reason;
	// label it with ReasonLabel.
	Executions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "executions_total",
		Help:           "Task executions finished, by resulting Run phase (Pending means retried) and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"phase", "reason"})

	// ExecutionDuration is the time from claim to the terminal status.
	ExecutionDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "execution_duration_seconds",
		Help:           "Time from claiming a task Run to recording its outcome, by resulting phase.",
		Buckets:        metrics.ExponentialBuckets(0.01, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"phase"})

	// ClaimLatency is the time from status.scheduledTime to the claim.
	ClaimLatency = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "claim_latency_seconds",
		Help:           "Time from a Run's scheduledTime to runtimed claiming it.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 16),
		StabilityLevel: metrics.ALPHA,
	})

	// SlotsUsed is the number of this Pod's slots held, by Run mode.
	SlotsUsed = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "slots_used",
		Help:           "Slots of this Pod's capacity held by Runs, by mode (Task, Function); at most the capacity.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"mode"})

	// Capacity is --capacity.
	Capacity = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "capacity",
		Help:           "Runs this runtimed holds at once (--capacity).",
		StabilityLevel: metrics.ALPHA,
	})

	// Registrations is the number of function Runs this Pod holds.
	Registrations = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "registrations",
		Help:           "Function Runs this runtimed holds: registering, Ready, or being released.",
		StabilityLevel: metrics.ALPHA,
	})
	// RegistrationDuration is the time RegisterFunction took, by result.
	RegistrationDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "registration_duration_seconds",
		Help:           "Time one RegisterFunction call took on the Runtime Server, by result (ready, failed).",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	// Invocations counts the invocations runtimed served, by gRPC code.
	Invocations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "invocations_total",
		Help:           "Invocations the apiserver sent to this runtimed, by the gRPC code of the answer.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"code"})
	// InvocationsDeduplicated counts invocations answered with the recorded
	// outcome of an earlier one with the same caller-sent ID.
	InvocationsDeduplicated = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "invocations_deduplicated_total",
		Help:           "Invocations answered with the recorded outcome of an earlier invocation with the same caller-sent ID, without running the handler.",
		StabilityLevel: metrics.ALPHA,
	})
	// InvocationsRefused counts invocations refused before they started
	// because a bound on what waits was reached, by reason
	// (ReasonTooManyWaiters).
	InvocationsRefused = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "invocations_refused_total",
		Help:           "Invocations refused before they started (429 to the caller) because a bound was reached, by reason (TooManyWaiters: as many repeats of one invocation ID as may wait for the one in flight already wait).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	// StatusUpdates counts Run status writes by result: ok, conflict, error.
	StatusUpdates = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "status_updates_total",
		Help:           "Run status updates, by result (ok, conflict, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// HeartbeatRenewals counts Lease renewals by result: ok, error.
	HeartbeatRenewals = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "heartbeat_renewals_total",
		Help:           "Heartbeat Lease renewals, by result (ok, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// RuntimeServerErrors counts failed Runtime Server calls by RPC and code.
	RuntimeServerErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name:           "runtime_server_errors_total",
		Help:           "Failed calls to the Runtime Server, by RPC and gRPC code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"rpc", "code"})
)

// reasonLabels are the reasons that may label a metric: kruntimes' own. A
// custom Runtime Server may report any reason, and a label per value would
// grow the series without bound.
var reasonLabels = sets.New(
	lifecycle.ReasonSucceeded, lifecycle.ReasonNonZeroExit, lifecycle.ReasonStartFailed, lifecycle.ReasonTimeout,
	lifecycle.ReasonCancelled, lifecycle.ReasonExecutionLost, lifecycle.ReasonOutputsInvalid, lifecycle.ReasonOutputsTooLarge,
)

// ReasonTooManyWaiters labels an invocation refused because as many
// repeats of its invocation ID as may wait already wait for it.
const ReasonTooManyWaiters = "TooManyWaiters"

// ReasonOther labels every reason that is not one of kruntimes' own.
const ReasonOther = "Other"

// ReasonLabel returns reason when kruntimes defines it, else ReasonOther.
func ReasonLabel(reason string) string {
	if reasonLabels.Has(reason) {
		return reason
	}
	return ReasonOther
}

var registerOnce sync.Once

// Register registers every metric in the legacy registry; calling it again
// does nothing.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(Executions, ExecutionDuration, ClaimLatency, SlotsUsed, Registrations, RegistrationDuration, Invocations,
			InvocationsDeduplicated, InvocationsRefused, Capacity, StatusUpdates, HeartbeatRenewals, RuntimeServerErrors)
	})
}
