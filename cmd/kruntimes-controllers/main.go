// Command kruntimes-controllers runs the kruntimes controllers outside
// kruntimes-apiserver, leader-elected with the ones it hosts.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"kruntimes.io/kruntimes/controllers/options"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(options.NewCommand(ctx, options.NewOptions())))
}
