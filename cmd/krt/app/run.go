package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// Exit codes of krt run besides the task's own (as timeout(1), env(1) and
// docker run use them; a task's own 124–130 cannot be told apart by the code).
const (
	ExitRunTimeout    = 124 // the Run ended as Timeout
	ExitRunKrtFailed  = 125 // krt failed, or the create was refused
	ExitRunNoExitCode = 126 // the Run Failed without an exit code (it could not start or run)
	ExitRunLost       = 129 // the connection was lost: list/watch failing for lostAfter
	ExitRunCancelled  = 130 // the Run ended as Cancelled, or a second Ctrl-C
)

// notifySignals subscribes c to the signals that cancel a Run; tests replace it.
var notifySignals = func(c chan<- os.Signal) func() {
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return func() { signal.Stop(c) }
}

// inlineCommand is the script of a Run created from `krt run -- COMMAND ARGS…`:
// the command and its arguments are the task's args.
const inlineCommand = "exec \"$@\"\n"

// errInterrupted: a second Ctrl-C.
var errInterrupted = errors.New("interrupted twice")

// runOptions are krt run's flags, and what Complete makes of them.
type runOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	runtime, name, file string
	env                 []string
	timeout             time.Duration
	wait                bool

	// args are the program's arguments (the command after --, or the
	// script's); source is the script, or inlineCommand.
	args   []string
	source string
}

const runLong = `Create a task Run, wait for it to end, print the kept log of each attempt
(its stdout to standard output unchanged, its stderr to standard error; krt's
own messages go to standard error) and exit with the task's exit code.

The program is a script (-f FILE, or -f - for standard input; arguments after
-- are passed to it) or a command after -- alone, which runs as exec "$@" in an
inline bash script: the Runtime (-r, default bash) must run bash scripts.

Each attempt's log is printed live as the program writes it (runs/log with
follow=true, kubectl logs -f's idiom), retries one after the other; the
follow of an attempt ends after its last byte. --wait waits for the end
without printing the log.

Ctrl-C or SIGTERM requests cancellation of the Run (spec.cancelRequested)
and keeps following it until it ends; a second Ctrl-C stops krt at once (the
Run is still cancelled).

Exit codes:
  0-255  the task's exit code (Succeeded, or Failed with an exit code)
  124    the Run ended as Timeout (spec.timeout, --timeout)
  125    krt failed, the flags were wrong, or the create was refused
  126    the Run Failed without an exit code (it could not start or run)
  129    the connection was lost (list and watch failed for 30s)
  130    the Run ended as Cancelled, or a second Ctrl-C
A task's own 124-130 cannot be told apart from krt's by the code.`

func newCmdRun(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, code *int) *cobra.Command {
	o := &runOptions{configFlags: flags, IOStreams: streams, runtime: "bash"}
	cmd := &cobra.Command{
		Use:   "run [-r RUNTIME] [--name N] [--env K=V]... [--timeout D] [--wait] (-f SCRIPT [-- ARGS...] | -- COMMAND ARGS...)",
		Short: "Run a task and print what it printed",
		Long:  runLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args, cmd.ArgsLenAtDash(), o.In); err != nil {
				*code = ExitRunKrtFailed
				return err
			}
			if err := o.Validate(); err != nil {
				*code = ExitRunKrtFailed
				return err
			}
			*code = o.Run(cmd.Context())
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		*code = ExitRunKrtFailed
		return err
	})
	cmd.Flags().StringVarP(&o.runtime, "runtime", "r", o.runtime, "The Runtime that runs the task; a command after -- needs one that runs bash.")
	cmd.Flags().StringVar(&o.name, "name", "", "The Run's name; generated (run-xxxxx) when empty.")
	cmd.Flags().StringArrayVar(&o.env, "env", nil, "An environment variable NAME=VALUE for the task; repeat for more.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "The Run's spec.timeout: it ends as Timeout (exit 124) past it; none when 0.")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Wait for the Run to end without printing its log.")
	cmd.Flags().StringVarP(&o.file, "filename", "f", "", "The script to run; - reads it from standard input.")
	return cmd
}

