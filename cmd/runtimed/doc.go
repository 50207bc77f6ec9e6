// Command runtimed is the per-Pod daemon of a Runtime Pod: it heartbeats a
// Lease for its Pod, claims the Runs the scheduler assigned to the Pod,
// executes task Runs and registers function Runs on the Runtime Server over
// a unix socket, and records what happened. Its wiring is runtimed/options.
package main
