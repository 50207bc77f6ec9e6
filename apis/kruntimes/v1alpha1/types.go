package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/lifecycle"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Run is a one-shot task or a long-lived function executed on a warm Runtime Pod.
type Run struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec says what to run and how. Everything but cancelRequested and
	// ttlSecondsAfterFinished is immutable after create.
	Spec RunSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// Status is the observed lifecycle of the Run, written by kruntimes.
	// +optional
	Status RunStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// RunSpec is the immutable description of a Run.
type RunSpec struct {
	// Runtime is the name of a Runtime in the Run's namespace whose Pods execute it.
	Runtime string `json:"runtime" protobuf:"bytes,1,opt,name=runtime"`
	// Source is the code the Run executes.
	// +optional
	Source RunSource `json:"source,omitempty" protobuf:"bytes,2,opt,name=source"`
	// Mode selects a one-shot task or a long-lived function. Exactly one of
	// task and function is set.
	Mode RunMode `json:"mode" protobuf:"bytes,3,opt,name=mode"`
	// Env is passed to the task or function, at most 256 entries.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []EnvVar `json:"env,omitempty" protobuf:"bytes,4,rep,name=env"`
	// Timeout is the maximum lifetime of the reservation, counted from
	// status.startTime. A Run past it ends as Timeout. At most 168h.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty" protobuf:"bytes,5,opt,name=timeout"`
	// RetryPolicy says how often and when a failed attempt is retried.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty" protobuf:"bytes,6,opt,name=retryPolicy"`
	// CancelRequested asks kruntimes to cancel the Run. It may only go from
	// false to true.
	// +optional
	CancelRequested bool `json:"cancelRequested,omitempty" protobuf:"varint,7,opt,name=cancelRequested"`
	// TTLSecondsAfterFinished deletes the Run this many seconds after it
	// reached a terminal phase, at most 31536000 (365 days). Unset keeps it
	// forever. Mutable.
	// +optional
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty" protobuf:"varint,8,opt,name=ttlSecondsAfterFinished"`
}

// RunSource is the code of a Run.
type RunSource struct {
	// Inline is the source text itself, at most 256 KiB.
	// +optional
	Inline string `json:"inline,omitempty" protobuf:"bytes,1,opt,name=inline"`
	// InlinePath is the relative, clean file name the inline source is
	// written to in the Run's workspace. Required for function Runs with
	// inline source, so the handler can name it.
	// +optional
	InlinePath string `json:"inlinePath,omitempty" protobuf:"bytes,2,opt,name=inlinePath"`
}

// RunMode holds exactly one of task or function.
type RunMode struct {
	// Task executes once and records its outcome.
	// +optional
	Task *TaskMode `json:"task,omitempty" protobuf:"bytes,1,opt,name=task"`
	// Function registers the code on a warm Pod, becomes Ready, and is then
	// invoked many times through the runs/invoke subresource.
	// +optional
	Function *FunctionMode `json:"function,omitempty" protobuf:"bytes,2,opt,name=function"`
}

// TaskMode runs a program once.
type TaskMode struct {
	// Entrypoint is the program to execute, relative to the workspace or
	// absolute, at most 4096 bytes. Defaults to running the inline source
	// as a script.
	// +optional
	Entrypoint string `json:"entrypoint,omitempty" protobuf:"bytes,1,opt,name=entrypoint"`
	// Args are passed to the entrypoint: at most 256, each at most 32 KiB,
	// 256 KiB in all.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty" protobuf:"bytes,2,rep,name=args"`
}

