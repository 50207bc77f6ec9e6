// Package tasks is runtimed's task controller: it watches the Runs assigned
// to its Pod, claims Scheduled task Runs within --capacity, executes them on
// the local Runtime Server, waits for completion with the blocking Wait RPC,
// and records the outcome (or a retry) through the status subresource. It
// also enforces spec.timeout, honours cancelRequested and deletion, and
// re-adopts executions after a restart.
package tasks
