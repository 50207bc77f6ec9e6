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
		{"op": "stat", "path": "/etc/passwd"},
		{"op": "stat", "path": "out/secret"},
		{"op": "stat", "path": "secret-link"},
		{"op": "list_files", "path": "out", "recursive": true},
		{"op": "mkdir", "path": "out/new", "parents": true},
		{"op": "mkdir", "path": "../new"},
		{"op": "move", "src": "secret-link", "dst": "mine"},
		{"op": "move", "src": "out/secret", "dst": "mine"},
		{"op": "move", "src": "inside-link", "dst": "out/new"},
		{"op": "move", "src": "inside-link", "dst": "../new"},
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
	var listed []any
	for _, e := range out["entries"].([]any) {
		e := e.(map[string]any)
		listed = append(listed, map[string]any{"name": e["name"], "type": e["type"], "size": e["size"]})
	}
	assert.Equal(t, []any{
		map[string]any{"name": "blob.bin", "type": "file", "size": float64(len(payload))},
		map[string]any{"name": "note.txt", "type": "file", "size": 2.0},
		map[string]any{"name": "sub", "type": "dir", "size": out["entries"].([]any)[2].(map[string]any)["size"]},
	}, listed)

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

func TestSandboxStat(t *testing.T) {
	s := loadSandbox(t)
	require.NoError(t, os.MkdirAll(filepath.Join(s.dir, "d"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(s.dir, "d", "f.sh"), []byte("echo hi"), 0o755))
	require.NoError(t, os.Symlink("d/f.sh", filepath.Join(s.dir, "link")))
	mtime := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(s.dir, "d", "f.sh"), mtime, mtime))

	out := s.ok(map[string]any{"op": "stat", "path": "d/f.sh"})
	assert.Equal(t, map[string]any{"path": "d/f.sh", "name": "f.sh", "type": "file", "size": 7.0, "mode": float64(0o755),
		"mtime": float64(mtime.Unix())}, out)

	out = s.ok(map[string]any{"op": "stat", "path": "d"})
	assert.Equal(t, "dir", out["type"])
	assert.Equal(t, float64(0o750), out["mode"])

	out = s.ok(map[string]any{"op": "stat", "path": "link"})
	assert.Equal(t, "symlink", out["type"], "a link is stat'ed as itself")
	assert.Equal(t, "d/f.sh", out["target"])

	out = s.ok(map[string]any{"op": "stat", "path": "."})
	assert.Equal(t, "dir", out["type"], "the workspace itself")

	_, ferr := s.call(map[string]any{"op": "stat", "path": "d/missing"})
	require.NotNil(t, ferr)
	assert.Equal(t, "FileNotFoundError", ferr.Type, "a missing path is the operating system's own error, as read_file's")
}

