// Package memlimit gives the Go runtime a soft memory limit derived from the
// container's, so that the garbage collector works harder as the process
// nears its limit instead of letting the heap grow to twice its live size
// (GOGC=100) and meeting the kernel's OOM killer.
package memlimit
