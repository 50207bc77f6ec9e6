// Package scheduler binds Pending Runs to Runtime Pods: Pods of the Run's
// Runtime that are Ready, whose runtimed heartbeat Lease is fresh and that
// have a free slot of the Runtime's capacity. It binds with one optimistic
// status update, cancels Pending Runs that ask for it, and wakes the Pending
// Runs of a Runtime when capacity is released.
package scheduler