func TestSandboxListFilesRecursive(t *testing.T) {
	s := loadSandbox(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	for _, f := range []string{"src/b.py", "src/a.py", "src/pkg/z.txt", "README", "src/pkg/deep/x"} {
		require.NoError(t, os.MkdirAll(filepath.Join(s.dir, filepath.Dir(f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(s.dir, f), []byte(f), 0o644))
	}
	require.NoError(t, os.Symlink("src", filepath.Join(s.dir, "src-link")))
	require.NoError(t, os.Symlink(outside, filepath.Join(s.dir, "src", "out")))

	names := func(out map[string]any) []string {
		var ns []string
		for _, e := range out["entries"].([]any) {
			ns = append(ns, e.(map[string]any)["name"].(string))
		}
		return ns
	}
	out := s.ok(map[string]any{"op": "list_files", "recursive": true})
	assert.Equal(t, []string{"README", "src", "src/a.py", "src/b.py", "src/out", "src/pkg", "src/pkg/deep", "src/pkg/deep/x", "src/pkg/z.txt", "src-link"},
		names(out), "depth first, each directory by name, links listed and not followed")
	assert.NotContains(t, out, "truncated")
	entry := out["entries"].([]any)[2].(map[string]any)
	assert.Equal(t, "file", entry["type"])
	assert.Equal(t, float64(len("src/a.py")), entry["size"])
	assert.Equal(t, float64(0o644), entry["mode"])
	assert.Contains(t, entry, "mtime")

	out = s.ok(map[string]any{"op": "list_files", "path": "src/pkg", "recursive": true})
	assert.Equal(t, []string{"deep", "deep/x", "z.txt"}, names(out), "names are relative to the directory listed")

	out = s.ok(map[string]any{"op": "list_files", "path": "src"})
	assert.Equal(t, []string{"a.py", "b.py", "out", "pkg"}, names(out), "not recursive by default")

	out = s.ok(map[string]any{"op": "list_files", "recursive": true, "max_entries": 3})
	assert.Len(t, out["entries"], 3)
	assert.Equal(t, true, out["truncated"], "more entries than max_entries: the answer says it is cut")
	out = s.ok(map[string]any{"op": "list_files", "recursive": true, "max_entries": 10})
	assert.Len(t, out["entries"], 10)
	assert.NotContains(t, out, "truncated", "exactly max_entries entries is not truncated")
	out = s.ok(map[string]any{"op": "list_files", "recursive": true, "max_entries": SandboxMaxListEntries * 10})
	assert.Len(t, out["entries"], 10, "a max_entries over the server's bound is the server's bound")

	for _, req := range []map[string]any{
		{"op": "list_files", "max_entries": 0},
		{"op": "list_files", "max_entries": "3"},
		{"op": "list_files", "recursive": "yes"},
	} {
		_, ferr := s.call(req)
		if assert.NotNil(t, ferr, "%v", req) {
			assert.Equal(t, "SandboxRequestError", ferr.Type, "%v: %s", req, ferr.Message)
		}
	}
	_, ferr := s.call(map[string]any{"op": "list_files", "path": "README"})
	require.NotNil(t, ferr)
	assert.Equal(t, "NotADirectoryError", ferr.Type)
	_, ferr = s.call(map[string]any{"op": "list_files", "path": "nope", "recursive": true})
	require.NotNil(t, ferr)
	assert.Equal(t, "FileNotFoundError", ferr.Type)
}

func TestSandboxListFilesBoundsAManyEntriesTree(t *testing.T) {
	s := loadSandbox(t)
	for d := range 3 {
		dir := filepath.Join(s.dir, "d"+strconv.Itoa(d))
		require.NoError(t, os.Mkdir(dir, 0o755))
		for f := range SandboxMaxListEntries {
			require.NoError(t, os.WriteFile(filepath.Join(dir, strconv.Itoa(f)), nil, 0o644))
		}
	}
	out := s.ok(map[string]any{"op": "list_files", "recursive": true})
	assert.Len(t, out["entries"], SandboxMaxListEntries)
	assert.Equal(t, true, out["truncated"])
	assert.Equal(t, "d0", out["entries"].([]any)[0].(map[string]any)["name"], "the walk starts at the top, by name")
}

func TestSandboxMkdir(t *testing.T) {
	s := loadSandbox(t)
	require.NoError(t, os.WriteFile(filepath.Join(s.dir, "file"), nil, 0o644))
	for _, tc := range []struct {
		name    string
		req     map[string]any
		errType string
		created any
	}{
		{"a directory in the workspace is made", map[string]any{"path": "a"}, "", true},
		{"one already there is an error by default", map[string]any{"path": "a"}, "FileExistsError", nil},
		{"and none with exist_ok", map[string]any{"path": "a", "exist_ok": true}, "", false},
		{"a missing parent is an error by default", map[string]any{"path": "b/c/d"}, "FileNotFoundError", nil},
		{"parents makes the missing ones", map[string]any{"path": "b/c/d", "parents": true}, "", true},
		{"a file in the way is an error even with exist_ok", map[string]any{"path": "file", "exist_ok": true, "parents": true}, "FileExistsError", nil},
		{"the workspace itself exists", map[string]any{"path": ".", "exist_ok": true}, "", false},
		{"a path outside is refused", map[string]any{"path": "../escape", "parents": true}, "SandboxPathError", nil},
		{"a mistyped flag is refused", map[string]any{"path": "x", "parents": "yes"}, "SandboxRequestError", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := map[string]any{"op": "mkdir"}
			for k, v := range tc.req {
				req[k] = v
			}
			out, ferr := s.call(req)
			if tc.errType != "" {
				require.NotNil(t, ferr)
				assert.Equal(t, tc.errType, ferr.Type, ferr.Message)
				return
			}
			require.Nil(t, ferr, "%+v", ferr)
			assert.Equal(t, tc.created, out["created"])
			fi, err := os.Stat(filepath.Join(s.dir, req["path"].(string)))
			require.NoError(t, err)
			assert.True(t, fi.IsDir())
		})
	}
	_, err := os.Stat(filepath.Join(s.dir, "..", "escape"))
	assert.True(t, os.IsNotExist(err), "nothing made outside")
}

func TestSandboxMove(t *testing.T) {
	s := loadSandbox(t)
	outside := t.TempDir()
	write := func(name, data string) {
		require.NoError(t, os.MkdirAll(filepath.Join(s.dir, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(s.dir, name), []byte(data), 0o644))
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		require.NoError(t, err)
		return string(b)
	}
	moveErr := func(src, dst string) *language.FunctionError {
		_, ferr := s.call(map[string]any{"op": "move", "src": src, "dst": dst})
		require.NotNil(t, ferr, "move %s %s must fail", src, dst)
		return ferr
	}

	write("a.txt", "A")
	s.ok(map[string]any{"op": "move", "src": "a.txt", "dst": "b.txt"})
	assert.Equal(t, "A", read("b.txt"))
	assert.NoFileExists(t, filepath.Join(s.dir, "a.txt"))

	write("c.txt", "C")
	s.ok(map[string]any{"op": "move", "src": "c.txt", "dst": "b.txt"})
	assert.Equal(t, "C", read("b.txt"), "a file at dst is replaced")

	write("dir/x", "X")
	s.ok(map[string]any{"op": "move", "src": "dir", "dst": "moved"})
	assert.Equal(t, "X", read("moved/x"), "a directory moves with its contents")

	write("keep/y", "Y")
	write("z.txt", "Z")
	assert.Equal(t, "IsADirectoryError", moveErr("z.txt", "keep").Type, "a directory at dst is never replaced")
	assert.Equal(t, "IsADirectoryError", moveErr("moved", "keep").Type)
	assert.Equal(t, "Y", read("keep/y"))
	assert.Equal(t, "FileNotFoundError", moveErr("missing", "m2").Type)
	assert.Equal(t, "FileNotFoundError", moveErr("z.txt", "no/such/dir/z").Type, "dst's parent must exist")

	require.NoError(t, os.Symlink(outside, filepath.Join(s.dir, "out")))
	for _, pair := range [][2]string{{"z.txt", "../z.txt"}, {"z.txt", "out/z.txt"}, {"z.txt", filepath.Join(outside, "z")}, {"../x", "x"}, {".", "w"}, {"z.txt", "."}} {
		assert.Equal(t, "SandboxPathError", moveErr(pair[0], pair[1]).Type, "move %s → %s", pair[0], pair[1])
	}
	assert.Equal(t, "Z", read("z.txt"), "a refused move leaves src")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing moved outside")

	require.NoError(t, os.Symlink("keep", filepath.Join(s.dir, "keep-link")))
	s.ok(map[string]any{"op": "move", "src": "keep-link", "dst": "renamed-link"})
	target, err := os.Readlink(filepath.Join(s.dir, "renamed-link"))
	require.NoError(t, err)
	assert.Equal(t, "keep", target, "a link is moved itself, not what it points to")
	assert.Equal(t, "Y", read("keep/y"))
}

func TestSandboxRemoveRecursiveFlag(t *testing.T) {
	s := loadSandbox(t)
	require.NoError(t, os.MkdirAll(filepath.Join(s.dir, "full", "sub"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(s.dir, "empty"), 0o755))

	_, ferr := s.call(map[string]any{"op": "remove", "path": "full", "recursive": false})
	require.NotNil(t, ferr)
	assert.Equal(t, "OSError", ferr.Type)
	assert.Contains(t, ferr.Message, "recursive")
	assert.DirExists(t, filepath.Join(s.dir, "full", "sub"), "a refused remove leaves the tree")

	s.ok(map[string]any{"op": "remove", "path": "empty", "recursive": false})
	assert.NoDirExists(t, filepath.Join(s.dir, "empty"))
	s.ok(map[string]any{"op": "remove", "path": "full", "recursive": true})
	assert.NoDirExists(t, filepath.Join(s.dir, "full"))
	_, ferr = s.call(map[string]any{"op": "remove", "path": "full"})
	require.NotNil(t, ferr)
	assert.Equal(t, "FileNotFoundError", ferr.Type)
}
