package process

import (
	"os"
	"sync/atomic"
)

// reaperArg0 is the argv[0] under which this binary runs as a reaper.
const reaperArg0 = "kruntimes-process-reaper"

// reaperExe is the binary Start re-executes as the reaper; empty until Init
// ran, and then Start runs programs directly (process group only).
var reaperExe atomic.Pointer[string]

// Init must be the first call of main (and of TestMain in tests that start
// programs). In a process started as a reaper it runs the reaper and exits;
// otherwise it enables the reaper for Start. This is the re-exec pattern of
// runc init and docker's reexec: the reaper needs no separate binary in the
// image, and being the same binary it cannot be missing or of another version.
func Init() {
	if len(os.Args) > 0 && os.Args[0] == reaperArg0 {
		os.Exit(runReaper(os.Args[1:]))
	}
	if !reaperSupported {
		return
	}
	// /proc/self/exe names this binary even if its file was replaced or
	// removed since it started.
	exe := "/proc/self/exe"
	reaperExe.Store(&exe)
}
