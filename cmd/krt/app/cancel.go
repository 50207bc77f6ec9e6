package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// cancelPatch is the JSON merge patch that asks kruntimes to cancel a Run
// (spec.cancelRequested may only go from false to true).
const cancelPatch = `{"spec":{"cancelRequested":true}}`

// cancelOptions are krt cancel's flags, and the Run's name.
type cancelOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	wait    bool
	timeout time.Duration

	name string
}

func newCmdCancel(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, code *int) *cobra.Command {
	o := &cancelOptions{configFlags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "cancel NAME [-n NAMESPACE] [--wait] [--timeout D]",
		Short: "Request cancellation of a Run",
		Long: `Request cancellation of a Run: sets spec.cancelRequested with a merge patch.
kruntimes then stops the Run and it ends as Cancelled (or in the terminal
phase it reached first). --wait waits until the Run is in a terminal phase
and prints it. Exit codes: 0 requested (with --wait: the Run ended), 1 any
error or --timeout passed while waiting, 2 bad usage.`,
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
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Wait until the Run is in a terminal phase.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "With --wait, how long to wait; 0 waits without limit.")
	return cmd
}

func requestCancel(ctx context.Context, runs typedv1alpha1.RunInterface, name string) error {
	_, err := runs.Patch(ctx, name, types.MergePatchType, []byte(cancelPatch), metav1.PatchOptions{})
	return err
}

// Complete takes the Run's name.
func (o *cancelOptions) Complete(args []string) {
	o.name = args[0]
}

// Validate checks the flags.
func (o *cancelOptions) Validate() error {
	if o.timeout < 0 {
		return errors.New("--timeout must not be negative")
	}
	return nil
}

// Run requests the cancellation and, with --wait, waits for the end; it
// returns the exit code.
func (o *cancelOptions) Run(ctx context.Context) int {
	if ctx == nil {
		ctx = context.Background()
	}
	streams, name := o.IOStreams, o.name
	runs, _, err := clientFor(o.configFlags)
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return ExitError
	}
	run, err := runs.Patch(ctx, name, types.MergePatchType, []byte(cancelPatch), metav1.PatchOptions{})
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "Error from server:", err)
		return ExitError
	}
	fmt.Fprintf(streams.Out, "run/%s cancel requested\n", run.Name)
	if !o.wait {
		return ExitOK
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	final, err := untilTerminal(ctx, runs, run, func(*v1alpha1.Run) {})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			fmt.Fprintf(streams.ErrOut, "error: run/%s did not end within %s\n", name, o.timeout)
		} else {
			fmt.Fprintln(streams.ErrOut, "error:", err)
		}
		return ExitError
	}
	fmt.Fprintf(streams.Out, "run/%s %s%s\n", final.Name, final.Status.Phase, describeEnd(final))
	return ExitOK
}