// FunctionMode registers a handler that serves invocations.
type FunctionMode struct {
	// Handler names the function: "module.function" for Python, a script
	// path under the workspace for bash.
	Handler string `json:"handler" protobuf:"bytes,1,opt,name=handler"`
	// IdleTimeoutSeconds ends the Run as Timeout (reason IdleTimeout) after
	// this long without an invocation, at most 604800 (7 days). Unset never
	// idles out.
	// +optional
	IdleTimeoutSeconds *int32 `json:"idleTimeoutSeconds,omitempty" protobuf:"varint,2,opt,name=idleTimeoutSeconds"`
	// Description says what the function does, for the people and agents
	// that call it as a tool, at most 1 KiB.
	// +optional
	Description string `json:"description,omitempty" protobuf:"bytes,3,opt,name=description"`
	// Schema declares what the function takes and returns.
	// +optional
	Schema *FunctionSchema `json:"schema,omitempty" protobuf:"bytes,4,opt,name=schema"`
}

// FunctionSchema holds the JSON Schemas of a function's input and output,
// each in the OpenAPI v3 subset that CustomResourceDefinitions use
// (openAPIV3Schema: no $ref, definitions or patternProperties) with an
// object at its root, at most 64 KiB.
type FunctionSchema struct {
	// Input is the JSON Schema of the invocation body. When set,
	// runs/invoke validates every body against it before dispatch and
	// answers 400, listing each violation, without running the handler.
	// +optional
	Input *runtime.RawExtension `json:"input,omitempty" protobuf:"bytes,1,opt,name=input"`
	// Output is the JSON Schema of what the handler returns. It is
	// published for clients (agents check it); the server does not
	// validate outputs against it.
	// +optional
	Output *runtime.RawExtension `json:"output,omitempty" protobuf:"bytes,2,opt,name=output"`
}

// EnvVar is one environment variable: its value is written in the Run, or
// read from a Secret when the attempt starts. Not both.
type EnvVar struct {
	// Name of the variable, a C identifier.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// Value of the variable. Must be empty when valueFrom is set.
	// +optional
	Value string `json:"value,omitempty" protobuf:"bytes,2,opt,name=value"`
	// ValueFrom reads the value from a Secret of the Run's namespace when
	// runtimed starts or registers each attempt, with the Runtime's own
	// identity. The value is never stored in the Run.
	// +optional
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty" protobuf:"bytes,3,opt,name=valueFrom"`
}

// EnvVarSource says where an environment variable's value comes from.
// secretKeyRef is the only source, and required.
type EnvVarSource struct {
	// SecretKeyRef selects a key of a Secret in the Run's namespace. The
	// Runtime's ServiceAccount (runtime-<runtime>) must be granted get on
	// that Secret, or the attempt fails saying what to grant.
	// +optional
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef,omitempty" protobuf:"bytes,1,opt,name=secretKeyRef"`
}

// SecretKeySelector selects a key of a Secret in the Run's namespace.
type SecretKeySelector struct {
	// Name of the Secret, a DNS subdomain.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// Key of the Secret's data whose value is used.
	Key string `json:"key" protobuf:"bytes,2,opt,name=key"`
	// Optional leaves the variable unset when the Secret or its key does
	// not exist, instead of failing the attempt. A Secret the Runtime may
	// not read fails the attempt either way.
	// +optional
	Optional *bool `json:"optional,omitempty" protobuf:"varint,3,opt,name=optional"`
}

// RetryPolicy bounds the attempts of a Run.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first, 1 to 100.
	// Defaults to 1 (no retry).
	// +optional
	MaxAttempts int32 `json:"maxAttempts,omitempty" protobuf:"varint,1,opt,name=maxAttempts"`
	// Backoff spaces the attempts.
	// +optional
	Backoff *RetryBackoff `json:"backoff,omitempty" protobuf:"bytes,2,opt,name=backoff"`
	// RetryableReasons limits retries to failures with one of these reasons.
	// Empty retries every retryable failure.
	// +optional
	// +listType=set
	RetryableReasons []string `json:"retryableReasons,omitempty" protobuf:"bytes,3,rep,name=retryableReasons"`
}

// RetryBackoff is an exponential backoff with a cap.
type RetryBackoff struct {
	// Initial is the delay before the second attempt, at most 1h.
	// +optional
	Initial *metav1.Duration `json:"initial,omitempty" protobuf:"bytes,1,opt,name=initial"`
	// Max caps the delay between attempts, at most 1h.
	// +optional
	Max *metav1.Duration `json:"max,omitempty" protobuf:"bytes,2,opt,name=max"`
	// Factor multiplies the delay after each attempt, as a decimal string
	// such as "2"; defaults to 2.
	// +optional
	Factor string `json:"factor,omitempty" protobuf:"bytes,3,opt,name=factor"`
}

