// Package options holds runtimed's flags (Options: AddFlags, Validate), the
// Config built from them (clients, the Runtime Server connection, listeners,
// the invoke server's certificates) and Run, which wires the informer of
// this Pod's Runs, the slot table, the task and function controllers, the
// heartbeat and the health and invoke servers. cmd/runtimed only runs the
// command it builds.
package options
