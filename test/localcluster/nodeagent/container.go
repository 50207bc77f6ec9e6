package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

const (
	// Restart back-off: shorter than the kubelet's 10s–5m, because a local
	// developer is waiting.
	initialBackoff = time.Second
	maxBackoff     = 30 * time.Second
	// backoffReset: a container that ran this long restarts without delay.
	backoffReset = time.Minute
)

// Container state reasons, as the kubelet reports them.
const (
	reasonImagePullBackOff = "ImagePullBackOff"
	reasonCrashLoopBackOff = "CrashLoopBackOff"
	reasonContainerCreate  = "ContainerCreating"
	reasonPodInitializing  = "PodInitializing"
	reasonCompleted        = "Completed"
	reasonError            = "Error"
	reasonStartError       = "StartError"
)

// containerRunner supervises the processes of one container.
type containerRunner struct {
	pod    *podRunner
	spec   corev1.Container
	isInit bool
	binary string

	mu           sync.Mutex
	waiting      *corev1.ContainerStateWaiting
	running      *corev1.ContainerStateRunning
	terminated   *corev1.ContainerStateTerminated
	last         *corev1.ContainerStateTerminated
	restartCount int32
	ready        bool
	started      bool
	instance     *processInstance
}

// processInstance is one run of a container's process.
type processInstance struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

func newContainerRunner(p *podRunner, spec corev1.Container, isInit bool) *containerRunner {
	reason := reasonContainerCreate
	if !isInit && len(p.pod.Spec.InitContainers) > 0 {
		reason = reasonPodInitializing
	}
	return &containerRunner{pod: p, spec: spec, isInit: isInit, waiting: &corev1.ContainerStateWaiting{Reason: reason}}
}

// resolve maps the image to a binary and reports whether that worked.
func (c *containerRunner) resolve() bool {
	bin, err := resolveImage(c.pod.agent.cfg.BinDir, c.spec.Image)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: reasonImagePullBackOff, Message: err.Error()}
		c.pod.event(corev1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", c.spec.Image, err)
		return false
	}
	c.binary = bin
	return true
}

func (c *containerRunner) logDir() string {
	return filepath.Join(c.pod.logDir, c.spec.Name)
}

// logPath is the log of the given restart (0 is the first run).
func (c *containerRunner) logPath(restart int32) string {
	return filepath.Join(c.logDir(), strconv.Itoa(int(restart))+".log")
}

// supervise runs the container until it should not run again under policy or
// ctx ends, and returns the last exit code.
func (c *containerRunner) supervise(ctx context.Context, policy corev1.RestartPolicy) int {
	logger := klog.FromContext(ctx).WithValues("container", c.spec.Name)
	backoff := initialBackoff
	for {
		started := time.Now()
		code, err := c.runOnce(ctx)
		if err != nil {
			logger.Error(err, "Starting container")
		}
		if ctx.Err() != nil {
			return code
		}
		restart := policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && code != 0)
		if !restart {
			return code
		}
		if time.Since(started) > backoffReset {
			backoff = initialBackoff
		}
		c.mu.Lock()
		c.last, c.terminated = c.terminated, nil
		c.waiting = &corev1.ContainerStateWaiting{Reason: reasonCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", backoff, c.spec.Name, c.pod.currentPod().Name)}
		c.mu.Unlock()
		c.pod.markStatusDirty()
		c.pod.event(corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s", c.spec.Name, c.pod.currentPod().Name)
		logger.Info("Container exited; restarting after back-off", "exitCode", code, "backoff", backoff)
		select {
		case <-ctx.Done():
			return code
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		c.mu.Lock()
		c.restartCount++
		c.mu.Unlock()
	}
}

// runOnce starts the process, runs its probes and waits for it to exit.
func (c *containerRunner) runOnce(ctx context.Context) (int, error) {
	c.mu.Lock()
	restart := c.restartCount
	c.mu.Unlock()
	inst, err := c.start(ctx, restart)
	if err != nil {
		now := metav1.Now()
		c.mu.Lock()
		c.waiting, c.running = nil, nil
		c.terminated = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: reasonStartError, Message: err.Error(), StartedAt: now, FinishedAt: now}
		c.mu.Unlock()
		c.pod.markStatusDirty()
		return 128, err
	}
	probeCtx, stopProbes := context.WithCancel(ctx)
	go c.runProbes(probeCtx)
	select {
	case <-inst.exited:
	case <-ctx.Done():
		// The Pod is stopping: the grace period was set before ctx ended.
		c.pod.event(corev1.EventTypeNormal, "Killing", "Stopping container %s", c.spec.Name)
		c.terminate(c.pod.grace)
		<-inst.exited
	}
	stopProbes()
	code := inst.cmd.ProcessState.ExitCode()
	if ws, ok := inst.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	reason := reasonCompleted
	if code != 0 {
		reason = reasonError
	}
	c.mu.Lock()
	startedAt := metav1.Now()
	if c.running != nil {
		startedAt = c.running.StartedAt
	}
	c.running, c.waiting, c.ready, c.started = nil, nil, false, false
	c.terminated = &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, StartedAt: startedAt, FinishedAt: metav1.Now(),
		ContainerID: c.containerID(restart),
	}
	c.mu.Unlock()
	c.pod.markStatusDirty()
	return code, nil
}