// Complete reads the program: the script of -f (from stdin with -f -), or
// the command after --. atDash is where -- was (cobra's ArgsLenAtDash: -1
// when absent).
func (o *runOptions) Complete(args []string, atDash int, stdin io.Reader) error {
	if atDash != 0 && len(args) > 0 {
		bad := args
		if atDash > 0 {
			bad = args[:atDash]
		}
		return fmt.Errorf("unexpected arguments %q: put the command after --", bad)
	}
	switch {
	case o.file == "-":
		data, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("reading the script from standard input: %w", err)
		}
		o.source = string(data)
	case o.file != "":
		data, err := os.ReadFile(o.file)
		if err != nil {
			return err
		}
		o.source = string(data)
	case len(args) == 0:
		return errors.New("give the script with -f SCRIPT or the command after --")
	default:
		o.source = inlineCommand
	}
	o.args = args
	return nil
}

// Validate checks the flags.
func (o *runOptions) Validate() error {
	if o.runtime == "" {
		return errors.New("--runtime must not be empty")
	}
	if o.timeout < 0 {
		return errors.New("--timeout must not be negative")
	}
	for _, kv := range o.env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
	}
	return nil
}

// newRun is the Run o describes, once completed and valid.
func (o *runOptions) newRun() *v1alpha1.Run {
	run := &v1alpha1.Run{
		Spec: v1alpha1.RunSpec{
			Runtime: o.runtime,
			Source:  v1alpha1.RunSource{Inline: o.source},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{Args: o.args}},
		},
	}
	if len(o.args) == 0 {
		run.Spec.Mode.Task.Args = nil
	}
	if o.name != "" {
		run.Name = o.name
	} else {
		run.GenerateName = "run-"
	}
	for _, kv := range o.env {
		name, value, _ := strings.Cut(kv, "=")
		run.Spec.Env = append(run.Spec.Env, v1alpha1.EnvVar{Name: name, Value: value})
	}
	if o.timeout > 0 {
		run.Spec.Timeout = &metav1.Duration{Duration: o.timeout}
	}
	return run
}

// runExitCode is krt run's exit code for a Run in a terminal phase.
func runExitCode(run *v1alpha1.Run) int {
	switch run.Status.Phase {
	case lifecycle.Succeeded:
		if run.Status.ExitCode != nil {
			return int(*run.Status.ExitCode)
		}
		return ExitOK
	case lifecycle.Failed:
		if run.Status.ExitCode != nil && *run.Status.ExitCode != 0 {
			return int(*run.Status.ExitCode)
		}
		return ExitRunNoExitCode
	case lifecycle.Timeout:
		return ExitRunTimeout
	case lifecycle.Cancelled:
		return ExitRunCancelled
	}
	return ExitRunKrtFailed
}

// Run creates the Run, prints each attempt's log as it is written (not
// with --wait) and returns the exit code its end calls for.
func (o *runOptions) Run(ctx context.Context) int {
	if ctx == nil {
		ctx = context.Background()
	}
	streams, run, wait := o.IOStreams, o.newRun(), o.wait
	// The follows write while krt does: one writer at a time.
	var mu sync.Mutex
	streams.Out = &lockedWriter{mu: &mu, w: streams.Out}
	streams.ErrOut = &lockedWriter{mu: &mu, w: streams.ErrOut}
	runs, _, err := clientFor(o.configFlags)
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return ExitRunKrtFailed
	}
	// Signals are watched from before the create, so a Ctrl-C right after
	// it still cancels the Run.
	sigs := make(chan os.Signal, 2)
	stop := notifySignals(sigs)
	defer stop()

	created, err := runs.Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		fmt.Fprintln(streams.ErrOut, "Error from server:", err)
		return ExitRunKrtFailed
	}
	fmt.Fprintf(streams.ErrOut, "run/%s created\n", created.Name)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		cancelled := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				if cancelled {
					fmt.Fprintln(streams.ErrOut, "interrupted again: stopping (the Run is cancelled)")
					cancel(errInterrupted)
					return
				}
				cancelled = true
				fmt.Fprintf(streams.ErrOut, "cancelling run/%s (Ctrl-C again to stop waiting)\n", created.Name)
				if err := requestCancel(ctx, runs, created.Name); err != nil {
					fmt.Fprintln(streams.ErrOut, "error: cancelling:", err)
				}
			}
		}
	}()

	var latest atomic.Pointer[v1alpha1.Run]
	latest.Store(created)
	changed := make(chan struct{}, 1)
	followed := make(chan struct{})
	if wait {
		close(followed)
	} else {
		defer func() { cancel(nil); <-followed }()
		go func() {
			defer close(followed)
			followAttempts(ctx, runs, streams, created.Name, &latest, changed)
		}()
	}
	final, err := untilTerminal(ctx, runs, created, func(r *v1alpha1.Run) {
		latest.Store(r)
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		switch {
		case errors.Is(err, errInterrupted):
			return ExitRunCancelled
		case errors.Is(err, errLost):
			fmt.Fprintf(streams.ErrOut, "error: %v: list and watch of run/%s failed for %s\n", errLost, created.Name, lostAfter)
			return ExitRunLost
		}
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return ExitRunKrtFailed
	}
	latest.Store(final)
	select {
	case changed <- struct{}{}:
	default:
	}
	// The last attempt's follow ends after its last byte.
	select {
	case <-followed:
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), errInterrupted) {
			return ExitRunCancelled
		}
	}
	code := runExitCode(final)
	fmt.Fprintf(streams.ErrOut, "run/%s %s%s\n", final.Name, final.Status.Phase, describeEnd(final))
	return code
}

