package python

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/runlog"
)

// commandRecorder is a language.CommandOutput that keeps everything.
type commandRecorder struct {
	mu      sync.Mutex
	started []string
	ended   map[string]bool
	stdout  map[string]string
	stderr  map[string]string
	// misordered lists the calls that came before Start or after End.
	misordered []string
}

func newCommandRecorder() *commandRecorder {
	return &commandRecorder{ended: map[string]bool{}, stdout: map[string]string{}, stderr: map[string]string{}}
}

func (r *commandRecorder) Start(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slicesContains(r.started, id) {
		r.misordered = append(r.misordered, "second start of "+id)
	}
	r.started = append(r.started, id)
}

func (r *commandRecorder) Write(id string, s runlog.Stream, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slicesContains(r.started, id) || r.ended[id] {
		r.misordered = append(r.misordered, "write of "+id)
	}
	if s == runlog.StreamStderr {
		r.stderr[id] += string(p)
	} else {
		r.stdout[id] += string(p)
	}
}

func (r *commandRecorder) End(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slicesContains(r.started, id) || r.ended[id] {
		r.misordered = append(r.misordered, "end of "+id)
	}
	r.ended[id] = true
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// state is what was recorded of command id.
func (r *commandRecorder) state(id string) (started, ended bool, stdout, stderr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slicesContains(r.started, id), r.ended[id], r.stdout[id], r.stderr[id]
}

// eventually polls cond until it holds, for at most 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	require.NoError(t, err, what)
}

func (s *sandbox) start(req map[string]any) string {
	s.t.Helper()
	req["op"] = "start_command"
	out := s.ok(req)
	id, ok := out["id"].(string)
	require.True(s.t, ok, "start_command answers an id: %v", out)
	return id
}

func (s *sandbox) waitCommand(id string, timeout float64) map[string]any {
	s.t.Helper()
	req := map[string]any{"op": "wait_command", "id": id}
	if timeout > 0 {
		req["timeout"] = timeout
	}
	return s.ok(req)
}

func (s *sandbox) requestError(req map[string]any) string {
	s.t.Helper()
	_, ferr := s.call(req)
	require.NotNil(s.t, ferr, "%v must fail", req)
	assert.Equal(s.t, "SandboxRequestError", ferr.Type, ferr.Message)
	return ferr.Message
}

func TestSandboxBackgroundCommandStreamsOutputWhileItRuns(t *testing.T) {
	s := loadSandbox(t)
	out := s.ok(map[string]any{"op": "start_command", "cmd": "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second; echo oops >&2; exit 3"})
	id := out["id"].(string)
	assert.Equal(t, "1", id)
	started, ended, _, _ := s.commands.state(id)
	assert.True(t, started, "the command is known to the sink when start_command returns")
	assert.False(t, ended)
	pid := int(out["pid"].(float64))
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(cmdline), "/bin/sh\x00-c\x00"), "pid is the program's, not the reaper's: %q", cmdline)

	eventually(t, "the first line reaches the sink while the command runs", func() bool {
		_, _, stdout, _ := s.commands.state(id)
		return stdout == "first\n"
	})
	_, ended, _, _ = s.commands.state(id)
	assert.False(t, ended)
	status := s.waitCommand(id, 0.1)
	assert.Equal(t, map[string]any{"id": id, "running": true, "exit_code": nil, "timed_out": false}, status, "a wait that times out says the command runs")
	out = s.code("1 + 1")
	assert.Equal(t, 2.0, out["result"], "the sandbox serves other operations while the command runs")

	require.NoError(t, os.WriteFile(s.dir+"/go", nil, 0o644))
	status = s.waitCommand(id, 0)
	assert.Equal(t, map[string]any{"id": id, "running": false, "exit_code": 3.0, "timed_out": false}, status)
	started, ended, stdout, stderr := s.commands.state(id)
	assert.True(t, started)
	assert.True(t, ended, "the end reached the sink before wait_command returned")
	assert.Equal(t, "first\nsecond\n", stdout)
	assert.Equal(t, "oops\n", stderr)
	assert.Empty(t, s.commands.misordered)
}

