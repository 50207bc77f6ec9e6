package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runlog"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/outputs"
	"kruntimes.io/kruntimes/runtimes/process"
)

// Task reasons reported in TaskStatus.reason; runtimed copies them into the
// Run, so they are the Run reasons of apis/lifecycle.
const (
	ReasonNonZeroExit = lifecycle.ReasonNonZeroExit
	ReasonStartFailed = lifecycle.ReasonStartFailed
	ReasonTimeout     = lifecycle.ReasonTimeout
	ReasonCancelled   = lifecycle.ReasonCancelled
)

// task is one Execute and everything retained about it until Forget.
type task struct {
	id     string
	digest [32]byte
	dir    string // private scratch: inline script, outputs file
	stdout *process.Capture
	stderr *process.Capture
	// log records both streams in write order for runs/log.
	log  *runlog.Recorder
	done chan struct{}

	mu        sync.Mutex
	group     *process.Group
	status    *runtimev1.TaskStatus
	cancelled bool
	timedOut  bool
}

// cancel kills the task's process group, or makes sure it is killed as soon
// as it starts.
func (t *task) cancel() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status.GetState() != runtimev1.TaskState_TASK_STATE_RUNNING {
		return
	}
	t.cancelled = true
	if t.group != nil {
		t.group.Kill()
	}
}

func (t *task) snapshot(includeLogs bool) *runtimev1.TaskStatus {
	t.mu.Lock()
	st := proto.Clone(t.status).(*runtimev1.TaskStatus)
	t.mu.Unlock()
	if includeLogs {
		st.Stdout, st.Stderr = t.stdout.Bytes(), t.stderr.Bytes()
		st.StdoutTruncated, st.StderrTruncated = t.stdout.Truncated(), t.stderr.Truncated()
		st.Log = taskLog(t.log.Log())
	}
	return st
}

func validateTaskID(id string) error {
	if id == "" || len(id) > invocation.MaxIDBytes {
		return status.Errorf(codes.InvalidArgument, "task_id must be 1..%d bytes; runtimed uses the Run UID and attempt", invocation.MaxIDBytes)
	}
	return nil
}

// Execute implements runtimev1.RuntimeServer.
func (s *Server) Execute(ctx context.Context, req *runtimev1.ExecuteRequest) (*runtimev1.TaskStatus, error) {
	if err := validateTaskID(req.GetTaskId()); err != nil {
		return nil, err
	}
	if req.GetScript() == "" && req.GetEntrypoint().GetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "set either script or entrypoint.path")
	}
	if !filepath.IsAbs(req.GetWorkingDir()) {
		return nil, status.Errorf(codes.InvalidArgument, "working_dir %q must be an absolute path", req.GetWorkingDir())
	}
	if req.GetTimeoutMillis() < 0 {
		return nil, status.Error(codes.InvalidArgument, "timeout_millis must not be negative")
	}
	env, err := envPairs(req.GetEnv())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Deterministic marshalling makes equal requests hash equally, which is
	// what idempotent Execute compares.
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "hash request: %v", err)
	}
	digest := sha256.Sum256(raw)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "the Runtime Server is shutting down; retry on another Pod")
	}
	if t, ok := s.tasks[req.GetTaskId()]; ok {
		s.mu.Unlock()
		if t.digest != digest {
			return nil, status.Errorf(codes.AlreadyExists, "task %q already exists with a different request; use a new task ID or Forget the old task first", req.GetTaskId())
		}
		return t.snapshot(false), nil
	}
	if len(s.tasks) >= s.opts.MaxTasks {
		s.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "%d tasks are retained; Forget finished tasks before executing more", len(s.tasks))
	}
	t := &task{
		id:     req.GetTaskId(),
		digest: digest,
		stdout: process.NewTailCapture(s.opts.TaskLogBytes),
		stderr: process.NewTailCapture(s.opts.TaskLogBytes),
		log:    runlog.NewRecorder(s.opts.RunLogMaxBytes, s.opts.Clock.Now),
		done:   make(chan struct{}),
		status: &runtimev1.TaskStatus{
			TaskId:        req.GetTaskId(),
			State:         runtimev1.TaskState_TASK_STATE_RUNNING,
			StartUnixNano: s.opts.Clock.Now().UnixNano(),
		},
	}
	s.tasks[t.id] = t
	s.mu.Unlock()

	logger := klog.FromContext(ctx).WithValues("taskID", t.id)
	s.startTask(klog.NewContext(context.WithoutCancel(ctx), logger), t, req, env)
	return t.snapshot(false), nil
}

