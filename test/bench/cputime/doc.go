// Package cputime reports the CPU a Go benchmark spends per operation, in
// its own process and in the processes it started (a Runtime Server's
// Python worker), or in those of a process it names (a local cluster), so
// that a change to a hot path is judged by the CPU it costs and not only
// by wall time, which a shared machine makes noisy.
package cputime
