package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// stopGrace is how long a component gets between SIGTERM and SIGKILL.
const stopGrace = 15 * time.Second

// component is one control-plane process started by the cluster.
type component struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// startComponent runs binary with args, its output appended to logDir/name.log.
// The process gets its own process group and is killed if this process dies,
// so a crashed harness leaves no stray control plane behind.
func startComponent(ctx context.Context, logDir, name, binary string, args ...string) (*component, error) {
	return startComponentEnv(ctx, logDir, name, binary, nil, args...)
}

// startComponentEnv is startComponent with the environment env (nil: this
// process's).
func startComponentEnv(ctx context.Context, logDir, name, binary string, env []string, args ...string) (*component, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &component{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	klog.FromContext(ctx).V(2).Info("Started component", "component", name, "pid", cmd.Process.Pid, "log", logPath)
	return c, nil
}

// running reports an error if the process has already exited.
func (c *component) running() error {
	select {
	case <-c.exited:
		return fmt.Errorf("%s exited (%v); see %s", c.name, c.waitErr, c.logPath)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, waits up to stopGrace, then
// SIGKILLs it.
func (c *component) stop(ctx context.Context) {
	if c == nil || c.running() != nil {
		return
	}
	logger := klog.FromContext(ctx)
	pgid := c.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		logger.Error(err, "Signalling component", "component", c.name)
	}
	select {
	case <-c.exited:
	case <-time.After(stopGrace):
		// Every component is a Go program: SIGQUIT makes it write all
		// goroutine stacks to its log, which says what it was waiting for.
		logger.Info("Component did not stop in time; sending SIGQUIT for a goroutine dump, then SIGKILL",
			"component", c.name, "grace", stopGrace, "log", c.logPath)
		dumpAt := fileSize(c.logPath)
		_ = syscall.Kill(c.cmd.Process.Pid, syscall.SIGQUIT)
		select {
		case <-c.exited:
		case <-time.After(2 * time.Second):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-c.exited
		// The log goes with a passing run's state directory: keep what
		// the main goroutine waited for where the run's output shows it.
		if stack := mainGoroutine(c.logPath, dumpAt); stack != "" {
			logger.Info("What the component's main goroutine was doing when it did not stop", "component", c.name, "stack", stack)
		}
	}
	logger.V(2).Info("Stopped component", "component", c.name)
}

func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

// maxStackLines bounds the main goroutine's stack that stop reports.
const maxStackLines = 60

// mainGoroutine returns goroutine 1's stack from the dump a Go program
// wrote to its log after offset, or "" when there is none.
func mainGoroutine(logPath string, offset int64) string {
	data, err := os.ReadFile(logPath)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	lines := strings.Split(string(data[offset:]), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "goroutine 1 [") })
	if start < 0 {
		return ""
	}
	end := start + 1
	for end < len(lines) && lines[end] != "" && end-start < maxStackLines {
		end++
	}
	return strings.Join(lines[start:end], "\n")
}
