package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimes/process"
	"kruntimes.io/kruntimes/runtimes/server"
	"kruntimes.io/kruntimes/version"
)

// NewCommand returns the kruntimes-runtime command, which serves until ctx
// ends. It takes klog's flags, not component-base's logging options: this
// binary also starts user programs (see runtimes/process), so it links as
// little as it can.
func NewCommand(ctx context.Context, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kruntimes-runtime",
		Short: "Serve the Runtime Server API for one language on a unix socket",
		Long: `kruntimes-runtime is the Runtime Server in the runtime container of a Runtime
Pod: over the unix socket of --listen, runtimed hands it task Runs to execute
and function Runs to register and invoke, in bash or Python.`,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			defer klog.Flush()
			return o.Run(klog.NewContext(c.Context(), klog.Background()))
		},
		SilenceUsage: true,
		Version:      version.Get().String(),
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cmd.Flags().AddGoFlagSet(klogFlags)
	return cmd
}

// Run serves the Runtime Server on --listen until ctx ends, then lets calls
// in flight finish for --shutdown-timeout and stops every user process.
func (o *Options) Run(ctx context.Context) error {
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
	path, _ := runtimepod.SocketPath(o.Listen)
	cfg := o.Config(stateDir)
	cfg.Sweeper = server.NewSweeper(sweptDirs(stateDir, path), []string{stateDir, path})
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	// After Config, whose interpreter lookup is the one child not started
	// by process.Start.
	if err := process.GuardOrphans(ctx); err != nil {
		if runtime.GOOS == "linux" {
			return err
		}
		logger.Info("User code may outlive its reaper here", "reason", err)
	}

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
	if n := srv.Registrations(); n > 0 && o.ReleaseTimeout > 0 {
		// runtimed got SIGTERM too: it needs this server to finish what is
		// in flight and to unregister each function it gives back.
		logger.Info("Shutting down once runtimed released the registered functions", "registered", n, "releaseTimeout", o.ReleaseTimeout)
		releaseCtx, cancel := context.WithTimeout(context.Background(), o.ReleaseTimeout)
		err := srv.WaitReleased(releaseCtx)
		cancel()
		if err != nil {
			logger.Info("Functions still registered after the release timeout; shutting down anyway", "registered", srv.Registrations())
		}
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

// sweptDirs are the directories Runs share that the server sweeps when it
// goes idle (server.Sweeper): its state directory always, since it is its
// own; and, only when it is its container's init, so that whatever of its
// user they hold is its Runs', its socket's directory, the container's
// temporary directories and its HOME. As any other process (the process-Pod
// node, a server started by hand with its socket in /tmp) it touches
// nothing but its state directory.
func sweptDirs(stateDir, socket string) []string {
	dirs := []string{stateDir}
	if os.Getpid() != 1 {
		return dirs
	}
	if socket != "" {
		dirs = append(dirs, filepath.Dir(socket))
	}
	dirs = append(dirs, os.TempDir(), "/var/tmp", "/dev/shm")
	if home := os.Getenv("HOME"); home != "" {
		dirs = append(dirs, home)
	}
	return dirs
}