// followAttempts prints the log of each attempt live, one attempt after the
// other, as the server streams it (runs/log?follow=true): stdout to standard
// output and stderr to standard error, each byte-exact, by two follows of
// one stream each. latest is the Run as last seen; changed ticks when it
// changes. It returns once the attempt the Run ended with was printed.
func followAttempts(ctx context.Context, runs typedv1alpha1.RunInterface, streams genericiooptions.IOStreams, name string, latest *atomic.Pointer[v1alpha1.Run], changed <-chan struct{}) {
	for n := int32(1); ; n++ {
		// Attempt n exists once the Run counts it (the first always does).
		for n > 1 && latest.Load().Status.Attempt < n {
			if lifecycle.IsTerminal(latest.Load().Status.Phase) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
		if n > 1 {
			fmt.Fprintf(streams.ErrOut, "--- attempt %d ---\n", n)
		}
		var wg sync.WaitGroup
		for _, s := range []struct {
			stream string
			to     io.Writer
		}{{"Stdout", streams.Out}, {"Stderr", streams.ErrOut}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				followAttempt(ctx, runs, streams, name, n, s.stream, s.to, latest)
			}()
		}
		wg.Wait()
		if r := latest.Load(); lifecycle.IsTerminal(r.Status.Phase) && r.Status.Attempt <= n {
			return
		}
	}
}

// followAttempt copies one stream of attempt n as the server follows it.
// A follow ends after the attempt's last byte; one that ended without a
// byte while the attempt had not ended yet (the server waits a bounded
// time for a first byte) is started again: nothing was printed, so
// nothing repeats.
func followAttempt(ctx context.Context, runs typedv1alpha1.RunInterface, streams genericiooptions.IOStreams, name string, n int32, stream string, to io.Writer, latest *atomic.Pointer[v1alpha1.Run]) {
	ended := func() bool {
		r := latest.Load()
		return r.Status.Attempt > n || lifecycle.IsTerminal(r.Status.Phase)
	}
	for {
		attempt := n
		body, err := runs.GetLogs(name, &v1alpha1.RunLogOptions{Follow: true, Attempt: &attempt, Stream: stream}).Stream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if ended() {
				fmt.Fprintf(streams.ErrOut, "warning: the log of attempt %d (%s): %v\n", n, stream, err)
				return
			}
		} else {
			copied, err := io.Copy(to, body)
			body.Close()
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(streams.ErrOut, "warning: reading the log of attempt %d (%s): %v\n", n, stream, err)
			}
			if copied > 0 || ended() || ctx.Err() != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(followAgain):
		}
	}
}

// lockedWriter serializes the writes of krt and its follows.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// followAgain is how long krt run waits before following an attempt again
// that printed nothing yet.
const followAgain = 200 * time.Millisecond
