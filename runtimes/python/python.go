package python

import (
	"context"
	_ "embed"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"kruntimes.io/kruntimes/runtimes/language"
)

//go:embed worker.py
var workerSource string

// Language runs Python tasks and functions with one interpreter binary.
type Language struct {
	// Interpreter is the python3 binary, looked up on PATH when not absolute.
	Interpreter string
	spares      *sparePool
}

var (
	_ language.Language       = (*Language)(nil)
	_ language.FunctionLoader = (*Language)(nil)
)

// New returns the adapter for the given interpreter ("python3" when empty),
// resolved to the binary it runs: a launcher in front of it (a pyenv shim,
// a wrapper script) would otherwise cost every task and worker start its
// own start — here, most of a worker's.
func New(interpreter string) *Language {
	if interpreter == "" {
		interpreter = "python3"
	}
	return &Language{Interpreter: resolveInterpreter(interpreter)}
}

var (
	resolvedMu sync.Mutex
	resolved   = map[string]string{}
)

// resolveInterpreter asks interpreter for sys.executable once per name;
// on any failure it keeps the name, and the first start reports the error.
func resolveInterpreter(interpreter string) string {
	resolvedMu.Lock()
	defer resolvedMu.Unlock()
	if path, ok := resolved[interpreter]; ok {
		return path
	}
	path := interpreter
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, interpreter, "-c", "import sys; sys.stdout.write(sys.executable)").Output()
	if exe := string(out); err == nil && filepath.IsAbs(exe) {
		path = exe
	}
	resolved[interpreter] = path
	return path
}

// KeepSpares keeps n workers started ahead of registrations, with env, so that registering a function costs importing its handler rather
// than starting an interpreter; with slots > 0 (the Pod's capacity), no more
// than the slots no loaded function holds. Call Close to stop them.
func (l *Language) KeepSpares(n, slots int, env []string) {
	l.spares = newSparePool(l.Interpreter, env, n, slots)
	l.spares.fill()
}

// Close stops the spare workers.
func (l *Language) Close() { l.spares.close() }

// Name implements language.Language.
func (l *Language) Name() string { return "python" }

// TaskArgv implements language.Language.
func (l *Language) TaskArgv(file string, args []string) []string {
	return append([]string{l.Interpreter, file}, args...)
}

// LoadFunction implements language.FunctionLoader: it starts the warm worker
// and returns once the handler module imported.
func (l *Language) LoadFunction(ctx context.Context, spec language.FunctionSpec) (language.Function, error) {
	f := &function{interpreter: l.Interpreter, spec: spec, spares: l.spares}
	// Counted before it takes a spare, so the replacement is started only
	// while a slot is free for it.
	l.spares.hold()
	w, err := f.startWorker(ctx)
	if err != nil {
		l.spares.release()
		return nil, err
	}
	f.worker = w
	go f.watch(w)
	return f, nil
}

// importTimeout bounds how long a replacement worker may take to import the
// handler; registration itself is bounded by the caller's context.
const importTimeout = 60 * time.Second