// startTask starts the program and a goroutine that records its outcome.
func (s *Server) startTask(ctx context.Context, t *task, req *runtimev1.ExecuteRequest, env []string) {
	logger := klog.FromContext(ctx)
	fail := func(reason, msg string) {
		t.mu.Lock()
		t.status.State = runtimev1.TaskState_TASK_STATE_FAILED
		t.status.Reason = reason
		t.status.Message = truncateMessage(msg)
		t.status.ExitCode = -1
		t.status.EndUnixNano = s.opts.Clock.Now().UnixNano()
		t.mu.Unlock()
		if t.dir != "" {
			_ = s.dropScratch(t.dir)
		}
		close(t.done)
	}

	dir, scratchEnv, err := s.newScratch("task-")
	if err != nil {
		fail(ReasonStartFailed, fmt.Sprintf("create task scratch directory: %v", err))
		return
	}
	t.dir = dir
	file := req.GetEntrypoint().GetPath()
	args := req.GetEntrypoint().GetArgs()
	if req.GetScript() != "" {
		file = filepath.Join(dir, "script")
		if err := os.WriteFile(file, []byte(req.GetScript()), 0o600); err != nil {
			fail(ReasonStartFailed, fmt.Sprintf("write inline script: %v", err))
			return
		}
		args = nil
	}
	outputsFile := filepath.Join(dir, "outputs")
	group, err := process.Start(process.Spec{
		Argv:   s.opts.Language.TaskArgv(file, args),
		Dir:    req.GetWorkingDir(),
		Env:    s.env(append(append(scratchEnv, env...), language.EnvOutputs+"="+outputsFile)...),
		Stdout: io.MultiWriter(t.stdout, t.log.Writer(runlog.StreamStdout)),
		Stderr: io.MultiWriter(t.stderr, t.log.Writer(runlog.StreamStderr)),
	})
	if err != nil {
		fail(ReasonStartFailed, fmt.Sprintf("start task: %v; check working_dir and the interpreter", err))
		return
	}
	t.mu.Lock()
	t.group = group
	if t.cancelled {
		group.Kill()
	}
	t.mu.Unlock()
	logger.V(2).Info("Started task", "pid", group.Pid())

	var timer clock.Timer
	if ms := req.GetTimeoutMillis(); ms > 0 {
		timer = s.opts.Clock.AfterFunc(time.Duration(ms)*time.Millisecond, func() {
			t.mu.Lock()
			t.timedOut = true
			t.mu.Unlock()
			group.Kill()
		})
	}
	go func() {
		code, waitErr := group.Wait()
		if timer != nil {
			timer.Stop()
		}
		outs, outErr := outputs.ReadFile(outputsFile)
		t.mu.Lock()
		st := t.status
		st.ExitCode = int32(code)
		st.EndUnixNano = s.opts.Clock.Now().UnixNano()
		switch {
		case t.cancelled:
			st.State, st.Reason, st.Message = runtimev1.TaskState_TASK_STATE_CANCELLED, ReasonCancelled, "the task was cancelled"
		case t.timedOut:
			st.State, st.Reason = runtimev1.TaskState_TASK_STATE_TIMED_OUT, ReasonTimeout
			st.Message = fmt.Sprintf("the task exceeded its timeout of %v and was killed", time.Duration(req.GetTimeoutMillis())*time.Millisecond)
		case waitErr != nil:
			st.State, st.Reason, st.Message = runtimev1.TaskState_TASK_STATE_FAILED, ReasonStartFailed, truncateMessage(waitErr.Error())
		case outErr != nil:
			reason := outputs.Reason(outErr)
			if reason == "" {
				reason = outputs.ReasonInvalid
			}
			st.State, st.Reason = runtimev1.TaskState_TASK_STATE_FAILED, reason
			st.Message = truncateMessage(fmt.Sprintf("the file named by $%s is invalid: %v", language.EnvOutputs, outErr))
		case code != 0:
			st.State, st.Reason, st.Message = runtimev1.TaskState_TASK_STATE_FAILED, ReasonNonZeroExit, fmt.Sprintf("the program exited with code %d", code)
		default:
			st.State = runtimev1.TaskState_TASK_STATE_SUCCEEDED
		}
		if outErr == nil {
			st.Outputs = outs
		}
		t.mu.Unlock()
		_ = s.dropScratch(dir)
		logger.V(2).Info("Task finished", "state", st.GetState().String(), "exitCode", code)
		close(t.done)
	}()
}

