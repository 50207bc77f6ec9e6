package python

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/runtimes/language"
)

// sandbox is a registration of the built-in sandbox handler over a fresh
// workspace, with no source of its own.
type sandbox struct {
	t   *testing.T
	fn  language.Function
	dir string
	// commands is what the background commands reported.
	commands *commandRecorder
}

func loadSandbox(t *testing.T) *sandbox {
	t.Helper()
	commands := newCommandRecorder()
	s := loadSandboxWith(t, commands)
	s.commands = commands
	return s
}

// loadSandboxWith is loadSandbox with the commands' output going to sink.
func loadSandboxWith(t *testing.T, sink language.CommandOutput) *sandbox {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fn, err := New("").LoadFunction(ctx, language.FunctionSpec{RunUID: "u", WorkingDir: dir, Handler: SandboxHandler,
		Env: []string{"PATH=" + os.Getenv("PATH"), "REGISTERED=yes"}, Commands: sink})
	require.NoError(t, err)
	t.Cleanup(fn.Close)
	return &sandbox{t: t, fn: fn, dir: dir}
}

// call invokes one operation with a 30 s deadline, as the Runtime Server
// passes it, and returns the decoded answer or the function error.
func (s *sandbox) call(req map[string]any) (map[string]any, *language.FunctionError) {
	s.t.Helper()
	input, err := json.Marshal(req)
	require.NoError(s.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.fn.Invoke(ctx, language.Invocation{ID: "i", Input: input, ContentType: invocation.ContentTypeJSON, Deadline: time.Now().Add(30 * time.Second)})
	require.NoError(s.t, err)
	if res.Error != nil {
		return nil, res.Error
	}
	var out map[string]any
	require.NoError(s.t, json.Unmarshal(res.Output, &out), "output %s", res.Output)
	return out, nil
}

func (s *sandbox) ok(req map[string]any) map[string]any {
	s.t.Helper()
	out, ferr := s.call(req)
	require.Nil(s.t, ferr, "%+v", ferr)
	return out
}

func (s *sandbox) code(code string) map[string]any {
	s.t.Helper()
	return s.ok(map[string]any{"op": "run_code", "code": code})
}

func TestSandboxRunCodeKeepsStateAndCapturesOutput(t *testing.T) {
	s := loadSandbox(t)
	out := s.code("x = 41")
	assert.Nil(t, out["result"], "an assignment has no result")
	assert.Nil(t, out["error"])

	out = s.code("x + 1")
	assert.Equal(t, 42.0, out["result"], "the variable survives between calls and the last expression is the result")

	out = s.code("import sys\nprint('hi')\nprint('oops', file=sys.stderr)\ndef f(n):\n    return {'n': n, 'l': [n, None]}\nf(x)")
	assert.Equal(t, "hi\n", out["stdout"])
	assert.Equal(t, "oops\n", out["stderr"])
	assert.Equal(t, map[string]any{"n": 41.0, "l": []any{41.0, nil}}, out["result"])

	out = s.code("f(1)['n']; print('after')")
	assert.Equal(t, "after\n", out["stdout"], "stdout is captured per call")
	assert.Equal(t, "", out["stderr"])
	assert.Nil(t, out["result"], "the last statement is a call to print, whose value is None")

	out = s.code("class P:\n    def __repr__(self): return 'P()'\nP()")
	assert.Equal(t, "P()", out["result"], "a value that is not JSON comes back as its repr")

	out = s.code("import os\nos.getcwd(), os.environ.get('REGISTERED')")
	assert.Equal(t, []any{s.dir, "yes"}, out["result"], "code runs in the workspace with the registration's environment")
}

func TestSandboxRunCodeErrorLeavesTheSandboxUsable(t *testing.T) {
	s := loadSandbox(t)
	out := s.code("y = 7\ndef boom():\n    return 1 / 0\nprint('before')\nboom()")
	errObj, ok := out["error"].(map[string]any)
	require.True(t, ok, "an exception in the code is the answer's error, not the function's: %v", out)
	assert.Equal(t, "ZeroDivisionError", errObj["name"])
	assert.Equal(t, "division by zero", errObj["value"])
	tb := errObj["traceback"].(string)
	assert.Contains(t, tb, "<cell-1>", "the traceback names the cell")
	assert.Contains(t, tb, "return 1 / 0", "the traceback shows the cell's lines")
	assert.NotContains(t, tb, "kruntimes_sandbox", "the sandbox's own frames are left out")
	assert.Equal(t, "before\n", out["stdout"], "output before the exception is kept")

	assert.Equal(t, 7.0, s.code("y")["result"], "the sandbox is usable and kept its state")

	out = s.code("def (:")
	assert.Equal(t, "SyntaxError", out["error"].(map[string]any)["name"])

	out = s.code("raise SystemExit(3)")
	assert.Equal(t, "SystemExit", out["error"].(map[string]any)["name"], "SystemExit does not end the worker")
	assert.Equal(t, 7.0, s.code("y")["result"])

	// An interruptible loop past its own timeout is stopped by the sandbox,
	// not by killing the worker: state survives.
	start := time.Now()
	out = s.ok(map[string]any{"op": "run_code", "code": "import time\nwhile True:\n    time.sleep(0.05)", "timeout": 0.5})
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, "SandboxTimeout", out["error"].(map[string]any)["name"])
	assert.Equal(t, 7.0, s.code("y")["result"])
}

