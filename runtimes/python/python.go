package python

import (
	"context"
	_ "embed"
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

// New returns the adapter for the given interpreter ("python3" when empty).
func New(interpreter string) *Language {
	if interpreter == "" {
		interpreter = "python3"
	}
	return &Language{Interpreter: interpreter}
}

// KeepSpares keeps n workers started ahead of registrations, with env in
// dir, so that registering a function costs importing its handler rather
// than starting an interpreter. Call Close to stop them.
func (l *Language) KeepSpares(n int, env []string, dir string) {
	l.spares = newSparePool(l.Interpreter, env, dir, n)
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
	w, err := f.startWorker(ctx)
	if err != nil {
		return nil, err
	}
	f.worker = w
	go f.watch(w)
	return f, nil
}

// importTimeout bounds how long a replacement worker may take to import the
// handler; registration itself is bounded by the caller's context.
const importTimeout = 60 * time.Second
