package python

import _ "embed"

// SandboxHandler is the built-in handler that serves a stateful sandbox: a
// function Run naming it needs no source of its own. See sandbox.py and
// docs/sandbox.md for its protocol.
const SandboxHandler = "kruntimes.sandbox"

// Bounds of the sandbox handler. An answer must fit the 1 MiB invoke output
// even when JSON escapes every byte of stdout and stderr (up to six times),
// and a file must fit the 1 MiB invoke input base64-encoded (4/3).
const (
	// SandboxMaxOutputBytes bounds the stdout and the stderr of one
	// run_code or run_command, each; the rest is dropped and the answer
	// says so.
	SandboxMaxOutputBytes = 64 << 10
	// SandboxMaxFileBytes bounds a file written or read in one operation.
	SandboxMaxFileBytes = 512 << 10
	// SandboxMaxResultBytes bounds the JSON of run_code's result; a larger
	// value comes back as its repr, cut to this size.
	SandboxMaxResultBytes = 64 << 10
	// SandboxMaxListEntries bounds the entries list_files returns (a
	// request's max_entries above it is this); past it the answer says
	// "truncated". With 64 KiB of names at most, escaped, the answer fits
	// an invocation's output.
	SandboxMaxListEntries = 1000
	// SandboxMaxRunningCommands bounds the background commands
	// (start_command) running at once; one more is refused.
	SandboxMaxRunningCommands = 16
	// SandboxMaxEndedCommands bounds the ended background commands whose
	// status is kept; the oldest are forgotten beyond it.
	SandboxMaxEndedCommands = 64
)

//go:embed sandbox.py
var sandboxSource string
