// Command runtimed is the per-Pod daemon of a Runtime Pod: it heartbeats a
// Lease for its Pod, claims the task Runs the scheduler assigned to the Pod,
// executes them on the Runtime Server over a unix socket, and records their
// outcome. It serves /healthz, /readyz and /metrics on the health port.
package main
