package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// GuardOrphans makes this process the keeper of every process its programs
// start, for a Runtime Server whose user code runs as its own user and so
// may signal, stop or kill the reapers (see Start) that hold its subtrees:
//
//   - this process becomes a child subreaper, so a process whose reaper was
//     killed is reparented here, not to the node's (or container's) init;
//   - such an orphan, and all it started, is killed and reaped at once:
//     every legitimate child of this process is one Start created;
//   - this process is made non-dumpable, so user code of the same user can
//     neither ptrace it nor read or write its memory through /proc.
//
// Every child must be started by Start from the moment this is called until
// ctx ends; any other child would be taken for an orphan. Linux only.
func GuardOrphans(ctx context.Context) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a child subreaper: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the process non-dumpable: %w", err)
	}
	exits := make(chan os.Signal, 1)
	signal.Notify(exits, syscall.SIGCHLD)
	logger := klog.FromContext(ctx)
	go func() {
		defer signal.Stop(exits)
		// An orphan arrives here when its reaper dies, which is itself a
		// child's exit: SIGCHLD covers it. The first sweep finds any that
		// came before the signal was caught.
		for {
			if n := killOrphans(); n > 0 {
				logger.Info("Killed processes that outlived their reaper", "count", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-exits:
			}
		}
	}()
	return nil
}

// killOrphans kills every child of this process that Start did not create,
// with its descendants, and reaps them; it repeats until none is left, since
// a killed orphan's descendants are reparented here in turn. It returns how
// many it reaped.
func killOrphans() int {
	self := os.Getpid()
	reaped := 0
	for {
		spawnMu.Lock()
		children := childrenByParent()
		var orphans []int
		for _, pid := range children[self] {
			if !isStarted(pid) {
				orphans = append(orphans, pid)
			}
		}
		// Killed while the lock keeps Start from forking, so that no
		// process of ours is mistaken for one of theirs.
		for _, pid := range orphans {
			killTree(pid, children)
		}
		spawnMu.Unlock()
		if len(orphans) == 0 {
			return reaped
		}
		for _, pid := range orphans {
			var ws syscall.WaitStatus
			for {
				_, err := syscall.Wait4(pid, &ws, 0, nil)
				if !errors.Is(err, syscall.EINTR) {
					break
				}
			}
			reaped++
		}
	}
}

// killTree sends SIGKILL to pid and to every process below it.
func killTree(pid int, children map[int][]int) {
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		_ = syscall.Kill(p, syscall.SIGKILL)
		queue = append(queue, children[p]...)
	}
}

// childrenByParent maps each process ID in /proc to its children.
func childrenByParent() map[int][]int {
	children := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return children
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentPID(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children
}
