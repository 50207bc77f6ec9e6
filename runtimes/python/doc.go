// Package python is the Python language adapter of the built-in Runtime
// Server. Tasks run through the interpreter; each function registration keeps
// one warm worker process (worker.py, embedded) that imports the handler once
// and then serves invocations over frames on pipes (a JSON head, then the
// input, or the handler's stdout, stderr and output, as they are), so an
// invocation costs a pipe round trip instead of an interpreter start.
package python
