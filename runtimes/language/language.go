package language

import (
	"context"
	"time"

	"kruntimes.io/kruntimes/apis/runlog"
)

// Bounds of what one invocation returns besides its output (whose bound,
// with the input's, is in the invoke contract, package invocation).
const (
	MaxInvocationLogBytes = 64 << 10
	MaxErrorMessageBytes  = 4 << 10
	MaxErrorStackBytes    = 8 << 10
)

// Environment variables every task and invocation sees.
const (
	// EnvOutputs names the file a program writes KEY=VALUE outputs to.
	EnvOutputs = "KRUNTIMES_OUTPUTS"
	// EnvInvocationID and EnvRunUID identify a bash function invocation.
	EnvInvocationID = "KRUNTIMES_INVOCATION_ID"
	EnvRunUID       = "KRUNTIMES_RUN_UID"
	// EnvDeadlineUnixNano is the invocation deadline, 0 when there is none.
	EnvDeadlineUnixNano = "KRUNTIMES_DEADLINE_UNIX_NANO"
)

// Language turns task programs into command lines.
type Language interface {
	// Name is what Health reports, e.g. "bash".
	Name() string
	// TaskArgv returns the command line that runs file with args through the
	// language's interpreter. file is absolute or relative to the task's
	// working directory.
	TaskArgv(file string, args []string) []string
}

// FunctionLoader is implemented by languages that serve functions.
type FunctionLoader interface {
	// LoadFunction prepares spec for invocation and returns once it can serve.
	// An error means the registration failed; its message is reported to the
	// user as the fatal error, so it should say what to fix.
	LoadFunction(ctx context.Context, spec FunctionSpec) (Function, error)
}

// FunctionSpec is what a registration fixes for its lifetime.
type FunctionSpec struct {
	RunUID     string
	WorkingDir string
	Handler    string
	// Env is the complete environment, KEY=VALUE.
	Env []string
	// Commands receives the output of the background commands the function
	// starts (the Python sandbox's start_command); nil discards it.
	// Languages whose functions start none ignore it.
	Commands CommandOutput
}

// CommandOutput receives what a function's background commands write, as
// they write it. Calls for one command come in order, Start first and End
// last, from one goroutine at a time; calls for different commands may
// interleave. An implementation must not block: the function's worker
// waits while it runs.
type CommandOutput interface {
	// Start announces command id; it comes before the invocation that
	// started the command returns.
	Start(id string)
	// Write records p, written by command id to stream s (StreamStdout or
	// StreamStderr). p is not reused after the call, so it may be kept.
	Write(id string, s runlog.Stream, p []byte)
	// End says command id ended: it exited, was killed, or died with the
	// function's worker. Nothing follows it for id.
	End(id string)
}

// Function is one loaded registration generation. The Runtime Server calls
// Invoke at most once at a time.
type Function interface {
	// Invoke runs one invocation. It returns an error only when the handler's
	// outcome is not a result: the context ended (the error wraps ctx.Err()),
	// or the function could not be dispatched at all. A handler failure is a
	// Result with Error set.
	Invoke(ctx context.Context, inv Invocation) (*Result, error)
	// Failure returns why the function can never serve again, or nil.
	Failure() error
	// Close releases everything the function holds and kills its processes.
	// It is safe to call concurrently with Invoke, which then fails.
	Close()
}

// Invocation is one request.
type Invocation struct {
	ID          string
	RunUID      string
	Input       []byte
	ContentType string
	// Deadline is zero when the invocation has none.
	Deadline time.Time
}

// Result is what the handler produced.
type Result struct {
	Output          []byte
	ContentType     string
	Outputs         map[string]string
	Stdout          []byte
	Stderr          []byte
	StdoutTruncated bool
	StderrTruncated bool
	Error           *FunctionError
	// WorkerWarm says the handler ran in a worker that was already running
	// when the invocation arrived: neither started nor restarted for it.
	WorkerWarm bool
}

// FunctionError describes a handler failure.
type FunctionError struct {
	Type    string
	Message string
	Stack   string
}

// Truncate bounds s to at most n bytes without splitting a UTF-8 sequence,
// keeping the end when keepTail is set (where tracebacks put the cause).
// It slices s rather than copying it, so logs bound as bytes stay bytes.
func Truncate[T ~string | ~[]byte](s T, n int, keepTail bool) T {
	if len(s) <= n {
		return s
	}
	if keepTail {
		i := len(s) - n
		for i < len(s) && s[i]&0xC0 == 0x80 {
			i++
		}
		return s[i:]
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}
