package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// OutputGrace bounds how long Wait keeps reading output after the program and
// its reaper exited. With the reaper every writer is dead by then and the
// pipes drain at once; without it (Init not called, or not Linux) a
// descendant that escaped the process group may hold them open forever.
const OutputGrace = 2 * time.Second

// Spec describes a program to start.
type Spec struct {
	Argv []string
	Dir  string
	// Env is the complete environment, KEY=VALUE.
	Env []string
	// Stdin is written to the program and then closed; nil means no input.
	Stdin []byte
	// Stdout and Stderr receive the program's output; nil discards it.
	Stdout io.Writer
	Stderr io.Writer
	// ExtraFiles become file descriptors 3, 4, … in the program; the caller
	// keeps ownership and closes its copies after Start.
	ExtraFiles []*os.File
}

// Group is a started program and every process it spawned.
type Group struct {
	cmd *exec.Cmd
	// viaReaper says cmd is the reaper, which kills the subtree on
	// reaperStopSignal; otherwise cmd is the program itself.
	viaReaper bool
	copiers   sync.WaitGroup
	// parentEnds are this process's ends of stdin, stdout and stderr,
	// closed after OutputGrace to stop waiting on a writer that never exits.
	parentEnds []*os.File
	// reaped guards against signalling a recycled process ID after Wait
	// reaped the leader.
	mu     sync.Mutex
	reaped bool
	// escalation kills a reaper that did not exit when told to.
	escalation *time.Timer
}

// reaperKillGrace is how long a reaper told to stop may take before it is
// killed: user code runs as its user and may have stopped it (SIGSTOP).
// Killed, its program dies of Pdeathsig and the rest of its subtree goes to
// the orphan guard (GuardOrphans).
const reaperKillGrace = 2 * time.Second

// Start starts the program as the leader of a new process group, under a
// reaper when Init enabled it.
func Start(spec Spec) (*Group, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("empty argv")
	}
	// Resolving here keeps "not found" a Start error and looks the program
	// up in this process's PATH, as without the reaper.
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	g := &Group{}
	if exe := reaperExe.Load(); exe != nil {
		args := append([]string{reaperArg0, strconv.Itoa(len(spec.ExtraFiles)), cmd.Path}, cmd.Args...)
		cmd = &exec.Cmd{Path: *exe, Args: args}
		g.viaReaper = true
	}
	g.cmd = cmd
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	cmd.ExtraFiles = spec.ExtraFiles
	cmd.SysProcAttr = sysProcAttr()

	// Pipes are made by hand rather than by exec so that Wait returns when the
	// leader exits even if something still holds the pipes; see OutputGrace.
	var parentEnds, childEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("create pipe: %w", err)
		}
		return r, w, nil
	}
	stdinR, stdinW, err := pipe()
	if err != nil {
		return nil, err
	}
	childEnds, parentEnds = append(childEnds, stdinR), append(parentEnds, stdinW)
	cmd.Stdin = stdinR
	for range 2 { // stdout, stderr
		r, w, err := pipe()
		if err != nil {
			closeAll(childEnds)
			closeAll(parentEnds)
			return nil, err
		}
		childEnds, parentEnds = append(childEnds, w), append(parentEnds, r)
	}
	cmd.Stdout = childEnds[1]
	cmd.Stderr = childEnds[2]
	spawnMu.RLock()
	err = cmd.Start()
	if err == nil {
		recordStarted(cmd.Process.Pid)
	}
	spawnMu.RUnlock()
	if err != nil {
		closeAll(childEnds)
		closeAll(parentEnds)
		return nil, err
	}
	closeAll(childEnds)
	g.parentEnds = parentEnds

	g.copiers.Add(3)
	go func() {
		defer g.copiers.Done()
		if len(spec.Stdin) > 0 {
			// EPIPE when the program does not read its input is not an error.
			_, _ = stdinW.Write(spec.Stdin)
		}
		_ = stdinW.Close()
	}()
	for i, dst := range []io.Writer{spec.Stdout, spec.Stderr} {
		src := parentEnds[i+1]
		if dst == nil {
			dst = io.Discard
		}
		go func() {
			defer g.copiers.Done()
			_, _ = io.Copy(dst, src)
			_ = src.Close()
		}()
	}
	return g, nil
}

// Pid returns the leader's process ID: the reaper's, or the program's when it
// runs without one.
func (g *Group) Pid() int { return g.cmd.Process.Pid }

// Kill kills the program and everything it spawned. It is safe to call at any
// time, including concurrently with Wait and after it returned.
func (g *Group) Kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reaped {
		// The leader is gone and its subtree was killed already; its ID may
		// belong to someone else by now.
		return
	}
	if g.viaReaper {
		_ = syscall.Kill(g.cmd.Process.Pid, reaperStopSignal)
		if g.escalation == nil {
			g.escalation = time.AfterFunc(reaperKillGrace, g.killLeader)
		}
		return
	}
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
}

// killLeader kills the leader unless Wait reaped it.
func (g *Group) killLeader() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.reaped {
		_ = syscall.Kill(g.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Wait waits for the leader to exit, kills whatever else is left in its group,
// and waits until the output has been copied, at most OutputGrace longer. It
// returns the exit code, -1 when the program was killed by a signal.
func (g *Group) Wait() (int, error) {
	err := g.cmd.Wait()
	g.mu.Lock()
	// The leader is reaped but the group ID stays reserved while any member
	// lives, so this cannot hit an unrelated group.
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	g.reaped = true
	if g.escalation != nil {
		g.escalation.Stop()
	}
	g.mu.Unlock()
	forgetStarted(g.cmd.Process.Pid)

	copied := make(chan struct{})
	go func() {
		g.copiers.Wait()
		close(copied)
	}()
	select {
	case <-copied:
	case <-time.After(OutputGrace):
		// Closing our ends wakes the copiers; a writer left behind gets
		// EPIPE, and the execution is over either way.
		for _, f := range g.parentEnds {
			_ = f.Close()
		}
		<-copied
	}
	code := g.cmd.ProcessState.ExitCode()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return code, err
	}
	return code, nil
}
