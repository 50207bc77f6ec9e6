// Command kruntimes-runtime is the Runtime Server of a Runtime Pod, serving
// the Runtime Server API for bash or Python on a unix socket.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"kruntimes.io/kruntimes/runtimes/options"
	"kruntimes.io/kruntimes/runtimes/process"
)

func main() {
	// First: in a reaper this runs the user program and never returns.
	process.Init()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := options.NewCommand(ctx, options.NewOptions()).Execute(); err != nil {
		os.Exit(1)
	}
}
