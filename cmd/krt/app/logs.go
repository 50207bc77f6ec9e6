package app

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// logsOptions are krt logs' flags, and the Run's name.
type logsOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	follow, timestamps        bool
	tail, limitBytes, attempt int64
	stream, command           string

	name string
}

func newCmdLogs(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, code *int) *cobra.Command {
	o := &logsOptions{configFlags: flags, IOStreams: streams, tail: -1}
	cmd := &cobra.Command{
		Use:   "logs NAME [-n NAMESPACE] [-f] [--tail N] [--limit-bytes N] [--attempt N] [--timestamps] [--stream All|Stdout|Stderr] [--command ID]",
		Short: "Print what a task Run printed",
		Long: `Print the kept log of an attempt of a task Run (the runs/log subresource):
stdout and stderr in the order they were written, the bytes exactly as the
program wrote them. Without -f it prints what is kept: an attempt's log is
kept once it ends. With -f it follows the attempt live, as kubectl logs -f
does, and ends after the attempt's last byte (a Run that has not started is
waited for, for a bounded time). Of a function Run only -f is served: it
prints what its invocations write, each line prefixed with
[invocation/ID], and ends when the Run ends; nothing of it is kept.
With --command it prints the output of a sandbox's background command
instead (the id start_command answered): what it wrote so far, or with -f
live until the command ends.
Exit codes: 0 printed, 1 any error, 2 bad usage.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				*code = ExitUsage
				return err
			}
			*code = o.Run(cmd.Context())
			return nil
		},
	}
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "Follow the log live until the attempt ends.")
	cmd.Flags().Int64Var(&o.tail, "tail", o.tail, "Lines from the end to print; -1 prints all.")
	cmd.Flags().Int64Var(&o.limitBytes, "limit-bytes", 0, "Most bytes to print; 0 means no limit.")
	cmd.Flags().Int64Var(&o.attempt, "attempt", 0, "The attempt to print (1-based); 0 means the latest.")
	cmd.Flags().BoolVar(&o.timestamps, "timestamps", false, "Prefix each line with the time it was written.")
	cmd.Flags().StringVar(&o.stream, "stream", "", "All (default), Stdout or Stderr.")
	cmd.Flags().StringVar(&o.command, "command", "", "The id of a background command of a sandbox (a function Run) to print the output of.")
	return cmd
}

// logOptions are the runs/log options o asks for.
func (o *logsOptions) logOptions() *v1alpha1.RunLogOptions {
	opts := &v1alpha1.RunLogOptions{Follow: o.follow, Timestamps: o.timestamps, Stream: o.stream, Command: o.command}
	if o.tail >= 0 {
		opts.TailLines = &o.tail
	}
	if o.limitBytes > 0 {
		opts.LimitBytes = &o.limitBytes
	}
	if o.attempt > 0 {
		a := int32(o.attempt)
		opts.Attempt = &a
	}
	return opts
}

// Complete takes the Run's name.
func (o *logsOptions) Complete(args []string) {
	o.name = args[0]
}

// Validate checks the flags.
func (o *logsOptions) Validate() error {
	if o.attempt < 0 || o.attempt > 1<<31-1 {
		return fmt.Errorf("--attempt must be between 0 and %d", 1<<31-1)
	}
	return nil
}

// Run prints the log, or follows it; it returns the exit code.
func (o *logsOptions) Run(ctx context.Context) int {
	streams, name := o.IOStreams, o.name
	runs, _, err := clientFor(o.configFlags)
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return ExitError
	}
	body, err := runs.GetLogs(name, o.logOptions()).Stream(ctx)
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "Error from server:", err)
		if apierrors.IsNotFound(err) && o.command == "" {
			fmt.Fprintln(streams.ErrOut, "(a server older than runs/log answers 404 for every Run: check `kubectl get --raw /apis/kruntimes.io/v1alpha1` lists runs/log)")
		}
		return ExitError
	}
	defer body.Close()
	// Copied unchanged: the bytes are the program's.
	if _, err := io.Copy(streams.Out, body); err != nil {
		fmt.Fprintln(streams.ErrOut, "error: reading the log:", err)
		return ExitError
	}
	return ExitOK
}
