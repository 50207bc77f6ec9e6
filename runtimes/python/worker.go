package python

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"kruntimes.io/kruntimes/runtimes/framing"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/process"
)

// maxFrame bounds a worker frame: a 1 MiB input or output can grow up to six
// times when JSON escapes it, plus logs and outputs.
const maxFrame = 8 << 20

// workerLogTail is how much of the worker's own stdout/stderr is kept to
// explain a crash.
const workerLogTail = 4 << 10

// eventDrainGrace bounds how long closing a worker waits for its events
// still in the pipe (the last output of its commands) to be handled.
const eventDrainGrace = time.Second

// worker is one running worker.py process.
type worker struct {
	group  *process.Group
	reqs   *os.File // our end of fd 3
	resps  *os.File // our end of fd 4
	writer *framing.Writer
	reader *framing.Reader
	events *commandEvents
	logs   *process.Capture
	exited chan struct{}
	code   int
}

// close kills the worker and waits for it to be reaped, and for its events
// to be handled: the commands it started are ended in the sink then.
func (w *worker) close() {
	w.group.Kill()
	<-w.exited
	_ = w.reqs.Close()
	_ = w.resps.Close()
	w.events.close()
}

// exitDescription says how a dead worker ended, for errors.
func (w *worker) exitDescription() string {
	<-w.exited
	tail := language.Truncate(string(w.logs.Bytes()), 1024, true)
	if tail == "" {
		return fmt.Sprintf("worker exited with code %d", w.code)
	}
	return fmt.Sprintf("worker exited with code %d: %s", w.code, tail)
}

// function is one registration generation: a worker, replaced when it dies.
type function struct {
	interpreter string
	spec        language.FunctionSpec
	spares      *sparePool

	mu sync.Mutex
	// worker is nil while a replacement is starting.
	worker *worker
	// restarted is closed when the running restart finished.
	restarted chan struct{}
	// invoking is set while an invocation uses worker: its death is then
	// that invocation's failure, and a new worker replaces it.
	invoking bool
	failure  error
	closed   bool

	// commandsStarted counts the background commands the registration's
	// workers started.
	commandsStarted atomic.Int64
}

// watch waits for w to exit. A worker that dies while idle (killed from
// outside, the OOM killer) took the handler's warm state with it, so the
// registration is lost: FAILED, for its owner to register a new attempt.
// A death during an invocation, or one Invoke or Close caused, is handled
// there instead.
func (f *function) watch(w *worker) {
	<-w.exited
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.worker != w || f.invoking || f.failure != nil {
		return
	}
	f.worker = nil
	f.failure = fmt.Errorf("the worker process died while idle, losing the registration: %s", w.exitDescription())
}

type workerMessage struct {
	Type  string                  `json:"type"`
	Error *language.FunctionError `json:"error"`
}

// spawn starts worker.py, loaded but serving nothing yet: the first frame
// it reads says what to serve.
//
// The interpreter starts isolated (-I): neither its directory nor a user
// site-packages directory is on sys.path, and no PYTHON* variable acts on
// it, so nothing another tenant of the Pod left behind (a json.py, a
// usercustomize) is imported before the registration's own code. It starts
// in /, which is not the tenants' to write on a real node, and moves to
// the registration's working directory when told what to serve.
func spawn(interpreter string, env []string) (*worker, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create request pipe: %w", err)
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		_ = reqR.Close()
		_ = reqW.Close()
		return nil, fmt.Errorf("create response pipe: %w", err)
	}
	eventR, eventW, err := os.Pipe()
	if err != nil {
		_ = reqR.Close()
		_ = reqW.Close()
		_ = respR.Close()
		_ = respW.Close()
		return nil, fmt.Errorf("create event pipe: %w", err)
	}
	logs := process.NewTailCapture(workerLogTail)
	group, err := process.Start(process.Spec{
		Argv:       []string{interpreter, "-I", "-c", workerSource, strconv.Itoa(language.MaxInvocationLogBytes)},
		Dir:        "/",
		Env:        env,
		Stdout:     logs,
		Stderr:     logs,
		ExtraFiles: []*os.File{reqR, respW, eventW},
	})
	_ = reqR.Close()
	_ = respW.Close()
	_ = eventW.Close()
	if err != nil {
		_ = reqW.Close()
		_ = respR.Close()
		_ = eventR.Close()
		return nil, fmt.Errorf("start %s: %w; check that the Runtime image has a python3 interpreter", interpreter, err)
	}
	w := &worker{
		group:  group,
		reqs:   reqW,
		resps:  respR,
		writer: framing.NewWriter(reqW, maxFrame),
		reader: framing.NewReader(respR, maxFrame),
		events: newCommandEvents(eventR),
		logs:   logs,
		exited: make(chan struct{}),
	}
	go func() {
		w.code, _ = group.Wait()
		close(w.exited)
	}()
	return w, nil
}