func (c *containerRunner) containerID(restart int32) string {
	return fmt.Sprintf("kruntimes-local://%s/%s/%d", c.pod.uid, c.spec.Name, restart)
}

func (c *containerRunner) start(ctx context.Context, restart int32) (*processInstance, error) {
	if err := os.MkdirAll(c.logDir(), 0o755); err != nil {
		return nil, err
	}
	workDir := filepath.Join(c.pod.dir, "containers", c.spec.Name)
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, err
	}
	env, paths, err := c.environment(ctx, workDir)
	if err != nil {
		return nil, err
	}
	args := containerArgs(c.spec, env, paths)
	logPath := c.logPath(restart)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.binary, args...)
	cmd.Env = envList(env)
	cmd.Dir = workDir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Own process group so stop reaches children; killed if the agent dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	inst := &processInstance{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(inst.exited)
	}()
	c.mu.Lock()
	c.instance = inst
	c.waiting, c.terminated = nil, nil
	c.running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
	hasStartup := c.spec.StartupProbe != nil
	c.started = !hasStartup
	// Without a readiness probe a running container is ready once started.
	c.ready = c.spec.ReadinessProbe == nil && !hasStartup
	c.mu.Unlock()
	c.pod.markStatusDirty()
	c.pod.event(corev1.EventTypeNormal, "Started", "Started container %s", c.spec.Name)
	klog.FromContext(ctx).V(2).Info("Started container", "container", c.spec.Name, "pid", cmd.Process.Pid, "binary", c.binary, "args", args)
	return inst, nil
}

// terminate stops the current process: SIGTERM to its group, SIGKILL after grace.
func (c *containerRunner) terminate(grace time.Duration) {
	c.mu.Lock()
	inst := c.instance
	c.mu.Unlock()
	if inst == nil {
		return
	}
	select {
	case <-inst.exited:
		return
	default:
	}
	pgid := inst.cmd.Process.Pid
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		klog.Background().Error(err, "Signalling container", "container", c.spec.Name)
	}
	select {
	case <-inst.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-inst.exited
	}
}

// kill ends the current process because a probe failed; it is restarted per
// the Pod's restart policy. Like the kubelet, the exit itself is reported as
// it happened; the reason is an Event.
func (c *containerRunner) kill(probe string) {
	c.pod.event(corev1.EventTypeNormal, "Killing", "Container %s failed %s probe, will be restarted", c.spec.Name, probe)
	grace := 30 * time.Second
	if p := c.pod.currentPod().Spec.TerminationGracePeriodSeconds; p != nil {
		grace = time.Duration(*p) * time.Second
	}
	c.terminate(grace)
}

// status is this container's entry in the Pod's status.
func (c *containerRunner) status() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	started := c.started
	s := corev1.ContainerStatus{
		Name:         c.spec.Name,
		Image:        c.spec.Image,
		Ready:        c.ready,
		Started:      &started,
		RestartCount: c.restartCount,
	}
	if c.binary != "" {
		s.ImageID = "file://" + c.binary
	}
	switch {
	case c.running != nil:
		r := *c.running
		s.State.Running = &r
		s.ContainerID = c.containerID(c.restartCount)
	case c.terminated != nil:
		t := *c.terminated
		s.State.Terminated = &t
		s.ContainerID = t.ContainerID
	case c.waiting != nil:
		w := *c.waiting
		s.State.Waiting = &w
	}
	if c.last != nil {
		l := *c.last
		s.LastTerminationState.Terminated = &l
	}
	return s
}

// currentLog returns the log file of the current (or, with previous, the
// preceding) run and whether that run has finished writing to it.
func (c *containerRunner) currentLog(previous bool) (path string, finished func() bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	restart := c.restartCount
	if previous {
		if restart == 0 {
			return "", nil, fmt.Errorf("previous terminated container %q in pod %q not found", c.spec.Name, c.pod.currentPod().Name)
		}
		return c.logPath(restart - 1), func() bool { return true }, nil
	}
	inst := c.instance
	if inst == nil {
		return "", nil, fmt.Errorf("container %q in pod %q is waiting to start", c.spec.Name, c.pod.currentPod().Name)
	}
	return inst.logPath, func() bool {
		select {
		case <-inst.exited:
			return true
		default:
			return false
		}
	}, nil
}
