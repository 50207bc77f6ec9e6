// Command localcluster runs the kruntimes local cluster in the foreground
// until SIGINT or SIGTERM: etcd, kube-apiserver, kube-controller-manager, a
// local node agent and kruntimes-apiserver behind a real APIService.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"kruntimes.io/kruntimes/test/localcluster/options"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := options.NewCommand(ctx, options.NewOptions(os.Stdout)).Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}
