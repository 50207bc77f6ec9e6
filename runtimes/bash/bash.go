package bash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/outputs"
	"kruntimes.io/kruntimes/runtimes/process"
)

// Language runs Bash tasks and functions.
type Language struct {
	// Interpreter is the bash binary, looked up on PATH when not absolute.
	Interpreter string
	// ScratchDir holds per-invocation outputs files; the system temp dir when
	// empty.
	ScratchDir string
}

var (
	_ language.Language       = (*Language)(nil)
	_ language.FunctionLoader = (*Language)(nil)
)

// New returns the adapter for the given interpreter ("bash" when empty).
func New(interpreter, scratchDir string) *Language {
	if interpreter == "" {
		interpreter = "bash"
	}
	return &Language{Interpreter: interpreter, ScratchDir: scratchDir}
}

// Name implements language.Language.
func (l *Language) Name() string { return "bash" }

// TaskArgv implements language.Language.
func (l *Language) TaskArgv(file string, args []string) []string {
	return append([]string{l.Interpreter, file}, args...)
}

// LoadFunction implements language.FunctionLoader. Nothing stays warm for
// Bash, so loading only checks that the handler script is there.
func (l *Language) LoadFunction(_ context.Context, spec language.FunctionSpec) (language.Function, error) {
	script, err := HandlerPath(spec.WorkingDir, spec.Handler)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(script)
	if err != nil {
		return nil, fmt.Errorf("handler script %q: %w; materialize the source before registering", spec.Handler, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("handler %q is not a regular file", spec.Handler)
	}
	scratch, err := os.MkdirTemp(l.ScratchDir, "bash-fn-")
	if err != nil {
		return nil, fmt.Errorf("create scratch dir: %w", err)
	}
	return &function{interpreter: l.Interpreter, spec: spec, script: script, scratch: scratch, running: map[*process.Group]struct{}{}}, nil
}

// HandlerPath resolves a handler script relative to workingDir and refuses
// paths that leave it.
func HandlerPath(workingDir, handler string) (string, error) {
	if handler == "" || filepath.IsAbs(handler) {
		return "", fmt.Errorf("handler %q must be a script path relative to the working directory", handler)
	}
	clean := filepath.Clean(handler)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("handler %q must stay inside the working directory", handler)
	}
	return filepath.Join(workingDir, clean), nil
}

type function struct {
	interpreter string
	spec        language.FunctionSpec
	script      string
	scratch     string

	mu      sync.Mutex
	seq     int
	closed  bool
	running map[*process.Group]struct{}
}

var errClosed = errors.New("function was unregistered")

// Invoke implements language.Function.
func (f *function) Invoke(ctx context.Context, inv language.Invocation) (*language.Result, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errClosed
	}
	f.seq++
	outputsFile := filepath.Join(f.scratch, "outputs-"+strconv.Itoa(f.seq))
	f.mu.Unlock()
	defer os.Remove(outputsFile)

	var deadline int64
	if !inv.Deadline.IsZero() {
		deadline = inv.Deadline.UnixNano()
	}
	env := append(append([]string(nil), f.spec.Env...),
		language.EnvOutputs+"="+outputsFile,
		language.EnvInvocationID+"="+inv.ID,
		language.EnvRunUID+"="+inv.RunUID,
		language.EnvDeadlineUnixNano+"="+strconv.FormatInt(deadline, 10),
	)
	// One byte past the limit tells "exactly 1 MiB" from "too much".
	stdout := process.NewHeadCapture(invocation.MaxOutputBytes + 1)
	stderr := process.NewTailCapture(language.MaxInvocationLogBytes)
	group, err := process.Start(process.Spec{
		Argv:   []string{f.interpreter, f.script},
		Dir:    f.spec.WorkingDir,
		Env:    env,
		Stdin:  inv.Input,
		Stdout: stdout,
		Stderr: stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("start handler: %w", err)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		group.Kill()
		_, _ = group.Wait()
		return nil, errClosed
	}
	f.running[group] = struct{}{}
	f.mu.Unlock()

	stop := context.AfterFunc(ctx, group.Kill)
	code, waitErr := group.Wait()
	stop()
	f.mu.Lock()
	delete(f.running, group)
	closed := f.closed
	f.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("invocation interrupted: %w", err)
	}
	if closed {
		return nil, errClosed
	}
	if waitErr != nil {
		return nil, fmt.Errorf("wait for handler: %w", waitErr)
	}

	res := &language.Result{
		ContentType:     invocation.ContentTypeJSON,
		Stderr:          stderr.Bytes(),
		StderrTruncated: stderr.Truncated(),
	}
	if code != 0 {
		res.Error = &language.FunctionError{
			Type:    "NonZeroExit",
			Message: fmt.Sprintf("handler %s exited with code %d", f.spec.Handler, code),
			Stack:   string(language.Truncate(res.Stderr, language.MaxErrorStackBytes, true)),
		}
		return res, nil
	}
	if stdout.Truncated() {
		res.Error = &language.FunctionError{Type: "OutputTooLarge", Message: fmt.Sprintf("handler wrote more than %d bytes to stdout", invocation.MaxOutputBytes)}
		return res, nil
	}
	res.Output = jsonOutput(stdout.Bytes())
	out, err := outputs.ReadFile(outputsFile)
	if err != nil {
		res.Error = &language.FunctionError{Type: outputsErrorType(err), Message: err.Error()}
		return res, nil
	}
	res.Outputs = out
	return res, nil
}

// jsonOutput returns stdout itself when it is JSON, and stdout as a JSON
// string otherwise, so scripts may print either. A trailing newline does not
// make JSON invalid, and empty stdout is null.
func jsonOutput(stdout []byte) []byte {
	trimmed := bytes.TrimSpace(stdout)
	if len(trimmed) == 0 {
		return []byte("null")
	}
	if json.Valid(trimmed) {
		return trimmed
	}
	b, _ := json.Marshal(string(bytes.TrimSuffix(stdout, []byte("\n"))))
	return b
}

func outputsErrorType(err error) string {
	if r := outputs.Reason(err); r != "" {
		return r
	}
	return outputs.ReasonInvalid
}

// Failure implements language.Function; a Bash function never fails as a
// whole, each invocation starts afresh.
func (f *function) Failure() error { return nil }

// Close implements language.Function.
func (f *function) Close() {
	f.mu.Lock()
	f.closed = true
	for g := range f.running {
		g.Kill()
	}
	f.mu.Unlock()
	_ = os.RemoveAll(f.scratch)
}