func TestSandboxCommandTimeoutKillsItsProcessesAndTheSandboxStaysUsable(t *testing.T) {
	s := loadSandbox(t)
	// The command starts a child that leaves its process group and session
	// (setsid), prints its PID, and waits: only the reaper's subtree kill
	// reaches that child.
	start := time.Now()
	out := s.ok(map[string]any{"op": "run_command", "cmd": "setsid sleep 60 & echo $!; sleep 60", "timeout": 1})
	elapsed := time.Since(start)
	assert.Equal(t, true, out["timed_out"])
	assert.Equal(t, 137.0, out["exit_code"], "killed: 128 + SIGKILL, as a shell reports it")
	assert.Less(t, elapsed, 10*time.Second, "the command ends at its timeout, not after sleep 60")
	assert.GreaterOrEqual(t, elapsed, 900*time.Millisecond)
	pid, err := strconv.Atoi(strings.TrimSpace(out["stdout"].(string)))
	require.NoError(t, err, "stdout %q", out["stdout"])
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !alive(pid), nil
	}), "the child that called setsid outlived the command's timeout")

	out = s.ok(map[string]any{"op": "run_command", "cmd": "echo ok; echo err >&2; exit 3"})
	assert.Equal(t, "ok\n", out["stdout"], "the next command runs")
	assert.Equal(t, "err\n", out["stderr"])
	assert.Equal(t, 3.0, out["exit_code"])
	assert.Equal(t, false, out["timed_out"])

	out = s.ok(map[string]any{"op": "run_command", "cmd": []string{"sh", "-c", `printf '%s|%s|%s' "$1" "$GREETING" "$(pwd)"`, "sh", "a b"},
		"env": map[string]string{"GREETING": "hello"}, "cwd": "sub/.."})
	assert.Equal(t, "a b|hello|"+s.dir, out["stdout"], "an argv runs without a shell, with env added and cwd in the workspace")

	out = s.ok(map[string]any{"op": "run_command", "cmd": []string{"no-such-program-kruntimes"}})
	assert.Equal(t, 127.0, out["exit_code"])

	out = s.ok(map[string]any{"op": "run_command", "cmd": "head -c 300000 /dev/zero | tr '\\0' a"})
	assert.Len(t, out["stdout"], SandboxMaxOutputBytes, "stdout is bounded")
	assert.Equal(t, true, out["stdout_truncated"])

	_, ferr := s.call(map[string]any{"op": "run_command", "cmd": "pwd", "cwd": "/"})
	require.NotNil(t, ferr)
	assert.Equal(t, "SandboxPathError", ferr.Type)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return false
	}
	// A zombie still answers signal 0; it is dead for this purpose.
	b, rerr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if rerr != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

func TestSandboxPathsStayInTheWorkspace(t *testing.T) {
	s := loadSandbox(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(s.dir, "out")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(s.dir, "secret-link")))
	require.NoError(t, os.Symlink("a.txt", filepath.Join(s.dir, "inside-link")))
	data := base64.StdEncoding.EncodeToString([]byte("x"))

	refused := []map[string]any{
		{"op": "write_file", "path": "../x", "data_b64": data},
		{"op": "write_file", "path": "a/../../x", "data_b64": data},
		{"op": "read_file", "path": "/etc/passwd"},
		{"op": "exists", "path": "/etc/passwd"},
		{"op": "list_files", "path": "/"},
		{"op": "read_file", "path": "out/secret"},
		{"op": "read_file", "path": "secret-link"},
		{"op": "write_file", "path": "out/new", "data_b64": data},
		{"op": "write_file", "path": "secret-link", "data_b64": data},
		{"op": "list_files", "path": "out"},
		{"op": "remove", "path": "out/secret"},
		{"op": "remove", "path": "."},
	}
	for _, req := range refused {
		_, ferr := s.call(req)
		if assert.NotNil(t, ferr, "%v must be refused", req) {
			assert.Equal(t, "SandboxPathError", ferr.Type, "%v: %s", req, ferr.Message)
		}
	}
	_, err := os.Stat(filepath.Join(outside, "new"))
	assert.True(t, os.IsNotExist(err), "nothing was written outside")
	b, err := os.ReadFile(filepath.Join(outside, "secret"))
	require.NoError(t, err)
	assert.Equal(t, "s", string(b), "the file outside is untouched")
	_, err = os.Stat(filepath.Join(s.dir, "..", "x"))
	assert.True(t, os.IsNotExist(err))

	// A link that stays inside, and an absolute path inside, are fine.
	s.ok(map[string]any{"op": "write_file", "path": filepath.Join(s.dir, "a.txt"), "data_b64": data})
	out := s.ok(map[string]any{"op": "read_file", "path": "inside-link"})
	assert.Equal(t, data, out["data_b64"])
}

