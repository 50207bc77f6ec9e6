// Package app is the krt command line: the root command with kubectl's
// kubeconfig flags (from cli-runtime) and a file per command, as kubectl's
// pkg/cmd/<verb>: its options, Complete (arguments and input), Validate
// (flags alone), Run (the kubeconfig, the clients, the work) and exit codes.
package app

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/cmd/krt/mcpserver"
	"kruntimes.io/kruntimes/version"
)

// Exit codes every command shares; invoke and run have their own besides.
const (
	ExitOK    = 0
	ExitError = 1 // anything else: a bad request, forbidden, not found …
	ExitUsage = 2
)

// Run runs krt with args and returns its exit code.
func Run(args []string, streams genericiooptions.IOStreams) int {
	code := ExitOK
	root := &cobra.Command{
		Use:           "krt",
		Short:         "Work with kruntimes Runs",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
	}
	flags := genericclioptions.NewConfigFlags(true)
	flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newCmdInvoke(flags, streams, &code))
	root.AddCommand(newCmdLogs(flags, streams, &code))
	root.AddCommand(newCmdRun(flags, streams, &code))
	root.AddCommand(newCmdCancel(flags, streams, &code))
	root.AddCommand(newCmdExec(flags, streams, &code))
	root.AddCommand(newCmdCp(flags, streams, &code))
	root.AddCommand(failsWith(mcpserver.NewCmdMCP(flags, streams), &code, ExitError))
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(streams.ErrOut, "error:", err)
		if code == ExitOK {
			code = ExitUsage
		}
	}
	return code
}

// failsWith makes cmd exit with exit when its RunE returns an error; an
// error before it (a flag that does not parse) stays ExitUsage.
func failsWith(cmd *cobra.Command, code *int, exit int) *cobra.Command {
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		err := run(cmd, args)
		if err != nil {
			*code = exit
		}
		return err
	}
	return cmd
}

// clientFor is the Runs client of the kubeconfig's namespace.
func clientFor(flags *genericclioptions.ConfigFlags) (typedv1alpha1.RunInterface, string, error) {
	return clientWith(flags, nil)
}

// clientWith is clientFor with wrap (when not nil) around the transport.
func clientWith(flags *genericclioptions.ConfigFlags, wrap func(http.RoundTripper) http.RoundTripper) (typedv1alpha1.RunInterface, string, error) {
	config, err := flags.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	if wrap != nil {
		config = rest.CopyConfig(config)
		config.Wrap(wrap)
	}
	namespace, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return nil, "", err
	}
	return client.KruntimesV1alpha1().Runs(namespace), namespace, nil
}
