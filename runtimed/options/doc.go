// Package options holds runtimed's flags and its wiring: the clients, the
// informer of this Pod's Runs, the slot table, the task and function
// controllers, the heartbeat and the health server. cmd/runtimed only runs
// the command it builds.
package options
