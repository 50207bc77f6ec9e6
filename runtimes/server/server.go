package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/runlog"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/language"
)

// Options configure a Server.
type Options struct {
	// Language runs task programs. Required.
	Language language.Language
	// Functions loads functions; nil when the language serves none, and then
	// FunctionRuntime is not registered.
	Functions language.FunctionLoader
	// StateDir holds inline task scripts and outputs files. Required.
	StateDir string
	// BaseEnv is the environment every program starts from, KEY=VALUE.
	BaseEnv []string
	// MaxTasks bounds retained tasks; Execute beyond it is ResourceExhausted
	// until tasks are forgotten.
	MaxTasks int
	// TaskLogBytes bounds the retained tail of each task's stdout and stderr.
	TaskLogBytes int
	// RunLogMaxBytes bounds the log of each task (both streams in write
	// order, a head and a tail) handed to runtimed for runs/log;
	// runlog.DefaultMaxBytes when zero.
	RunLogMaxBytes int
	// RegisterTimeout bounds loading a function (e.g. a Python import).
	RegisterTimeout time.Duration
	// DefaultDrainTimeout is how long Unregister lets an invocation finish
	// when the caller does not say.
	DefaultDrainTimeout time.Duration
	// FileHandlers are the handlers whose registrations have their working
	// directory's files served by ReadFile and WriteFile (the sandbox's);
	// the others' are not.
	FileHandlers []string
	// Sweeper, when set, removes what user code left in the container's
	// shared directories each time the server goes idle.
	Sweeper *Sweeper
	// Clock tells the time of status timestamps and runs task timeouts; the
	// system clock when nil. Tests step a fake clock to time a task out once
	// it is known to be running.
	Clock clock.WithDelayedExecution
}

// Defaults for Options fields left zero.
const (
	DefaultMaxTasks           = 1024
	DefaultTaskLogBytes       = 256 << 10
	DefaultRegisterTimeout    = 60 * time.Second
	DefaultDrainTimeout       = 30 * time.Second
	maxRetiredRegistrations   = 4096
	maxMessageBytes           = 4 << 10
	registrationIDRandomBytes = 16
	registrationIDPrefix      = "reg-"
)

// Server implements runtimev1.RuntimeServer and runtimev1.FunctionRuntimeServer.
type Server struct {
	runtimev1.UnimplementedRuntimeServer
	runtimev1.UnimplementedFunctionRuntimeServer

	opts Options

	mu    sync.Mutex
	tasks map[string]*task
	regs  map[string]*registration
	// retired remembers the highest attempt of unregistered Runs so that a
	// late, lower attempt cannot resurrect them. Bounded; see retire.
	retired      map[string]int64
	retiredOrder []string
	closed       bool
	// scratches are the HOME and TMPDIR directories of live Runs, which
	// a sweep leaves alone.
	scratches map[string]bool
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Language == nil {
		return nil, fmt.Errorf("a language adapter is required")
	}
	if opts.StateDir == "" {
		return nil, fmt.Errorf("a state directory is required")
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	if opts.MaxTasks <= 0 {
		opts.MaxTasks = DefaultMaxTasks
	}
	if opts.RunLogMaxBytes <= 0 {
		opts.RunLogMaxBytes = runlog.DefaultMaxBytes
	}
	if opts.TaskLogBytes <= 0 {
		opts.TaskLogBytes = DefaultTaskLogBytes
	}
	if opts.RegisterTimeout <= 0 {
		opts.RegisterTimeout = DefaultRegisterTimeout
	}
	if opts.DefaultDrainTimeout <= 0 {
		opts.DefaultDrainTimeout = DefaultDrainTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Server{
		opts:      opts,
		tasks:     map[string]*task{},
		regs:      map[string]*registration{},
		retired:   map[string]int64{},
		scratches: map[string]bool{},
	}, nil
}

// Register adds the services this server implements to gs.
func (s *Server) Register(gs *grpc.Server) {
	runtimev1.RegisterRuntimeServer(gs, s)
	if s.opts.Functions != nil {
		runtimev1.RegisterFunctionRuntimeServer(gs, s)
	}
}

// Health implements runtimev1.RuntimeServer.
func (s *Server) Health(context.Context, *runtimev1.HealthRequest) (*runtimev1.HealthResponse, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	return &runtimev1.HealthResponse{
		Serving:            !closed,
		Language:           s.opts.Language.Name(),
		FunctionsSupported: s.opts.Functions != nil,
	}, nil
}

// Close kills every task and function the server started. The server answers
// no further work afterwards.
func (s *Server) Close(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	tasks := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		tasks = append(tasks, t)
	}
	regs := make([]*registration, 0, len(s.regs))
	for _, r := range s.regs {
		regs = append(regs, r)
	}
	s.regs = map[string]*registration{}
	s.mu.Unlock()

	logger := klog.FromContext(ctx)
	for _, t := range tasks {
		t.cancel()
	}
	for _, r := range regs {
		r.shutdown()
	}
	// A loader that keeps processes of its own (Python's spare workers)
	// stops them too.
	if closer, ok := s.opts.Functions.(interface{ Close() }); ok {
		closer.Close()
	}
	for _, t := range tasks {
		select {
		case <-t.done:
		case <-ctx.Done():
			logger.Info("Gave up waiting for a task to exit", "taskID", t.id)
		}
	}
}

func randomID(prefix string, n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never fails on supported platforms.
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func truncateMessage(s string) string {
	return language.Truncate(s, maxMessageBytes, false)
}

func (s *Server) env(extra ...string) []string {
	return append(append([]string(nil), s.opts.BaseEnv...), extra...)
}

func envPairs(vars []*runtimev1.EnvVar) ([]string, error) {
	out := make([]string, 0, len(vars))
	for _, v := range vars {
		if v.GetName() == "" {
			return nil, fmt.Errorf("env var with an empty name")
		}
		for _, c := range v.GetName() {
			if c == '=' || c == 0 {
				return nil, fmt.Errorf("env var name %q must not contain '=' or NUL", v.GetName())
			}
		}
		out = append(out, v.GetName()+"="+v.GetValue())
	}
	return out, nil
}
