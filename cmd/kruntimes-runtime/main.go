package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/process"
	"kruntimes.io/kruntimes/runtimes/python"
	"kruntimes.io/kruntimes/runtimes/server"
	"kruntimes.io/kruntimes/version"
)

// maxSpareWorkers bounds --spare-workers: each is an idle interpreter.
const maxSpareWorkers = 64

// options are the command's flags.
type options struct {
	// Version prints the version and exits.
	Version         bool
	Language        string
	Listen          string
	Interpreter     string
	SpareWorkers    int
	StateDir        string
	ShutdownTimeout time.Duration
	// MaxProcs is GOMAXPROCS unless $GOMAXPROCS is set; 0 leaves it to Go.
	MaxProcs int
}

func newOptions() *options {
	return &options{
		Listen:          "unix:///run/kruntimes/runtime.sock",
		SpareWorkers:    2,
		ShutdownTimeout: 10 * time.Second,
		// The server's own work per call is small next to its workers'
		// (separate processes), and handing a call between goroutines on
		// one thread costs far less CPU than waking a second one for each
		// step (BenchmarkInvokeFunction*, docs/benchmarks.md).
		MaxProcs: 1,
	}
}

func (o *options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Version, "version", o.Version, "Print the version and exit.")
	fs.StringVar(&o.Language, "language", o.Language, "Language to serve: bash or python.")
	fs.StringVar(&o.Listen, "listen", o.Listen, "Where to serve the Runtime Server API; only unix:// sockets are accepted because user code must never be reachable from the network.")
	fs.StringVar(&o.Interpreter, "interpreter", o.Interpreter, "Interpreter binary; defaults to bash or python3 from PATH.")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "Private directory for inline scripts and outputs files; a fresh temporary directory when empty.")
	fs.IntVar(&o.SpareWorkers, "spare-workers", o.SpareWorkers, "Python only: warm workers kept started ahead of registrations, so a registration costs importing its handler instead of starting an interpreter; 0 starts one per registration.")
	fs.IntVar(&o.MaxProcs, "gomaxprocs", o.MaxProcs, "Most threads executing this server's Go code at once (GOMAXPROCS), unless $GOMAXPROCS is set; 0 leaves it to Go, which takes the CPUs the container may use. User programs and workers are not limited by it.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long to let in-flight calls finish on SIGTERM before killing all user processes.")
}

func (o *options) Validate() error {
	var errs []error
	if o.Language != "bash" && o.Language != "python" {
		errs = append(errs, fmt.Errorf("--language must be bash or python, got %q", o.Language))
	}
	if _, err := socketPath(o.Listen); err != nil {
		errs = append(errs, err)
	}
	if o.MaxProcs < 0 {
		errs = append(errs, fmt.Errorf("--gomaxprocs must not be negative, got %d", o.MaxProcs))
	}
	if o.SpareWorkers < 0 || o.SpareWorkers > maxSpareWorkers {
		errs = append(errs, fmt.Errorf("--spare-workers must be between 0 and %d, got %d", maxSpareWorkers, o.SpareWorkers))
	}
	return errors.Join(errs...)
}

func socketPath(listen string) (string, error) {
	path, ok := strings.CutPrefix(listen, "unix://")
	if !ok || path == "" {
		return "", fmt.Errorf("--listen must be unix:///path/to.sock, got %q", listen)
	}
	return path, nil
}

func (o *options) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if o.MaxProcs > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(o.MaxProcs)
	}
	stateDir := o.StateDir
	if stateDir == "" {
		dir, err := os.MkdirTemp("", "kruntimes-runtime-")
		if err != nil {
			return fmt.Errorf("create state directory: %w", err)
		}
		defer os.RemoveAll(dir)
		stateDir = dir
	}

	var lang language.Language
	var functions language.FunctionLoader
	switch o.Language {
	case "bash":
		l := bash.New(o.Interpreter, stateDir)
		lang, functions = l, l
	case "python":
		l := python.New(o.Interpreter)
		if o.SpareWorkers > 0 {
			l.KeepSpares(o.SpareWorkers, os.Environ(), stateDir)
		}
		lang, functions = l, l
	}
	srv, err := server.New(server.Options{Language: lang, Functions: functions, StateDir: stateDir, BaseEnv: os.Environ()})
	if err != nil {
		return err
	}

	path, _ := socketPath(o.Listen)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create socket directory: %w", err)
	}
	// A socket left by a previous, crashed server would make Listen fail.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	gs := grpc.NewServer(transport.ServerOptions()...)
	srv.Register(gs)

	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	logger.Info("Runtime Server serving", "language", o.Language, "socket", path)

	select {
	case err := <-serveErr:
		srv.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("Shutting down")
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.ShutdownTimeout):
		gs.Stop()
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	srv.Close(closeCtx)
	return nil
}

func main() {
	// First: in a reaper this runs the user program and never returns.
	process.Init()
	o := newOptions()
	fs := pflag.NewFlagSet("kruntimes-runtime", pflag.ExitOnError)
	o.AddFlags(fs)
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])
	if o.Version {
		fmt.Println("kruntimes-runtime version " + version.Get().String())
		return
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := o.Run(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Runtime Server failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
