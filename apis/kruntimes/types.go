package kruntimes

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/lifecycle"
)

// The internal (hub) types mirror v1alpha1; see that package for the
// field documentation users read through kubectl explain.

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Run is a one-shot task or a long-lived function executed on a warm Runtime Pod.
type Run struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says what to run and how. Everything but cancelRequested and
	// ttlSecondsAfterFinished is immutable after create.
	Spec RunSpec `json:"spec"`
	// Status is the observed lifecycle of the Run, written by kruntimes.
	// +optional
	Status RunStatus `json:"status,omitempty"`
}

// RunSpec is the immutable description of a Run.
type RunSpec struct {
	// Runtime is the name of a Runtime in the Run's namespace whose Pods execute it.
	Runtime string `json:"runtime"`
	// Source is the code the Run executes.
	// +optional
	Source RunSource `json:"source,omitempty"`
	// Mode selects a one-shot task or a long-lived function. Exactly one of
	// task and function is set.
	Mode RunMode `json:"mode"`
	// Env is passed to the task or function, at most 256 entries.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []EnvVar `json:"env,omitempty"`
	// Timeout is the maximum lifetime of the reservation, counted from
	// status.startTime. A Run past it ends as Timeout. At most 168h.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// RetryPolicy says how often and when a failed attempt is retried.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`
	// CancelRequested asks kruntimes to cancel the Run. It may only go from
	// false to true.
	// +optional
	CancelRequested bool `json:"cancelRequested,omitempty"`
	// TTLSecondsAfterFinished deletes the Run this many seconds after it
	// reached a terminal phase, at most 31536000 (365 days). Unset keeps it
	// forever. Mutable.
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// RunSource is the code of a Run.
type RunSource struct {
	// Inline is the source text itself, at most 256 KiB.
	// +optional
	Inline string `json:"inline,omitempty"`
	// InlinePath is the relative, clean file name the inline source is
	// written to in the Run's workspace. Required for function Runs with
	// inline source, so the handler can name it.
	// +optional
	InlinePath string `json:"inlinePath,omitempty"`
}

// RunMode holds exactly one of task or function.
type RunMode struct {
	// Task executes once and records its outcome.
	// +optional
	Task *TaskMode `json:"task,omitempty"`
	// Function registers the code on a warm Pod, becomes Ready, and is then
	// invoked many times through the runs/invoke subresource.
	// +optional
	Function *FunctionMode `json:"function,omitempty"`
}

// TaskMode runs a program once.
type TaskMode struct {
	// Entrypoint is the program to execute, relative to the workspace or
	// absolute, at most 4096 bytes. Defaults to running the inline source
	// as a script.
	// +optional
	Entrypoint string `json:"entrypoint,omitempty"`
	// Args are passed to the entrypoint: at most 256, each at most 32 KiB,
	// 256 KiB in all.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
}

// FunctionMode registers a handler that serves invocations.
type FunctionMode struct {
	// Handler names the function: "module.function" for Python, a script
	// path under the workspace for bash.
	Handler string `json:"handler"`
	// IdleTimeoutSeconds ends the Run as Timeout (reason IdleTimeout) after
	// this long without an invocation, at most 604800 (7 days). Unset never
	// idles out.
	// +optional
	IdleTimeoutSeconds *int32 `json:"idleTimeoutSeconds,omitempty"`
	// Description says what the function does, at most 1 KiB.
	// +optional
	Description string `json:"description,omitempty"`
	// Schema declares what the function takes and returns.
	// +optional
	Schema *FunctionSchema `json:"schema,omitempty"`
}

// FunctionSchema holds the JSON Schemas (OpenAPI v3 subset, as CRDs) of a
// function's input and output.
type FunctionSchema struct {
	// Input is validated against every invocation body before dispatch.
	// +optional
	Input *runtime.RawExtension `json:"input,omitempty"`
	// Output is published for clients; the server does not check outputs.
	// +optional
	Output *runtime.RawExtension `json:"output,omitempty"`
}

// EnvVar is one environment variable, written in the Run or read from a
// Secret when the attempt starts.
type EnvVar struct {
	// Name of the variable, a C identifier.
	Name string `json:"name"`
	// Value of the variable; empty when valueFrom is set.
	// +optional
	Value string `json:"value,omitempty"`
	// ValueFrom reads the value from a Secret of the Run's namespace.
	// +optional
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource says where an environment variable's value comes from.
type EnvVarSource struct {
	// SecretKeyRef selects a key of a Secret in the Run's namespace.
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// SecretKeySelector selects a key of a Secret in the Run's namespace.
type SecretKeySelector struct {
	// Name of the Secret.
	Name string `json:"name"`
	// Key of the Secret's data.
	Key string `json:"key"`
	// Optional leaves the variable unset when the Secret or key is missing.
	// +optional
	Optional *bool `json:"optional,omitempty"`
}

// RetryPolicy bounds the attempts of a Run.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first, 1 to 100.
	// Defaults to 1 (no retry).
	// +optional
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
	// Backoff spaces the attempts.
	// +optional
	Backoff *RetryBackoff `json:"backoff,omitempty"`
	// RetryableReasons limits retries to failures with one of these reasons.
	// Empty retries every retryable failure.
	// +optional
	// +listType=set
	RetryableReasons []string `json:"retryableReasons,omitempty"`
}

// RetryBackoff is an exponential backoff with a cap.
type RetryBackoff struct {
	// Initial is the delay before the second attempt, at most 1h.
	// +optional
	Initial *metav1.Duration `json:"initial,omitempty"`
	// Max caps the delay between attempts, at most 1h.
	// +optional
	Max *metav1.Duration `json:"max,omitempty"`
	// Factor multiplies the delay after each attempt, as a decimal string
	// such as "2"; defaults to 2.
	// +optional
	Factor string `json:"factor,omitempty"`
}

// RunStatus is the observed state of a Run. Invocation counters, history
// and registration IDs never appear here.
type RunStatus struct {
	// Phase is where the Run is in its lifecycle.
	// +optional
	Phase lifecycle.Phase `json:"phase,omitempty"`
	// Conditions: Scheduled, Ready and Completed. At most 16.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Message says, for humans, why the Run is where it is. At most 4 KiB.
	// +optional
	Message string `json:"message,omitempty"`
	// Attempt is the 1-based attempt number.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// AssignedPod is the Runtime Pod that holds the Run. Set and cleared
	// together with assignedPodUID.
	// +optional
	AssignedPod string `json:"assignedPod,omitempty"`
	// AssignedPodUID disambiguates a reused Pod name.
	// +optional
	AssignedPodUID types.UID `json:"assignedPodUID,omitempty"`
	// ScheduledTime is when the Run was bound to its Pod.
	// +optional
	ScheduledTime *metav1.MicroTime `json:"scheduledTime,omitempty"`
	// StartTime is when the owning runtimed claimed the Run.
	// +optional
	StartTime *metav1.MicroTime `json:"startTime,omitempty"`
	// ReadyTime is when a function Run last became Ready.
	// +optional
	ReadyTime *metav1.MicroTime `json:"readyTime,omitempty"`
	// CompletionTime is when the Run reached a terminal phase.
	// +optional
	CompletionTime *metav1.MicroTime `json:"completionTime,omitempty"`
	// Outputs are the task's KEY=VALUE outputs: at most 64 keys of 128 bytes,
	// values of 8 KiB, 64 KiB in all.
	// +optional
	Outputs map[string]string `json:"outputs,omitempty"`
	// Endpoint is where a function Run is invoked.
	// +optional
	Endpoint *RunEndpoint `json:"endpoint,omitempty"`
	// ExitCode is the exit status of a finished task.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// RunEndpointProtocol is the protocol of a Run endpoint.
type RunEndpointProtocol string

// Endpoint protocols.
const (
	RunEndpointProtocolHTTPS RunEndpointProtocol = "HTTPS"
)

// RunEndpoint is the stable invoke address of a function Run.
type RunEndpoint struct {
	// Protocol of the URL; HTTPS.
	Protocol RunEndpointProtocol `json:"protocol"`
	// URL of the runs/invoke subresource, carrying ?uid= so a recreated Run
	// of the same name is never addressed. At most 2048 bytes.
	URL string `json:"url"`
	// CABundle is a PEM bundle to trust for URL, at most 16 KiB; omitted when
	// the cluster's root already applies.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunList is a list of Runs.
type RunList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Run `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Runtime is a pool of warm Runtime Pods that execute Runs.
type Runtime struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec describes the pool.
	Spec RuntimeSpec `json:"spec"`
	// Status is the observed state of the pool.
	// +optional
	Status RuntimeStatus `json:"status,omitempty"`
}

// RuntimeSpec describes a pool of Runtime Pods.
type RuntimeSpec struct {
	// Template is the Pod template. Its container named "runtime" runs the
	// Runtime Server; kruntimes adds the runtimed sidecar and shared volumes.
	Template corev1.PodTemplateSpec `json:"template"`
	// Replicas is the number of warm Pods. Defaults to 1.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// Capacity bounds the work of each Pod.
	// +optional
	Capacity RuntimeCapacity `json:"capacity,omitempty"`
	// RuntimedImage is the image of the runtimed sidecar.
	// +optional
	RuntimedImage string `json:"runtimedImage,omitempty"`
}

// RuntimeCapacity bounds the concurrent Runs per Pod.
type RuntimeCapacity struct {
	// Runs is the number of Runs one Pod holds at once. Defaults to 1, so a
	// sandbox never shares its Pod.
	// +optional
	Runs int32 `json:"runs,omitempty"`
}

// RuntimeStatus is the observed state of a Runtime.
type RuntimeStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the number of Pods of the pool.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of Pods ready to take Runs.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Conditions of the pool, e.g. Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RuntimeList is a list of Runtimes.
type RuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Runtime `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunInvokeOptions are the query parameters of runs/invoke.
type RunInvokeOptions struct {
	metav1.TypeMeta

	UID     string
	Timeout string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InvokeResult is what one invocation of a function Run returned.
type InvokeResult struct {
	metav1.TypeMeta

	InvocationID   string
	Output         runtime.RawExtension
	Outputs        map[string]string
	Error          *InvokeError
	DurationMillis int64
	Logs           *InvokeLogs
}

// InvokeError is a handler's failure.
type InvokeError struct {
	Type    string
	Message string
}

// InvokeLogs is what the handler wrote during the invocation.
type InvokeLogs struct {
	Stdout          string
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool
}

// RunLogStream selects the output streams runs/log shows.
type RunLogStream string

// RunLogStreams.
const (
	RunLogStreamAll    RunLogStream = "All"
	RunLogStreamStdout RunLogStream = "Stdout"
	RunLogStreamStderr RunLogStream = "Stderr"
)

// Why the server dropped bytes of a kept log (RunLog.DroppedBy).
const (
	// RunLogDroppedByNamespaceLimit: the namespace held its limit of
	// kept-log bytes (--max-log-bytes-per-namespace).
	RunLogDroppedByNamespaceLimit = "NamespaceLimit"
	// RunLogDroppedByRecordLimit: the storage backend takes no larger
	// record (--max-log-record-bytes).
	RunLogDroppedByRecordLimit = "RecordLimit"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunFilesOptions are the query parameters of runs/files.
type RunFilesOptions struct {
	metav1.TypeMeta

	Path    string
	Extract RunFilesExtract
	Archive RunFilesArchive
}

// RunFilesExtract says how a PUT of runs/files takes its body.
type RunFilesExtract string

// RunFilesExtracts.
const (
	// RunFilesExtractTar: the body is a tar archive (gzip-compressed or
	// not), extracted into the directory Path names.
	RunFilesExtractTar RunFilesExtract = "tar"
)

// RunFilesArchive says how a GET of runs/files answers a directory.
type RunFilesArchive string

// RunFilesArchives.
const (
	// RunFilesArchiveTar: a tar archive of the directory Path names.
	RunFilesArchiveTar RunFilesArchive = "tar"
	// RunFilesArchiveTarGzip: a gzip-compressed tar archive of it.
	RunFilesArchiveTarGzip RunFilesArchive = "tar.gz"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLogOptions are the query parameters of runs/log.
type RunLogOptions struct {
	metav1.TypeMeta

	Follow     bool
	TailLines  *int64
	LimitBytes *int64
	Timestamps bool
	Attempt    *int32
	Stream     RunLogStream
	// Command names a background command of a function Run's
	// registration, whose output is read instead.
	Command string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLog is the kept log of one attempt of a task Run: a storage record,
// not a served resource.
type RunLog struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	RunUID       types.UID
	Attempt      int32
	Chunks       []RunLogChunk
	DroppedBytes int64
	DroppedAfter int32
	// DroppedBy says, when set, which of the server's limits dropped
	// bytes (RunLogDroppedBy*); the Runtime Server's own bound when empty.
	DroppedBy string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLogUsage counts the kept-log bytes of one namespace against the
// server's limit: a storage record, not a served resource.
type RunLogUsage struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Bytes int64
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLogList is a page of kept-log records, as the orphan sweep reads them.
type RunLogList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []RunLog
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLogUsageList is a page of per-namespace counts.
type RunLogUsageList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []RunLogUsage
}

// RunLogChunk is one write of the task's program.
type RunLogChunk struct {
	Stream   RunLogStream
	UnixNano int64
	Data     []byte
}