func TestSandboxFilesRoundTrip(t *testing.T) {
	s := loadSandbox(t)
	payload := make([]byte, 200<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	enc := base64.StdEncoding.EncodeToString(payload)
	out := s.ok(map[string]any{"op": "write_file", "path": "data/blob.bin", "data_b64": enc})
	assert.Equal(t, float64(len(payload)), out["size"])

	out = s.ok(map[string]any{"op": "read_file", "path": "data/blob.bin"})
	assert.Equal(t, enc, out["data_b64"], "bytes come back as written")

	// Code and commands see the same files.
	assert.Equal(t, float64(len(payload)), s.code("len(open('data/blob.bin','rb').read())")["result"])
	s.ok(map[string]any{"op": "run_command", "cmd": "mkdir -p data/sub && printf hi > data/note.txt"})

	out = s.ok(map[string]any{"op": "list_files", "path": "data"})
	assert.Equal(t, []any{
		map[string]any{"name": "blob.bin", "type": "file", "size": float64(len(payload))},
		map[string]any{"name": "note.txt", "type": "file", "size": 2.0},
		map[string]any{"name": "sub", "type": "dir", "size": out["entries"].([]any)[2].(map[string]any)["size"]},
	}, out["entries"])

	assert.Equal(t, true, s.ok(map[string]any{"op": "exists", "path": "data/note.txt"})["exists"])
	assert.Equal(t, map[string]any{}, s.ok(map[string]any{"op": "remove", "path": "data/note.txt"}))
	assert.Equal(t, false, s.ok(map[string]any{"op": "exists", "path": "data/note.txt"})["exists"])
	s.ok(map[string]any{"op": "remove", "path": "data"})
	assert.Equal(t, false, s.ok(map[string]any{"op": "exists", "path": "data"})["exists"], "a directory is removed with its contents")

	big := base64.StdEncoding.EncodeToString(make([]byte, SandboxMaxFileBytes+1))
	_, ferr := s.call(map[string]any{"op": "write_file", "path": "big", "data_b64": big})
	require.NotNil(t, ferr)
	assert.Equal(t, "SandboxFileTooLarge", ferr.Type)
	s.ok(map[string]any{"op": "run_command", "cmd": "head -c " + strconv.Itoa(SandboxMaxFileBytes+1) + " /dev/zero > big"})
	_, ferr = s.call(map[string]any{"op": "read_file", "path": "big"})
	require.NotNil(t, ferr)
	assert.Equal(t, "SandboxFileTooLarge", ferr.Type)

	_, ferr = s.call(map[string]any{"op": "read_file", "path": "missing"})
	require.NotNil(t, ferr)
	assert.Equal(t, "FileNotFoundError", ferr.Type)
}

func TestSandboxRefusesUnknownRequests(t *testing.T) {
	s := loadSandbox(t)
	for _, req := range []map[string]any{
		{"op": "format_disk"},
		{"code": "1"},
		{"op": "run_code"},
		{"op": "run_command", "cmd": 3},
		{"op": "write_file", "path": "a", "data_b64": "not base64!"},
	} {
		_, ferr := s.call(req)
		if assert.NotNil(t, ferr, "%v", req) {
			assert.Equal(t, "SandboxRequestError", ferr.Type, "%v: %s", req, ferr.Message)
		}
	}
	_, ferr := s.call(map[string]any{"op": "nope"})
	assert.Contains(t, ferr.Message, "run_code", "the error names the ops there are")
	assert.Equal(t, 2.0, s.code("1 + 1")["result"], "the sandbox still serves")
}
