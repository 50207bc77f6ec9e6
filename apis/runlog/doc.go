// Package runlog is the contract of a task's kept log that every side
// shares: the Runtime Server records both streams of an attempt in write
// order, bounded to a head and a tail with a count of the bytes dropped in
// between (Recorder); kruntimes-apiserver renders a kept log for runs/log
// (Render).
package runlog