// RunStatus is the observed state of a Run. Invocation counters, history
// and registration IDs never appear here.
type RunStatus struct {
	// Phase is where the Run is in its lifecycle.
	// +optional
	Phase lifecycle.Phase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=kruntimes.io/kruntimes/apis/lifecycle.Phase"`
	// Conditions: Scheduled, Ready and Completed. At most 16.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,2,rep,name=conditions"`
	// Message says, for humans, why the Run is where it is. At most 4 KiB.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,3,opt,name=message"`
	// Attempt is the 1-based attempt number.
	// +optional
	Attempt int32 `json:"attempt,omitempty" protobuf:"varint,4,opt,name=attempt"`
	// AssignedPod is the Runtime Pod that holds the Run. Set and cleared
	// together with assignedPodUID.
	// +optional
	AssignedPod string `json:"assignedPod,omitempty" protobuf:"bytes,5,opt,name=assignedPod"`
	// AssignedPodUID disambiguates a reused Pod name.
	// +optional
	AssignedPodUID types.UID `json:"assignedPodUID,omitempty" protobuf:"bytes,6,opt,name=assignedPodUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// ScheduledTime is when the Run was bound to its Pod.
	// +optional
	ScheduledTime *metav1.MicroTime `json:"scheduledTime,omitempty" protobuf:"bytes,7,opt,name=scheduledTime"`
	// StartTime is when the owning runtimed claimed the Run.
	// +optional
	StartTime *metav1.MicroTime `json:"startTime,omitempty" protobuf:"bytes,8,opt,name=startTime"`
	// ReadyTime is when a function Run last became Ready.
	// +optional
	ReadyTime *metav1.MicroTime `json:"readyTime,omitempty" protobuf:"bytes,9,opt,name=readyTime"`
	// CompletionTime is when the Run reached a terminal phase.
	// +optional
	CompletionTime *metav1.MicroTime `json:"completionTime,omitempty" protobuf:"bytes,10,opt,name=completionTime"`
	// Outputs are the task's KEY=VALUE outputs: at most 64 keys of 128 bytes,
	// values of 8 KiB, 64 KiB in all.
	// +optional
	Outputs map[string]string `json:"outputs,omitempty" protobuf:"bytes,11,rep,name=outputs"`
	// Endpoint is where a function Run is invoked.
	// +optional
	Endpoint *RunEndpoint `json:"endpoint,omitempty" protobuf:"bytes,12,opt,name=endpoint"`
	// ExitCode is the exit status of a finished task.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty" protobuf:"varint,13,opt,name=exitCode"`
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
	Protocol RunEndpointProtocol `json:"protocol" protobuf:"bytes,1,opt,name=protocol,casttype=RunEndpointProtocol"`
	// URL of the runs/invoke subresource, carrying ?uid= so a recreated Run
	// of the same name is never addressed. At most 2048 bytes.
	URL string `json:"url" protobuf:"bytes,2,opt,name=url"`
	// CABundle is a PEM bundle to trust for URL, at most 16 KiB; omitted when
	// the cluster's root already applies.
	// +optional
	CABundle []byte `json:"caBundle,omitempty" protobuf:"bytes,3,opt,name=caBundle"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunList is a list of Runs.
type RunList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []Run `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Runtime is a pool of warm Runtime Pods that execute Runs.
type Runtime struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec describes the pool.
	Spec RuntimeSpec `json:"spec" protobuf:"bytes,2,opt,name=spec"`
	// Status is the observed state of the pool.
	// +optional
	Status RuntimeStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// RuntimeSpec describes a pool of Runtime Pods.
type RuntimeSpec struct {
	// Template is the Pod template. Its container named "runtime" runs the
	// Runtime Server; kruntimes adds the runtimed sidecar and shared volumes.
	Template corev1.PodTemplateSpec `json:"template" protobuf:"bytes,1,opt,name=template"`
	// Replicas is the number of warm Pods. Defaults to 1.
	// +optional
	Replicas *int32 `json:"replicas,omitempty" protobuf:"varint,2,opt,name=replicas"`
	// Capacity bounds the work of each Pod.
	// +optional
	Capacity RuntimeCapacity `json:"capacity,omitempty" protobuf:"bytes,3,opt,name=capacity"`
	// RuntimedImage is the image of the runtimed sidecar.
	// +optional
	RuntimedImage string `json:"runtimedImage,omitempty" protobuf:"bytes,4,opt,name=runtimedImage"`
}

// RuntimeCapacity bounds the concurrent Runs per Pod.
type RuntimeCapacity struct {
	// Runs is the number of Runs one Pod holds at once. Defaults to 1, so a
	// sandbox never shares its Pod.
	// +optional
	Runs int32 `json:"runs,omitempty" protobuf:"varint,1,opt,name=runs"`
}

// RuntimeStatus is the observed state of a Runtime.
type RuntimeStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Replicas is the number of Pods of the pool.
	// +optional
	Replicas int32 `json:"replicas,omitempty" protobuf:"varint,2,opt,name=replicas"`
	// ReadyReplicas is the number of Pods ready to take Runs.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty" protobuf:"varint,3,opt,name=readyReplicas"`
	// Conditions of the pool, e.g. Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,4,rep,name=conditions"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RuntimeList is a list of Runtimes.
type RuntimeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []Runtime `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +k8s:conversion-gen:explicit-from=net/url.Values

// RunInvokeOptions are the query parameters of
// POST .../runs/NAME/invoke, whose body is the function's JSON input.
type RunInvokeOptions struct {
	metav1.TypeMeta `json:",inline"`

	// UID, when set, must be the Run's metadata.uid, or the invocation is
	// answered 404 as for an unknown Run: status.endpoint.url carries it so
	// that a Run deleted and created again under the same name is never
	// invoked through an old address. The X-Kruntime-Run-UID header does
	// the same.
	// +optional
	UID string `json:"uid,omitempty" protobuf:"bytes,1,opt,name=uid"`
	// Timeout is Kubernetes' standard request timeout (e.g. "10s"; 60s when
	// absent), which every API request takes. The invocation is stopped
	// with a 504 a little before it, and never runs past the server's
	// maximum or the Run's remaining lifetime.
	// +optional
	Timeout string `json:"timeout,omitempty" protobuf:"bytes,2,opt,name=timeout"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InvokeResult is the answer to an invocation that ran: the handler's
// output, or its error (still HTTP 200, with the header
// X-Kruntime-Function-Error).
type InvokeResult struct {
	metav1.TypeMeta `json:",inline"`

	// InvocationID identifies the invocation: the caller's
	// X-Kruntime-Invocation-ID, or one generated for it.
	InvocationID string `json:"invocationId" protobuf:"bytes,1,opt,name=invocationId"`
	// Output is the JSON the handler returned; null when it failed or
	// returned nothing.
	// +optional
	Output runtime.RawExtension `json:"output" protobuf:"bytes,2,opt,name=output"`
	// Outputs are the KEY=VALUE outputs the handler set, bounded like a
	// Run's.
	// +optional
	Outputs map[string]string `json:"outputs,omitempty" protobuf:"bytes,3,rep,name=outputs"`
	// Error is set when the handler failed.
	// +optional
	Error *InvokeError `json:"error,omitempty" protobuf:"bytes,4,opt,name=error"`
	// DurationMillis is how long the handler ran.
	DurationMillis int64 `json:"durationMillis" protobuf:"varint,5,opt,name=durationMillis"`
	// Logs is what the handler wrote, at most 64 KiB of each stream.
	// +optional
	Logs *InvokeLogs `json:"logs,omitempty" protobuf:"bytes,6,opt,name=logs"`
}

// InvokeError is a handler's failure.
type InvokeError struct {
	// Type is the exception class, or e.g. NonZeroExit, WorkerExited,
	// OutputTooLarge.
	Type string `json:"type" protobuf:"bytes,1,opt,name=type"`
	// Message says what went wrong, at most 4 KiB.
	Message string `json:"message" protobuf:"bytes,2,opt,name=message"`
}

// InvokeLogs is what the handler wrote during one invocation.
type InvokeLogs struct {
	// Stdout is the head of standard output.
	// +optional
	Stdout string `json:"stdout,omitempty" protobuf:"bytes,1,opt,name=stdout"`
	// Stderr is the tail of standard error.
	// +optional
	Stderr string `json:"stderr,omitempty" protobuf:"bytes,2,opt,name=stderr"`
	// StdoutTruncated says stdout was cut.
	// +optional
	StdoutTruncated bool `json:"stdoutTruncated,omitempty" protobuf:"varint,3,opt,name=stdoutTruncated"`
	// StderrTruncated says stderr was cut.
	// +optional
	StderrTruncated bool `json:"stderrTruncated,omitempty" protobuf:"varint,4,opt,name=stderrTruncated"`
}

// RunLogStream selects the output streams runs/log shows.
type RunLogStream string

// RunLogStreams.
const (
	// RunLogStreamAll shows stdout and stderr interleaved in write order.
	RunLogStreamAll RunLogStream = "All"
	// RunLogStreamStdout shows stdout only.
	RunLogStreamStdout RunLogStream = "Stdout"
	// RunLogStreamStderr shows stderr only.
	RunLogStreamStderr RunLogStream = "Stderr"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +k8s:conversion-gen:explicit-from=net/url.Values

// RunFilesOptions are the query parameters of GET and PUT
// .../runs/NAME/files, by which a sandbox's files of any size are read and
// written as streamed bytes.
type RunFilesOptions struct {
	metav1.TypeMeta `json:",inline"`

	// Path names the file in the sandbox's workspace: relative to it, or
	// absolute inside it. A path that leaves the workspace (by "..", or a
	// symbolic link that resolves outside it) is refused.
	Path string `json:"path" protobuf:"bytes,1,opt,name=path"`
	// Extract, on PUT only, takes the body as an archive extracted into
	// the directory Path names (made when missing) rather than as a
	// file's bytes: "tar" for a tar archive, gzip-compressed or not.
	// +optional
	// (A plain string: query parameters are simple types in OpenAPI.)
	Extract string `json:"extract,omitempty" protobuf:"bytes,2,opt,name=extract"`
	// Archive, on GET only, answers the directory Path names as an archive
	// of it rather than a file's bytes: "tar" for a tar archive
	// (application/x-tar), "tar.gz" for a gzip-compressed one
	// (application/gzip). Entries are relative to the directory, depth
	// first and sorted; symbolic links are stored as links, never
	// followed; sockets, FIFOs and devices are left out.
	// +optional
	Archive string `json:"archive,omitempty" protobuf:"bytes,3,opt,name=archive"`
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
// +k8s:conversion-gen:explicit-from=net/url.Values

// RunLogOptions are the query parameters of
// GET .../runs/NAME/log, as PodLogOptions are those of pods/log.
type RunLogOptions struct {
	metav1.TypeMeta `json:",inline"`

	// Follow streams the log as it is written, until the attempt ends.
	// +optional
	Follow bool `json:"follow,omitempty" protobuf:"varint,1,opt,name=follow"`
	// TailLines, when set, shows only that many lines from the end.
	// +optional
	TailLines *int64 `json:"tailLines,omitempty" protobuf:"varint,2,opt,name=tailLines"`
	// LimitBytes, when set, cuts the answer after that many bytes.
	// +optional
	LimitBytes *int64 `json:"limitBytes,omitempty" protobuf:"varint,3,opt,name=limitBytes"`
	// Timestamps prefixes every line with the time it was written
	// (RFC 3339 with sub-second digits).
	// +optional
	Timestamps bool `json:"timestamps,omitempty" protobuf:"varint,4,opt,name=timestamps"`
	// Attempt selects an attempt (1-based); the Run's latest when absent.
	// +optional
	Attempt *int32 `json:"attempt,omitempty" protobuf:"varint,5,opt,name=attempt"`
	// Stream selects All (stdout and stderr interleaved in write order, the
	// default), Stdout or Stderr.
	// +optional
	// (A plain string: query parameters are simple types in OpenAPI.)
	Stream string `json:"stream,omitempty" protobuf:"bytes,6,opt,name=stream"`
	// Command selects the output of a background command a function Run
	// started (a sandbox's start_command answers its id) instead of what
	// its invocations wrote: 404 when the Run's registration has no such
	// command. With follow, the answer ends when the command does;
	// without, it is what the command wrote so far (a bounded tail).
	// +optional
	Command string `json:"command,omitempty" protobuf:"bytes,7,opt,name=command"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLog is the kept log of one attempt of a task Run, which runtimed
// sends with POST .../runs/NAME/log?attempt=N before it records the
// attempt's outcome. kruntimes-apiserver stores it outside the Run (lists
// and watches of Runs never carry it) and serves it as text by
// GET .../runs/NAME/log; it is not a resource of its own.
type RunLog struct {
	metav1.TypeMeta `json:",inline"`
	// Set by the server.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// RunUID is the uid of the Run the log belongs to; set by the server.
	// +optional
	RunUID types.UID `json:"runUID,omitempty" protobuf:"bytes,2,opt,name=runUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// Attempt is the attempt the log belongs to; set by the server from the
	// query.
	// +optional
	Attempt int32 `json:"attempt,omitempty" protobuf:"varint,3,opt,name=attempt"`
	// Chunks are the program's writes in write order.
	// +optional
	// +listType=atomic
	Chunks []RunLogChunk `json:"chunks,omitempty" protobuf:"bytes,4,rep,name=chunks"`
	// DroppedBytes were written but not kept: they came between
	// chunks[:droppedAfter] (the head) and chunks[droppedAfter:] (the tail).
	// +optional
	DroppedBytes int64 `json:"droppedBytes,omitempty" protobuf:"varint,5,opt,name=droppedBytes"`
	// DroppedAfter is the number of head chunks.
	// +optional
	DroppedAfter int32 `json:"droppedAfter,omitempty" protobuf:"varint,6,opt,name=droppedAfter"`
	// DroppedBy says, when set, which of the server's limits dropped bytes:
	// NamespaceLimit (the namespace held its limit of kept-log bytes) or
	// RecordLimit (the storage backend takes no larger record); the
	// Runtime Server's own bound when empty. Set by the server.
	// +optional
	DroppedBy string `json:"droppedBy,omitempty" protobuf:"bytes,7,opt,name=droppedBy"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLogUsage counts the kept-log bytes of one namespace against
// kruntimes-apiserver's --max-log-bytes-per-namespace. It is a storage
// record, never served.
type RunLogUsage struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Bytes are the namespace's kept-log bytes, as runlog.Size counts them.
	Bytes int64 `json:"bytes" protobuf:"varint,2,opt,name=bytes"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLogList is a page of kept-log records, as the server's orphan sweep
// reads them from storage; never served.
type RunLogList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []RunLog `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RunLogUsageList is a page of per-namespace counts of kept-log bytes;
// never served.
type RunLogUsageList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []RunLogUsage `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// RunLogChunk is one write of the task's program.
type RunLogChunk struct {
	// Stream is Stdout or Stderr.
	Stream RunLogStream `json:"stream" protobuf:"bytes,1,opt,name=stream,casttype=RunLogStream"`
	// UnixNano is when it was written, in nanoseconds since the Unix epoch.
	UnixNano int64 `json:"unixNano" protobuf:"varint,2,opt,name=unixNano"`
	// Data are the bytes exactly as written.
	Data []byte `json:"data" protobuf:"bytes,3,opt,name=data"`
}
