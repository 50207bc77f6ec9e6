package process

import "sync"

// started holds the process IDs Start created and Wait has not reaped yet:
// the only children of this process that are not orphans. spawnMu is held
// for reading across a fork and its record, and for writing by the guard's
// scan, so the scan never sees a child that is not yet recorded.
var (
	spawnMu sync.RWMutex
	started sync.Map // int → struct{}
)

func recordStarted(pid int) { started.Store(pid, struct{}{}) }

func forgetStarted(pid int) { started.Delete(pid) }

func isStarted(pid int) bool {
	_, ok := started.Load(pid)
	return ok
}
