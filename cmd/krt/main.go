// Command krt is the kruntimes command line: krt invoke calls a function
// Run through the runs/invoke subresource, with the kubeconfig kubectl uses.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kruntimes.io/kruntimes/cmd/krt/app"
)

func main() {
	os.Exit(app.Run(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
