package lifecycle

// Condition types on a Run.
const (
	// ConditionScheduled is True once the Run has been bound to a Runtime Pod.
	ConditionScheduled = "Scheduled"
	// ConditionReady is True only while the owning runtimed holds a live
	// registration for a function Run and accepts invokes.
	ConditionReady = "Ready"
	// ConditionCompleted is True once the Run reached a terminal phase.
	ConditionCompleted = "Completed"
)

// Reasons carried by conditions and terminal phases.
const (
	ReasonScheduling         = "Scheduling"
	ReasonRegistering        = "Registering"
	ReasonFunctionRegistered = "FunctionRegistered"
	ReasonRetrying           = "Retrying"
	ReasonOwnerLost          = "OwnerLost"
	ReasonTerminating        = "Terminating"
	ReasonCancelled          = "Cancelled"
	ReasonIdleTimeout        = "IdleTimeout"
	ReasonTimeout            = "Timeout"
	ReasonExecutionLost      = "ExecutionLost"
	ReasonNonZeroExit        = "NonZeroExit"
	ReasonOutputsInvalid     = "OutputsInvalid"
	ReasonOutputsTooLarge    = "OutputsTooLarge"
	ReasonSucceeded          = "Succeeded"
	ReasonNoCapacity         = "NoCapacity"
	ReasonRuntimeNotFound    = "RuntimeNotFound"
	ReasonScheduled          = "Scheduled"
	ReasonStartFailed        = "StartFailed"
	// ReasonRegistrationFailed: the Runtime Server could not load the
	// function (a syntax error, a missing module, function or script).
	ReasonRegistrationFailed = "RegistrationFailed"
	// ReasonRegistrationLost: a Ready function's registration went away on
	// its Pod (the worker died, the Runtime Server restarted).
	ReasonRegistrationLost = "RegistrationLost"
	// ReasonRelocating: the runtimed of a function's Pod gave the function
	// back because the Pod is shutting down (a graceful deletion: rollout,
	// drain, eviction, scale-down). The function goes back to Pending at
	// the same attempt: a planned disruption spends no attempt.
	ReasonRelocating = "Relocating"
	// ReasonLifetimeExceeded: a function reached spec.timeout from its
	// startTime.
	ReasonLifetimeExceeded = "LifetimeExceeded"
	// ReasonWorkspaceNotRemoved (an Event): what the program left in its
	// workspace could not be removed; the slot is free regardless and
	// runtimed's startup sweep tries again.
	ReasonWorkspaceNotRemoved = "WorkspaceNotRemoved"
	// ReasonLogCut (a Warning Event): an attempt's log was kept cut, at
	// its namespace's limit of kept-log bytes or the storage backend's
	// bound of a record; its message names the limit and its flag.
	ReasonLogCut = "LogCut"
)

// Reasons of a Runtime's Ready condition.
const (
	ReasonPodsReady        = "PodsReady"
	ReasonPodsNotReady     = "PodsNotReady"
	ReasonScaledToZero     = "ScaledToZero"
	ReasonResourceConflict = "ResourceConflict"
)

// AnnotationTemplateHash on a Runtime's Deployment records the hash of the
// Pod template the runtime controller last wrote, so server-side defaulting
// of the stored Deployment never looks like drift.
const AnnotationTemplateHash = "kruntimes.io/template-hash"

// FinalizerRegistrationCleanup keeps a function Run until its owning runtimed
// has unregistered it and released its capacity.
const FinalizerRegistrationCleanup = "kruntimes.io/registration-cleanup"

// LabelRuntime names the Runtime a Runtime Pod (and its Deployment) serves.
const LabelRuntime = "kruntimes.io/runtime"

// Field selectors a Run supports for list and watch.
const (
	FieldSpecRuntime       = "spec.runtime"
	FieldStatusPhase       = "status.phase"
	FieldStatusAssignedPod = "status.assignedPod"
	// FieldStatusAssignedPodUID selects by status.assignedPodUID: runtimed
	// lists and watches its Runs by both, so a Pod re-created under a
	// deleted Pod's name never sees that Pod's Runs.
	FieldStatusAssignedPodUID = "status.assignedPodUID"
)
