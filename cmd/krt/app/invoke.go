package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// Exit codes of krt invoke besides ExitOK, ExitError and ExitUsage, so
// scripts tell what happened without parsing.
const (
	ExitFunctionError = 3 // the handler ran and failed
	ExitBusy          = 4 // 429: an invocation is in flight; it did not run
	ExitUnavailable   = 5 // 503: not Ready, recovering or unreachable; it did not run
	ExitTimeout       = 6 // 504: stopped at its deadline
	ExitUnknown       = 7 // 502: dispatched, outcome unknown
)

// invokeOptions are krt invoke's flags, and what Complete makes of them.
type invokeOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	file, data, invocationID, uid, output string
	timeout, retry                        time.Duration
	logs, verbose                         bool

	// name is the Run's; inputJSON the document to send.
	name      string
	inputJSON []byte
}

func newCmdInvoke(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, code *int) *cobra.Command {
	o := &invokeOptions{configFlags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "invoke NAME [-n NAMESPACE] [-f input.json | --data JSON]",
		Short: "Invoke a function Run once and print its output",
		Long: `Invoke a Ready function Run once through the runs/invoke subresource and
print the JSON its handler returned. The invocation is sent once unless
--retry says how long to keep sending it again. Exit codes: 0 success, 3 the handler failed (its error is printed),
4 busy (429: another invocation is in flight), 5 unavailable (kruntimes' 503
with Retry-After: not Ready, recovering or unreachable), 6 timed out (504),
7 outcome unknown (502, any other 5xx such as a proxy's plain 503, or a
connection that broke after the request was sent), 1 any other error, 2 bad
usage. Codes 4 and 5 guarantee the handler did not run; after 7 it may have.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				*code = ExitUsage
				return err
			}
			if err := o.Validate(); err != nil {
				*code = ExitUsage
				return err
			}
			*code = o.Run(cmd.Context())
			return nil
		},
	}
	cmd.Flags().StringVarP(&o.file, "filename", "f", "", "File holding the JSON input; - reads standard input.")
	cmd.Flags().StringVar(&o.data, "data", "", "The JSON input itself; {} when neither --data nor -f is given.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "How long the invocation may take (the request's timeout); the server's default (60s) when 0.")
	cmd.Flags().StringVar(&o.invocationID, "invocation-id", "", "Identifies the invocation (at most 128 bytes); generated when empty.")
	cmd.Flags().StringVar(&o.uid, "uid", "", "Invoke only the Run with this UID: a Run created again under the name answers 404.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "json prints the whole InvokeResult instead of the output alone.")
	cmd.Flags().BoolVar(&o.logs, "logs", false, "Print what the handler wrote to stdout and stderr, to standard error.")
	cmd.Flags().DurationVar(&o.retry, "retry", 0, "Send the invocation again, with the same invocation ID, after an answer that says it did not run (4, 5) or leaves its outcome unknown (7), until this long after the first attempt; 0 sends it once. Safe: krt then sends an ID of its own when --invocation-id is empty, and the runtimed that owns the function answers a repeat with the first attempt's recorded outcome instead of running the handler again, as long as the function stays on its Pod (docs/invoke.md, \"Retrying safely\"). A replayed answer is final.")
	cmd.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "Print the invocation ID, the answer's Server-Timing (where the time went: apiserver, runtimed, handler, warm or cold worker) and whether it was a replay of an earlier invocation with the same --invocation-id, to standard error.")
	return cmd
}

// Complete takes the Run's name and reads the input.
func (o *invokeOptions) Complete(args []string) error {
	o.name = args[0]
	input, err := o.input(o.In)
	if err != nil {
		return err
	}
	o.inputJSON = input
	return nil
}

// Validate checks the flags.
func (o *invokeOptions) Validate() error {
	if o.output != "" && o.output != "json" {
		return fmt.Errorf("--output must be json or empty, got %q", o.output)
	}
	if o.retry < 0 {
		return fmt.Errorf("--retry must not be negative, got %s", o.retry)
	}
	return nil
}

// Run invokes the Run, again with --retry, and prints the answer; it
// returns the exit code.
func (o *invokeOptions) Run(ctx context.Context) int {
	streams, name, input := o.IOStreams, o.name, o.inputJSON
	var answer *answerHeader
	if o.verbose || o.retry > 0 {
		answer = &answerHeader{}
	}
	runs, _, err := clientWith(o.configFlags, answer.wrap)
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return ExitError
	}
	id := o.invocationID
	if id == "" && o.retry > 0 {
		// Only an ID the caller sent is deduplicated.
		id = string(uuid.NewUUID())
	}
	first := time.Now()
	var result *v1alpha1.InvokeResult
attempts:
	for attempt := 1; ; attempt++ {
		answer.reset()
		started := time.Now()
		result, err = runs.Invoke(ctx, name, input,
			typedv1alpha1.InvokeOptions{UID: types.UID(o.uid), Timeout: o.timeout, InvocationID: id})
		if o.verbose {
			answer.print(streams.ErrOut, time.Since(started))
		}
		wait, again := retryWait(err, answer.replayed(), attempt)
		if !again || time.Since(first)+wait > o.retry {
			break
		}
		fmt.Fprintf(streams.ErrOut, "krt: attempt %d: %v; sending invocation %s again in %s\n", attempt, err, id, wait)
		select {
		case <-ctx.Done():
			break attempts // interrupted: the last answer stands
		case <-time.After(wait):
		}
	}
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "Error from server:", err)
		code := exitCodeOf(err)
		if code == ExitUnknown {
			// The one answer a script must not blindly retry.
			fmt.Fprintln(streams.ErrOut, "krt: the outcome is unknown: the invocation was sent and the handler may have run")
		}
		return code
	}
	if o.logs && result.Logs != nil {
		fmt.Fprint(streams.ErrOut, result.Logs.Stdout, result.Logs.Stderr)
	}
	if o.output == "json" {
		out, _ := json.MarshalIndent(result, "", "  ")
		fmt.Fprintln(streams.Out, string(out))
	} else if result.Error == nil {
		fmt.Fprintln(streams.Out, string(outputOf(result.Output.Raw)))
	}
	if result.Error != nil {
		fmt.Fprintf(streams.ErrOut, "the function failed (invocation %s): %s: %s\n", result.InvocationID, result.Error.Type, result.Error.Message)
		return ExitFunctionError
	}
	return ExitOK
}

// maxRetryWait bounds each wait of --retry.
const maxRetryWait = 5 * time.Second

// retryWait says whether --retry sends an invocation again after err, the
// answer to attempt, and how long it waits first: an answer that promises
// the handler did not run after its Retry-After; an unknown outcome that is
// not itself a replay after 0.1 s, twice as long each attempt.
func retryWait(err error, replayed bool, attempt int) (time.Duration, bool) {
	switch typedv1alpha1.ClassifyInvokeError(err) {
	case typedv1alpha1.InvokeNotRun:
		seconds, _ := apierrors.SuggestsClientDelay(err)
		return min(max(time.Duration(seconds)*time.Second, 50*time.Millisecond), maxRetryWait), true
	case typedv1alpha1.InvokeOutcomeUnknown:
		if replayed {
			return 0, false
		}
		return min(100*time.Millisecond<<min(attempt-1, 6), maxRetryWait), true
	}
	return 0, false
}

func outputOf(raw []byte) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	return raw
}

// input is the JSON document to send.
func (o *invokeOptions) input(stdin io.Reader) ([]byte, error) {
	switch {
	case o.file != "" && o.data != "":
		return nil, errors.New("pass the input with -f or --data, not both")
	case o.data != "":
		return o.valid([]byte(o.data), "--data")
	case o.file == "-":
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, err
		}
		return o.valid(data, "standard input")
	case o.file != "":
		data, err := os.ReadFile(o.file)
		if err != nil {
			return nil, err
		}
		return o.valid(data, o.file)
	}
	return []byte("{}"), nil
}

func (o *invokeOptions) valid(data []byte, from string) ([]byte, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("the input in %s is not valid JSON", from)
	}
	return data, nil
}

// exitCodeOf maps an error of Invoke to krt's exit code: 4 and 5 only
// where kruntimes promised the handler did not run.
func exitCodeOf(err error) int {
	switch typedv1alpha1.ClassifyInvokeError(err) {
	case typedv1alpha1.InvokeNotRun:
		if apierrors.IsTooManyRequests(err) {
			return ExitBusy
		}
		return ExitUnavailable
	case typedv1alpha1.InvokeTimedOut:
		return ExitTimeout
	case typedv1alpha1.InvokeOutcomeUnknown:
		return ExitUnknown
	}
	return ExitError
}