// loadSpec is the first frame a worker reads.
type loadSpec struct {
	WorkingDir string            `json:"working_dir"`
	Handler    string            `json:"handler"`
	Env        map[string]string `json:"env"`
	// Builtin is set for a handler the Runtime Server ships: the worker
	// runs its source instead of importing a module from the workspace.
	Builtin *builtinSpec `json:"builtin,omitempty"`
}

// builtinSpec is a built-in handler: source defining
// make_handler(working_dir, reaper, limits, events=, commands_started=),
// events being where it reports background commands (worker.py's
// CommandEvents).
type builtinSpec struct {
	Module string `json:"module"`
	Source string `json:"source"`
	// Reaper is {executable, argv0} of the process reaper, for a handler
	// that starts programs; absent when there is none.
	Reaper []string       `json:"reaper,omitempty"`
	Limits map[string]int `json:"limits,omitempty"`
	// CommandsStarted is how many background commands the registration's
	// earlier workers started: a new one numbers its commands on from it,
	// so that an ID names one command for the registration's life.
	CommandsStarted int64 `json:"commands_started,omitempty"`
}

// builtinFor is the built-in handler named handler, or nil.
func builtinFor(handler string) *builtinSpec {
	if handler != SandboxHandler {
		return nil
	}
	b := &builtinSpec{Module: "kruntimes_sandbox", Source: sandboxSource, Limits: map[string]int{
		"output_bytes":     SandboxMaxOutputBytes,
		"file_bytes":       SandboxMaxFileBytes,
		"result_bytes":     SandboxMaxResultBytes,
		"list_entries":     SandboxMaxListEntries,
		"commands_running": SandboxMaxRunningCommands,
		"commands_ended":   SandboxMaxEndedCommands,
	}}
	if exe, arg0, ok := process.ReaperCommand(); ok {
		b.Reaper = []string{exe, arg0}
	}
	return b
}

// startWorker gets a worker for the registration, a spare when one fits,
// tells it what to serve and waits for its ready or fatal message.
func (f *function) startWorker(ctx context.Context) (*worker, error) {
	w := f.spares.take()
	if w == nil {
		var err error
		if w, err = spawn(f.interpreter, f.spec.Env); err != nil {
			return nil, err
		}
	}
	load := loadSpec{WorkingDir: f.spec.WorkingDir, Handler: f.spec.Handler, Env: map[string]string{}, Builtin: builtinFor(f.spec.Handler)}
	if load.Builtin != nil {
		// The worker this one replaces was closed, and its events handled,
		// before this one starts.
		load.Builtin.CommandsStarted = f.commandsStarted.Load()
	}
	for _, kv := range f.spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			load.Env[k] = v
		}
	}
	payload, err := json.Marshal(load)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("encode the load request: %w", err)
	}
	stop := context.AfterFunc(ctx, w.group.Kill)
	defer stop()
	frame, err := func() ([]byte, error) {
		if err := w.writer.WriteFrame(payload); err != nil {
			return nil, err
		}
		return w.reader.ReadFrame()
	}()
	if err != nil {
		w.close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("importing handler %q did not finish in time: %w", f.spec.Handler, ctx.Err())
		}
		return nil, fmt.Errorf("worker failed before importing handler %q: %s", f.spec.Handler, w.exitDescription())
	}
	var msg workerMessage
	if err := json.Unmarshal(frame, &msg); err != nil {
		w.close()
		return nil, fmt.Errorf("worker sent an unreadable handshake: %w", err)
	}
	switch msg.Type {
	case "ready":
		w.events.start(f.spec.Commands, &f.commandsStarted, w.group.Kill)
		return w, nil
	case "fatal":
		w.close()
		if msg.Error == nil {
			return nil, fmt.Errorf("cannot import handler %q", f.spec.Handler)
		}
		return nil, fmt.Errorf("cannot import handler %q from %s: %s: %s", f.spec.Handler, f.spec.WorkingDir, msg.Error.Type, language.Truncate(msg.Error.Message, 2048, false))
	default:
		w.close()
		return nil, fmt.Errorf("worker sent unexpected handshake %q", msg.Type)
	}
}

