// Command kruntimes-apiserver serves the kruntimes.io API as a Kubernetes
// aggregated API server.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"kruntimes.io/kruntimes/apiserver/options"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	cmd := options.NewCommand(ctx, options.NewServerOptions(os.Stdout, os.Stderr))
	os.Exit(cli.Run(cmd))
}
