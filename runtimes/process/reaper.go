package process

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
)

// reaperStopSignal asks a reaper to kill its whole subtree and exit. The
// program runs in a process group of its own, so a script's "kill 0" does not
// reach the reaper. (Declared on every platform: Group.Kill sends it.)
const reaperStopSignal = syscall.SIGTERM

// reaperArg0 is the argv[0] under which a binary runs as a reaper.
const reaperArg0 = "kruntimes-process-reaper"

// ReaperBinary is the name of the dedicated reaper binary (cmd/kruntimes-reaper)
// that Init looks for next to the running executable.
const ReaperBinary = "kruntimes-reaper"

// reaperExe is the binary Start re-executes as the reaper; empty until Init
// ran, and then Start runs programs directly (process group only).
var reaperExe atomic.Pointer[string]

// Init must be the first call of main (and of TestMain in tests that start
// programs). In a process started as a reaper it runs the reaper and exits;
// otherwise it enables the reaper for Start.
//
// The reaper is ReaperBinary beside this executable when there is one: a
// small binary that starts in about a millisecond. Otherwise this binary
// re-executes itself (the re-exec pattern of runc init and docker's reexec),
// which works anywhere but pays this binary's start-up, some 10 ms for the
// Runtime Server, on every program started.
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
	if self, err := os.Executable(); err == nil {
		dedicated := filepath.Join(filepath.Dir(self), ReaperBinary)
		if info, err := os.Stat(dedicated); err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			exe = dedicated
		}
	}
	reaperExe.Store(&exe)
}

// ReaperMain is the main function of ReaperBinary.
func ReaperMain() {
	if len(os.Args) < 1 || os.Args[0] != reaperArg0 {
		os.Stderr.WriteString(ReaperBinary + ": started by the kruntimes Runtime Server to run one program; not for direct use\n")
		os.Exit(2)
	}
	os.Exit(runReaper(os.Args[1:]))
}

// ReaperCommand returns how another program (the Python sandbox, which starts
// commands itself) runs a program under the reaper: execute exe with argv
// {arg0, "0", the program's path, the program's argv...}; SIGTERM to that
// process then kills the program and every descendant. ok is false when
// Init did not enable the reaper.
func ReaperCommand() (exe, arg0 string, ok bool) {
	p := reaperExe.Load()
	if p == nil {
		return "", "", false
	}
	exe = *p
	if exe == "/proc/self/exe" {
		// That name means this binary only to this process.
		self, err := os.Executable()
		if err != nil {
			return "", "", false
		}
		exe = self
	}
	return exe, reaperArg0, true
}