func TestSandboxKillCommand(t *testing.T) {
	s := loadSandbox(t)

	t.Run("by default the command and everything it started die", func(t *testing.T) {
		id := s.start(map[string]any{"cmd": "setsid sleep 60 & echo $!; wait"})
		var child int
		eventually(t, "the command prints its child's pid", func() bool {
			_, _, stdout, _ := s.commands.state(id)
			var err error
			child, err = strconv.Atoi(strings.TrimSpace(stdout))
			return err == nil
		})
		s.ok(map[string]any{"op": "kill_command", "id": id})
		status := s.waitCommand(id, 0)
		assert.Equal(t, false, status["running"])
		assert.Equal(t, 137.0, status["exit_code"], "killed: 128 + SIGKILL")
		eventually(t, "the child that left the command's session dies with it", func() bool { return !alive(child) })
		s.ok(map[string]any{"op": "kill_command", "id": id})
	})

	t.Run("a signal goes to the program, which may handle it", func(t *testing.T) {
		id := s.start(map[string]any{"cmd": "trap 'echo got INT; exit 5' INT; echo ready; while :; do sleep 0.05; done"})
		eventually(t, "the trap is set", func() bool {
			_, _, stdout, _ := s.commands.state(id)
			return stdout == "ready\n"
		})
		s.ok(map[string]any{"op": "kill_command", "id": id, "signal": "SIGINT"})
		status := s.waitCommand(id, 0)
		assert.Equal(t, 5.0, status["exit_code"], "the trap ran")
		_, ended, stdout, _ := s.commands.state(id)
		assert.True(t, ended)
		assert.Equal(t, "ready\ngot INT\n", stdout)
	})

	t.Run("signals by number and short name", func(t *testing.T) {
		for _, sig := range []any{"TERM", 15.0} {
			id := s.start(map[string]any{"cmd": []string{"sleep", "60"}})
			s.ok(map[string]any{"op": "kill_command", "id": id, "signal": sig})
			// The reaper reports any death by a signal as its own by
			// SIGKILL, as run_command's exit code does.
			assert.Equal(t, 137.0, s.waitCommand(id, 0)["exit_code"], "signal %v", sig)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		id := s.start(map[string]any{"cmd": []string{"sleep", "60"}})
		assert.Contains(t, s.requestError(map[string]any{"op": "kill_command", "id": id, "signal": "SIGNOPE"}), "must name a signal")
		assert.Contains(t, s.requestError(map[string]any{"op": "kill_command", "id": "99"}), "no command")
		s.ok(map[string]any{"op": "kill_command", "id": id})
	})
}

func TestSandboxWriteStdin(t *testing.T) {
	s := loadSandbox(t)
	id := s.start(map[string]any{"cmd": []string{"cat"}, "stdin": true})
	assert.Equal(t, map[string]any{"written": 6.0}, s.ok(map[string]any{"op": "write_stdin", "id": id, "data": "hello "}))
	eventually(t, "cat echoes what it was written before its stdin closes", func() bool {
		_, _, stdout, _ := s.commands.state(id)
		return stdout == "hello "
	})
	assert.Equal(t, map[string]any{"written": 5.0}, s.ok(map[string]any{"op": "write_stdin", "id": id, "data_b64": "d29ybGQ=", "eof": true}))
	status := s.waitCommand(id, 0)
	assert.Equal(t, 0.0, status["exit_code"], "cat ends at the end of its input")
	_, _, stdout, _ := s.commands.state(id)
	assert.Equal(t, "hello world", stdout)
	assert.Contains(t, s.requestError(map[string]any{"op": "write_stdin", "id": id, "data": "more"}), "was closed")

	noStdin := s.start(map[string]any{"cmd": []string{"cat"}})
	assert.Equal(t, 0.0, s.waitCommand(noStdin, 0)["exit_code"], "without stdin: true, the command reads /dev/null")
	assert.Contains(t, s.requestError(map[string]any{"op": "write_stdin", "id": noStdin, "data": "x"}), `"stdin": true`)

	gone := s.start(map[string]any{"cmd": []string{"true"}, "stdin": true})
	s.waitCommand(gone, 0)
	assert.Contains(t, s.requestError(map[string]any{"op": "write_stdin", "id": gone, "data": "x"}), "no longer reads")
}

func TestSandboxListCommandsAndBounds(t *testing.T) {
	s := loadSandbox(t)
	quick := s.start(map[string]any{"cmd": "exit 4"})
	s.waitCommand(quick, 0)
	missing := s.start(map[string]any{"cmd": []string{"no-such-program-kruntimes", "x"}})
	assert.Equal(t, 127.0, s.waitCommand(missing, 0)["exit_code"], "a program not found is a command that failed at once")
	_, ended, _, stderr := s.commands.state(missing)
	assert.True(t, ended)
	assert.Equal(t, "no-such-program-kruntimes: command not found\n", stderr)

	var running []string
	for range SandboxMaxRunningCommands {
		running = append(running, s.start(map[string]any{"cmd": []string{"sleep", "60"}}))
	}
	assert.Contains(t, s.requestError(map[string]any{"op": "start_command", "cmd": []string{"sleep", "60"}}), "as many as a sandbox runs at once")

	list := s.ok(map[string]any{"op": "list_commands"})["commands"].([]any)
	require.Len(t, list, 2+SandboxMaxRunningCommands)
	assert.Equal(t, map[string]any{"id": quick, "cmd": "exit 4", "running": false, "exit_code": 4.0, "pid": list[0].(map[string]any)["pid"]}, list[0])
	assert.Equal(t, map[string]any{"id": missing, "cmd": []any{"no-such-program-kruntimes", "x"}, "running": false, "exit_code": 127.0, "pid": nil}, list[1])
	for i, id := range running {
		c := list[2+i].(map[string]any)
		assert.Equal(t, id, c["id"], "commands are listed in start order")
		assert.Equal(t, true, c["running"])
		assert.Positive(t, c["pid"])
	}

	s.ok(map[string]any{"op": "kill_command", "id": running[0]})
	s.waitCommand(running[0], 0)
	s.start(map[string]any{"cmd": []string{"true"}})
}

func TestSandboxForgetsTheOldestEndedCommands(t *testing.T) {
	s := loadSandbox(t)
	var ids []string
	for range SandboxMaxEndedCommands + 2 {
		id := s.start(map[string]any{"cmd": []string{"true"}})
		s.waitCommand(id, 0)
		ids = append(ids, id)
	}
	list := s.ok(map[string]any{"op": "list_commands"})["commands"].([]any)
	require.Len(t, list, SandboxMaxEndedCommands)
	assert.Equal(t, ids[2], list[0].(map[string]any)["id"])
	assert.Contains(t, s.requestError(map[string]any{"op": "wait_command", "id": ids[0]}), "no command")
}

func TestSandboxCommandTimeout(t *testing.T) {
	s := loadSandbox(t)
	id := s.start(map[string]any{"cmd": []string{"sleep", "60"}, "timeout": 0.2})
	status := s.waitCommand(id, 0)
	assert.Equal(t, map[string]any{"id": id, "running": false, "exit_code": 137.0, "timed_out": true}, status)
}

func TestSandboxCommandsEndWithTheirWorker(t *testing.T) {
	s := loadSandbox(t)
	id := s.start(map[string]any{"cmd": "echo $$; sleep 60"})
	var pid int
	eventually(t, "the command prints its pid", func() bool {
		_, _, stdout, _ := s.commands.state(id)
		var err error
		pid, err = strconv.Atoi(strings.TrimSpace(stdout))
		return err == nil
	})
	_, ferr := s.call(map[string]any{"op": "run_code", "code": "import os; os._exit(1)"})
	require.NotNil(t, ferr)
	assert.Equal(t, "WorkerExited", ferr.Type)
	eventually(t, "the command is ended in the sink", func() bool {
		_, ended, _, _ := s.commands.state(id)
		return ended
	})
	eventually(t, "the command died with its worker", func() bool { return !alive(pid) })

	next := s.start(map[string]any{"cmd": []string{"true"}})
	assert.Equal(t, "2", next, "the worker that replaced the dead one numbers on: an ID names one command of the registration")
	assert.Contains(t, s.requestError(map[string]any{"op": "wait_command", "id": id}), "no command", "the new worker does not know the dead one's commands")
	s.waitCommand(next, 0)
	assert.Empty(t, s.commands.misordered)
}

// slowSink is a commandRecorder whose Start takes a while, as a sink
// contended by its followers might.
type slowSink struct{ *commandRecorder }

func (s slowSink) Start(id string) {
	time.Sleep(200 * time.Millisecond)
	s.commandRecorder.Start(id)
}

// TestSandboxStartCommandReturnsOnceTheSinkKnowsTheCommand: the answer of
// start_command waits for the worker's events before it to be handled, so
// a caller who follows the command at once finds it.
func TestSandboxStartCommandReturnsOnceTheSinkKnowsTheCommand(t *testing.T) {
	sink := slowSink{newCommandRecorder()}
	s := loadSandboxWith(t, sink)
	id := s.start(map[string]any{"cmd": []string{"true"}})
	started, _, _, _ := sink.state(id)
	assert.True(t, started, "Invoke returned before the sink learnt of command %s", id)
	s.waitCommand(id, 0)
	_, ended, _, _ := sink.state(id)
	assert.True(t, ended, "wait_command returned before the sink learnt the command ended")
}