func (s *Server) lookupTask(id string) (*task, error) {
	if err := validateTaskID(id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q is unknown: it was never executed here or was forgotten", id)
	}
	return t, nil
}

// Wait implements runtimev1.RuntimeServer.
func (s *Server) Wait(ctx context.Context, req *runtimev1.WaitRequest) (*runtimev1.TaskStatus, error) {
	t, err := s.lookupTask(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		return t.snapshot(req.GetIncludeLogs()), nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, status.Errorf(codes.DeadlineExceeded, "task %q is still running; call Wait again", t.id)
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Status implements runtimev1.RuntimeServer.
func (s *Server) Status(_ context.Context, req *runtimev1.StatusRequest) (*runtimev1.TaskStatus, error) {
	t, err := s.lookupTask(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	return t.snapshot(req.GetIncludeLogs()), nil
}

// Cancel implements runtimev1.RuntimeServer.
func (s *Server) Cancel(ctx context.Context, req *runtimev1.CancelRequest) (*runtimev1.CancelResponse, error) {
	t, err := s.lookupTask(req.GetTaskId())
	if status.Code(err) == codes.NotFound {
		return &runtimev1.CancelResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Cancelling task", "taskID", t.id)
	t.cancel()
	return &runtimev1.CancelResponse{}, nil
}

// Forget implements runtimev1.RuntimeServer.
func (s *Server) Forget(_ context.Context, req *runtimev1.ForgetRequest) (*runtimev1.ForgetResponse, error) {
	if err := validateTaskID(req.GetTaskId()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[req.GetTaskId()]
	if !ok {
		return &runtimev1.ForgetResponse{}, nil
	}
	select {
	case <-t.done:
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "task %q is still running; Cancel it and Wait before forgetting it", t.id)
	}
	delete(s.tasks, t.id)
	return &runtimev1.ForgetResponse{}, nil
}

// List implements runtimev1.RuntimeServer.
func (s *Server) List(context.Context, *runtimev1.ListRequest) (*runtimev1.ListResponse, error) {
	s.mu.Lock()
	tasks := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		tasks = append(tasks, t)
	}
	s.mu.Unlock()
	resp := &runtimev1.ListResponse{Tasks: make([]*runtimev1.TaskStatus, 0, len(tasks))}
	for _, t := range tasks {
		resp.Tasks = append(resp.Tasks, t.snapshot(false))
	}
	sort.Slice(resp.Tasks, func(i, j int) bool { return resp.Tasks[i].GetTaskId() < resp.Tasks[j].GetTaskId() })
	return resp, nil
}

// taskLog is l as the Runtime Server API carries it.
func taskLog(l runlog.Log) *runtimev1.TaskLog {
	out := &runtimev1.TaskLog{
		Chunks:       make([]*runtimev1.LogChunk, len(l.Chunks)),
		DroppedBytes: l.DroppedBytes,
		DroppedAfter: int32(l.DroppedAfter),
	}
	for i, c := range l.Chunks {
		out.Chunks[i] = logChunk(c)
	}
	return out
}