// errClosed is returned by Invoke after Close.
var errClosed = errors.New("function was unregistered")

// acquireWorker returns the live worker, waiting for a restart in progress,
// and marks it invoking; the caller clears invoking when done. warm says it
// did not wait for a restart: the worker was running when the call came.
func (f *function) acquireWorker(ctx context.Context) (w *worker, warm bool, err error) {
	for warm = true; ; warm = false {
		f.mu.Lock()
		switch {
		case f.closed:
			f.mu.Unlock()
			return nil, false, errClosed
		case f.failure != nil:
			err := f.failure
			f.mu.Unlock()
			return nil, false, err
		case f.worker != nil:
			w := f.worker
			f.invoking = true
			f.mu.Unlock()
			return w, warm, nil
		}
		restarted := f.restarted
		f.mu.Unlock()
		select {
		case <-restarted:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// replaceWorker retires a worker that died or was killed and starts a new one
// in the background, so the next invocation finds a warm worker and a module
// that no longer imports turns the registration FAILED without waiting for
// traffic.
func (f *function) replaceWorker(dead *worker) {
	f.mu.Lock()
	if f.worker != dead || f.closed {
		f.mu.Unlock()
		return
	}
	f.worker = nil
	restarted := make(chan struct{})
	f.restarted = restarted
	f.mu.Unlock()

	go func() {
		dead.close()
		// Import time is bounded like registration; a hung import is fatal.
		ctx, cancel := context.WithTimeout(context.Background(), importTimeout)
		defer cancel()
		w, err := f.startWorker(ctx)
		f.mu.Lock()
		defer f.mu.Unlock()
		defer close(restarted)
		if f.closed {
			if w != nil {
				w.close()
			}
			return
		}
		if err != nil {
			f.failure = fmt.Errorf("restarting the worker failed: %w", err)
			return
		}
		f.worker = w
		go f.watch(w)
	}()
}

// An invocation and its answer each travel in one frame: the length of a
// JSON head (4 bytes, big-endian), the head, then the bodies as they are —
// the input; or stdout, stderr and the output — rather than escaped (or
// base64-encoded) inside the JSON, which both ends would pay for on every
// byte.

// invokeRequest is the head of an invocation; the input follows it.
type invokeRequest struct {
	InvocationID     string `json:"invocation_id"`
	RunUID           string `json:"run_uid"`
	ContentType      string `json:"content_type"`
	DeadlineUnixNano int64  `json:"deadline_unix_nano,omitempty"`
}

// answer is a Result together with the head that decodes into it, so that
// both take one allocation.
type answer struct {
	result language.Result
	head   answerHead
}

// answerHead is the head of an answer: its fields point into the Result
// they belong to, and the lengths of the logs say how the body splits.
type answerHead struct {
	ContentType     *string                  `json:"content_type"`
	Outputs         *map[string]string       `json:"outputs"`
	StdoutBytes     int                      `json:"stdout_bytes"`
	StderrBytes     int                      `json:"stderr_bytes"`
	StdoutTruncated *bool                    `json:"stdout_truncated"`
	StderrTruncated *bool                    `json:"stderr_truncated"`
	Error           **language.FunctionError `json:"error"`
	// Events is how many event frames the worker had written before the
	// answer; absent when none.
	Events int64 `json:"events"`
}

// decodeAnswer reads the head of an answer straight into the Result, and
// slices stdout, stderr and the output out of the body, which the frame's
// buffer holds for the Result alone: nothing is copied on the way. The
// worker leaves out what is empty.
//
// events is how many event frames the worker wrote before the answer.
func decodeAnswer(frame []byte) (res *language.Result, events int64, err error) {
	head, body, err := splitHeaded(frame)
	if err != nil {
		return nil, 0, err
	}
	a := &answer{}
	res = &a.result
	a.head = answerHead{ContentType: &res.ContentType, Outputs: &res.Outputs, StdoutTruncated: &res.StdoutTruncated,
		StderrTruncated: &res.StderrTruncated, Error: &res.Error}
	if err := json.Unmarshal(head, &a.head); err != nil {
		return nil, 0, err
	}
	stdoutBytes, stderrBytes := a.head.StdoutBytes, a.head.StderrBytes
	if stdoutBytes < 0 || stderrBytes < 0 || stdoutBytes > len(body) || stderrBytes > len(body)-stdoutBytes {
		return nil, 0, fmt.Errorf("the head names %d bytes of stdout and %d of stderr, and the body has %d", stdoutBytes, stderrBytes, len(body))
	}
	res.Stdout, body = body[:stdoutBytes:stdoutBytes], body[stdoutBytes:]
	res.Stderr, body = body[:stderrBytes:stderrBytes], body[stderrBytes:]
	if len(body) > 0 {
		res.Output = body
	}
	return res, a.head.Events, nil
}

// splitHeaded is the head and the body of a frame's payload.
func splitHeaded(payload []byte) (head, body []byte, err error) {
	if len(payload) < framing.HeaderSize {
		return nil, nil, fmt.Errorf("a frame of %d bytes has no head length", len(payload))
	}
	n := binary.BigEndian.Uint32(payload)
	if uint64(n) > uint64(len(payload)-framing.HeaderSize) {
		return nil, nil, fmt.Errorf("the head length %d exceeds the frame's %d bytes", n, len(payload)-framing.HeaderSize)
	}
	rest := payload[framing.HeaderSize:]
	return rest[:n], rest[n:], nil
}

// Invoke implements language.Function.
func (f *function) Invoke(ctx context.Context, inv language.Invocation) (*language.Result, error) {
	w, warm, err := f.acquireWorker(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		f.mu.Lock()
		f.invoking = false
		f.mu.Unlock()
	}()
	req := invokeRequest{InvocationID: inv.ID, RunUID: inv.RunUID, ContentType: inv.ContentType}
	if !inv.Deadline.IsZero() {
		req.DeadlineUnixNano = inv.Deadline.UnixNano()
	}
	head, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	var headLength [framing.HeaderSize]byte
	binary.BigEndian.PutUint32(headLength[:], uint32(len(head)))

	// A Python handler cannot be interrupted safely, so the deadline kills
	// the worker; the pipe read below then fails and a fresh worker replaces it.
	stop := context.AfterFunc(ctx, w.group.Kill)
	frame, err := func() ([]byte, error) {
		// The input goes into the frame as it is, copied once.
		if err := w.writer.WriteFrame(headLength[:], head, inv.Input); err != nil {
			return nil, err
		}
		return w.reader.ReadFrame()
	}()
	stop()
	if err != nil {
		f.replaceWorker(w)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("invocation interrupted: %w", ctxErr)
		}
		f.mu.Lock()
		closed := f.closed
		f.mu.Unlock()
		if closed {
			return nil, errClosed
		}
		// The handler took the worker down (os._exit, a crash, the OOM
		// killer): that fails this invocation only.
		return &language.Result{Error: &language.FunctionError{
			Type:    "WorkerExited",
			Message: "the worker process died during the invocation and is being restarted: " + w.exitDescription(),
		}}, nil
	}

	res, events, err := decodeAnswer(frame)
	if err != nil {
		f.replaceWorker(w)
		w.group.Kill()
		return nil, fmt.Errorf("worker sent an unreadable response: %w", err)
	}
	// What the invocation made its commands do (start one, above all) is
	// known before it returns: a caller may follow a command at once.
	w.events.await(events)
	res.WorkerWarm = warm
	return res, nil
}

// Failure implements language.Function.
func (f *function) Failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failure
}

// Close implements language.Function.
func (f *function) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	w := f.worker
	f.worker = nil
	restarted := f.restarted
	f.mu.Unlock()
	if w != nil {
		w.close()
	}
	f.spares.release()
	if restarted != nil {
		<-restarted
	}
}
