// Package workspace lays out the per-Run directories under the Runtime Pod's
// shared workspace volume: <workspace>/<run UID>/ holds the materialized
// source the Runtime Server executes, and goes when the Run is done with it.
package workspace
