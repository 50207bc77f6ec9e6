package options

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"kruntimes.io/kruntimes/apis/runlog"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/python"
	"kruntimes.io/kruntimes/runtimes/server"
)

// maxSpareWorkers bounds --spare-workers: each is an idle interpreter.
const maxSpareWorkers = 64

// Spare workers when --spare-workers is not set: one per free slot, up to
// autoSpareWorkers, when the Pod's capacity is known; else defaultSpareWorkers.
const (
	autoSpareWorkers    = 8
	defaultSpareWorkers = 2
)

// Bounds of --run-log-max-bytes: the log travels in one gRPC message to
// runtimed (4 MiB at most by default) and is stored as one record.
const (
	minRunLogBytes = 1 << 10
	maxRunLogBytes = 3 << 20
)

// Options are the flags of kruntimes-runtime. The Runtime's Pod template
// sets --language and --listen.
type Options struct {
	Language    string
	Listen      string
	Interpreter string
	// SpareWorkers is --spare-workers; negative means the default, which
	// follows Capacity.
	SpareWorkers int
	// Capacity is the Pod's capacity.runs ($KRUNTIMES_CAPACITY); 0 when
	// unknown.
	Capacity        int
	StateDir        string
	ShutdownTimeout time.Duration
	// ReleaseTimeout is how long, on SIGTERM, the server keeps serving
	// while functions are still registered.
	ReleaseTimeout time.Duration
	// RunLogMaxBytes bounds the log of each task handed to runtimed.
	RunLogMaxBytes int
	// MaxProcs is GOMAXPROCS unless $GOMAXPROCS is set; 0 leaves it to Go.
	MaxProcs int
}

// NewOptions returns the defaults: the Runtime Pod's socket, the Pod's
// capacity from $KRUNTIMES_CAPACITY, spare Python workers following it, one
// Go thread.
func NewOptions() *Options {
	capacity, _ := strconv.Atoi(os.Getenv(runtimepod.EnvCapacity))
	return &Options{
		Listen:          runtimepod.RuntimeSocket,
		SpareWorkers:    -1,
		Capacity:        max(0, capacity),
		ShutdownTimeout: 10 * time.Second,
		ReleaseTimeout:  20 * time.Second,
		RunLogMaxBytes:  runlog.DefaultMaxBytes,
		// The server's own work per call is small next to its workers'
		// (separate processes), and handing a call between goroutines on
		// one thread costs far less CPU than waking a second one for each
		// step (BenchmarkInvokeFunction*, docs/benchmarks.md).
		MaxProcs: 1,
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Language, "language", o.Language, "Language to serve: bash or python.")
	fs.StringVar(&o.Listen, "listen", o.Listen, "Where to serve the Runtime Server API; only unix:// sockets are accepted because user code must never be reachable from the network.")
	fs.StringVar(&o.Interpreter, "interpreter", o.Interpreter, "Interpreter binary; defaults to bash or python3 from PATH.")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "Private directory for inline scripts and outputs files; a fresh temporary directory when empty.")
	fs.IntVar(&o.SpareWorkers, "spare-workers", o.SpareWorkers, fmt.Sprintf("Python only: warm workers kept started ahead of registrations, so a registration costs importing its handler instead of starting an interpreter, and never more than the Pod's free slots when --capacity is known; 0 starts one per registration. Negative: one per free slot up to %d when --capacity is known, else %d.", autoSpareWorkers, defaultSpareWorkers))
	fs.IntVar(&o.Capacity, "capacity", o.Capacity, "How many Runs the Pod holds at once (the Runtime's capacity.runs; defaults to $"+runtimepod.EnvCapacity+", which the runtime controller sets); 0 when unknown.")
	fs.IntVar(&o.MaxProcs, "gomaxprocs", o.MaxProcs, "Most threads executing this server's Go code at once (GOMAXPROCS), unless $GOMAXPROCS is set; 0 leaves it to Go, which takes the CPUs the container may use. User programs and workers are not limited by it.")
	fs.IntVar(&o.RunLogMaxBytes, "run-log-max-bytes", o.RunLogMaxBytes, "Most bytes of each task's output (stdout and stderr in write order) kept for runs/log: the first and the last half; when a task writes more, the bytes in between are dropped and counted. 0 means the default.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long to let in-flight calls finish on SIGTERM before killing all user processes.")
	fs.DurationVar(&o.ReleaseTimeout, "release-timeout", o.ReleaseTimeout, "On SIGTERM, how long to keep serving while functions are still registered, before --shutdown-timeout starts: runtimed, which gets SIGTERM at the same time, lets their invocations in flight finish and unregisters each as it gives it back to be placed on another Pod. 0 shuts down at once.")
}

// Validate says what is wrong with the flags and how to fix it.
func (o *Options) Validate() error {
	var errs []error
	if o.Language != "bash" && o.Language != "python" {
		errs = append(errs, fmt.Errorf("--language must be bash or python, got %q", o.Language))
	}
	if _, err := runtimepod.SocketPath(o.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %w", err))
	}
	if o.MaxProcs < 0 {
		errs = append(errs, fmt.Errorf("--gomaxprocs must not be negative, got %d", o.MaxProcs))
	}
	if o.RunLogMaxBytes != 0 && (o.RunLogMaxBytes < minRunLogBytes || o.RunLogMaxBytes > maxRunLogBytes) {
		errs = append(errs, fmt.Errorf("--run-log-max-bytes must be between %d and %d, got %d", minRunLogBytes, maxRunLogBytes, o.RunLogMaxBytes))
	}
	if o.SpareWorkers > maxSpareWorkers {
		errs = append(errs, fmt.Errorf("--spare-workers must be at most %d, got %d", maxSpareWorkers, o.SpareWorkers))
	}
	if o.Capacity < 0 {
		errs = append(errs, fmt.Errorf("--capacity must not be negative, got %d", o.Capacity))
	}
	return errors.Join(errs...)
}

// Config builds the Runtime Server's options: the language adapter of
// --language, keeping its files in stateDir.
func (o *Options) Config(stateDir string) server.Options {
	var lang language.Language
	var functions language.FunctionLoader
	// The sandbox's files are served by the server itself, streamed.
	var fileHandlers []string
	switch o.Language {
	case "bash":
		l := bash.New(o.Interpreter, stateDir)
		lang, functions = l, l
	case "python":
		l := python.New(o.Interpreter)
		if n := o.spareWorkers(); n > 0 {
			l.KeepSpares(n, o.Capacity, os.Environ())
		}
		lang, functions = l, l
		fileHandlers = []string{python.SandboxHandler}
	}
	return server.Options{Language: lang, Functions: functions, FileHandlers: fileHandlers, StateDir: stateDir, BaseEnv: os.Environ(), RunLogMaxBytes: o.RunLogMaxBytes}
}

// spareWorkers is --spare-workers, or its default: one per slot up to
// autoSpareWorkers when the capacity is known.
func (o *Options) spareWorkers() int {
	switch {
	case o.SpareWorkers >= 0:
		return o.SpareWorkers
	case o.Capacity > 0:
		return min(o.Capacity, autoSpareWorkers)
	}
	return defaultSpareWorkers
}
