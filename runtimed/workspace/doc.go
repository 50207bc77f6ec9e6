// Package workspace lays out the per-Run directories under the Runtime Pod's
// shared workspace volume: <workspace>/<run UID>/ holds the materialized
// source the Runtime Server executes, and goes when the Run is done with it.
// A marker in <workspace>/.kruntimes-workspaces/ records each directory
// runtimed made; nothing else on the volume is ever removed.
package workspace
