// Package runtimepod describes the layout of a Runtime Pod that the runtime
// controller builds, the scheduler reads and runtimed and the Runtime Server
// live in: container names, shared volumes and paths, the Runtime Server
// socket, the environment, and the heartbeat Lease.
package runtimepod
