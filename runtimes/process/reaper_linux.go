package process

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const reaperSupported = true

// runReaper runs as a child subreaper: it starts the program, and when the
// program exits or the reaper is told to stop, it kills every descendant and
// reaps until it has no children left. Only then does it exit, with the
// program's exit code, or by SIGKILL when the program died of a signal (so the
// parent sees the same -1 as for a program it killed itself).
//
// args: the number of extra files (fds 3…), the program's path, its argv.
func runReaper(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "kruntimes reaper: usage: <extra files> <path> <argv...>")
		return 127
	}
	nExtra, err := strconv.Atoi(args[0])
	if err != nil || nExtra < 0 {
		fmt.Fprintf(os.Stderr, "kruntimes reaper: bad extra file count %q\n", args[0])
		return 127
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "kruntimes reaper: become a child subreaper: %v\n", err)
		return 127
	}
	// The program runs as this process's user: non-dumpable, the reaper
	// cannot be ptraced by it (nor its memory written through /proc).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, reaperStopSignal)
	// Signals meant for a terminal's process group are not the reaper's
	// business. They are caught and dropped rather than ignored: an ignored
	// signal stays ignored across exec, and the program must start with
	// default dispositions (a pipeline relies on SIGPIPE).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)

	extra := make([]*os.File, nExtra)
	for i := range extra {
		extra[i] = os.NewFile(uintptr(3+i), "extra")
	}
	cmd := &exec.Cmd{
		Path:        args[1],
		Args:        args[2:],
		Env:         os.Environ(),
		Stdin:       os.Stdin,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		ExtraFiles:  extra,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "start %s: %v\n", args[1], err)
		return 127
	}
	for _, f := range extra {
		_ = f.Close()
	}
	child := cmd.Process.Pid

	go func() {
		<-stop
		killDescendants()
	}()

	var childStatus syscall.WaitStatus
	childExited := false
	options := 0 // block until the program exits
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, options, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil { // ECHILD: the whole subtree is gone
			break
		}
		if pid == child {
			childStatus, childExited = ws, true
			// From now on only ask whether children are left, so that a
			// program that left none costs no scan of /proc.
			options = syscall.WNOHANG
		}
		if pid == 0 {
			// Whatever the program left behind, in its group or not, dies
			// with it; repeated until no child is left, since a process may
			// fork between the scan and the kill.
			killDescendants()
			options = 0
		} else if childExited {
			options = syscall.WNOHANG
		}
	}
	if !childExited || childStatus.Signaled() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		return 128 + int(syscall.SIGKILL) // not reached
	}
	return childStatus.ExitStatus()
}

// killDescendants sends SIGKILL to every process whose parent chain leads to
// this one. As a subreaper, every living descendant has such a chain.
func killDescendants() {
	children := childrenByParent()
	for _, pid := range children[os.Getpid()] {
		killTree(pid, children)
	}
}

// parentPID reads the parent of pid from /proc/<pid>/stat, whose second field
// (the command name) may contain spaces and parentheses.
func parentPID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}
