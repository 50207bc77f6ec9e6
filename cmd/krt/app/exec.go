package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// execWaitSlice is the longest one wait_command operation waits, well
// within an invocation's default deadline; krt exec sends another until
// the command ends.
const execWaitSlice = 45 * time.Second

// ExitInterrupted is krt exec's exit code when it was interrupted and
// killed the command, as a shell reports SIGINT.
const ExitInterrupted = 130

// execOptions are krt exec's flags, the sandbox's name and the command.
type execOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	cwd     string
	env     []string
	timeout time.Duration

	name string
	argv []string
}

func newCmdExec(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, code *int) *cobra.Command {
	o := &execOptions{configFlags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [-n NAMESPACE] [--cwd DIR] [--env K=V]... [--timeout D] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox, printing its output as it comes",
		Long: `Run a command in a sandbox (a function Run with the handler
kruntimes.sandbox), as kubectl exec runs one in a Pod: it starts in the
sandbox's workspace, its stdout and stderr are printed to krt's as the
command writes them (followed through runs/log?command=ID), and krt exits
with the command's exit code (128 + N for a command killed by signal N).
Interrupting krt kills the command and every process it started (exit 130).
The command reads no stdin. Errors of krt itself exit 1 (2 bad usage).`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(cmd, args); err != nil {
				*code = ExitUsage
				return err
			}
			*code = o.Run(cmd.Context())
			return nil
		},
	}
	cmd.Flags().StringVar(&o.cwd, "cwd", "", "The working directory, a path in the sandbox's workspace.")
	cmd.Flags().StringArrayVar(&o.env, "env", nil, "An environment variable K=V added to the command's; repeatable.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "Kill the command and every process it started after this long; 0 never.")
	return cmd
}

// Complete takes the sandbox's name and the command after --.
func (o *execOptions) Complete(cmd *cobra.Command, args []string) error {
	if dash := cmd.ArgsLenAtDash(); dash != 1 {
		return errors.New("name the sandbox, then the command after --: krt exec SANDBOX -- COMMAND [ARG...]")
	}
	if o.timeout < 0 {
		return errors.New("--timeout must not be negative")
	}
	for _, kv := range o.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("--env %q is not K=V", kv)
		}
	}
	o.name, o.argv = args[0], args[1:]
	return nil
}

// Run starts the command, relays its output and waits for its end; it
// returns the command's exit code, or krt's own.
func (o *execOptions) Run(ctx context.Context) int {
	runs, _, err := clientFor(o.configFlags)
	if err != nil {
		fmt.Fprintln(o.ErrOut, "error:", err)
		return ExitError
	}
	start := map[string]any{"op": "start_command", "cmd": o.argv}
	if o.cwd != "" {
		start["cwd"] = o.cwd
	}
	if len(o.env) > 0 {
		env := map[string]string{}
		for _, kv := range o.env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		start["env"] = env
	}
	if o.timeout > 0 {
		start["timeout"] = o.timeout.Seconds()
	}
	started, err := sandboxOp(ctx, runs, o.name, start, 0)
	if err != nil {
		fmt.Fprintln(o.ErrOut, "error:", err)
		return ExitError
	}
	id, _ := started["id"].(string)
	if id == "" {
		fmt.Fprintf(o.ErrOut, "error: start_command answered no id: %v\n", started)
		return ExitError
	}

	interrupted, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var relays sync.WaitGroup
	for stream, w := range map[string]io.Writer{"Stdout": o.Out, "Stderr": o.ErrOut} {
		body, err := runs.GetLogs(o.name, &v1alpha1.RunLogOptions{Follow: true, Command: id, Stream: stream}).Stream(ctx)
		if err != nil {
			fmt.Fprintf(o.ErrOut, "krt: cannot follow the %s of command %s: %v\n", strings.ToLower(stream), id, err)
			continue
		}
		relays.Add(1)
		go func() {
			defer relays.Done()
			defer body.Close()
			_, _ = io.Copy(w, body)
		}()
	}
	for {
		status, err := sandboxOp(interrupted, runs, o.name, map[string]any{"op": "wait_command", "id": id, "timeout": execWaitSlice.Seconds()}, execWaitSlice)
		if interrupted.Err() != nil && ctx.Err() == nil {
			// Killed with a context of its own: the interrupted one is done.
			kill, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, kerr := sandboxOp(kill, runs, o.name, map[string]any{"op": "kill_command", "id": id}, 0)
			cancel()
			if kerr != nil {
				fmt.Fprintf(o.ErrOut, "krt: interrupted, and killing command %s failed: %v\n", id, kerr)
			}
			return ExitInterrupted
		}
		if err != nil {
			fmt.Fprintln(o.ErrOut, "error:", err)
			return ExitError
		}
		if running, _ := status["running"].(bool); running {
			continue
		}
		// The follows end once the command's log closed, right after it.
		relays.Wait()
		code, ok := status["exit_code"].(float64)
		if !ok {
			fmt.Fprintf(o.ErrOut, "error: command %s ended without an exit code: %v\n", id, status)
			return ExitError
		}
		return int(code)
	}
}

// sandboxOp sends one sandbox operation and returns its answer; a
// function error (a refused path, an unknown command) is an error. timeout,
// when set, is the operation's own: the invocation may take a little more.
func sandboxOp(ctx context.Context, runs typedv1alpha1.RunInterface, name string, op map[string]any, timeout time.Duration) (map[string]any, error) {
	input, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	opts := typedv1alpha1.InvokeOptions{}
	if timeout > 0 {
		opts.Timeout = timeout + 5*time.Second
	}
	result, err := runs.Invoke(ctx, name, input, opts)
	if err != nil {
		return nil, err
	}
	if result.Error != nil {
		return nil, fmt.Errorf("the sandbox refused %s (invocation %s): %s: %s", op["op"], result.InvocationID, result.Error.Type, result.Error.Message)
	}
	var out map[string]any
	if err := json.Unmarshal(result.Output.Raw, &out); err != nil {
		return nil, fmt.Errorf("%s answered %q, not a JSON object: is %s a sandbox (handler kruntimes.sandbox)?", op["op"], result.Output.Raw, name)
	}
	return out, nil
}
