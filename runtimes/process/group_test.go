package process

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGroup(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		stdin      string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "exit code and output are reported", script: "echo out; echo err >&2; exit 3", wantCode: 3, wantStdout: "out\n", wantStderr: "err\n"},
		{name: "stdin is delivered and closed", script: "cat", stdin: `{"a":1}`, wantStdout: `{"a":1}`},
		{name: "program that ignores stdin is fine", script: "exit 0", stdin: strings.Repeat("x", 1<<20)},
		{name: "background child holding stdout does not block Wait", script: "sleep 30 & echo done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := NewHeadCapture(1<<20), NewHeadCapture(1<<20)
			g, err := Start(Spec{Argv: []string{"bash", "-c", tc.script}, Stdin: []byte(tc.stdin), Stdout: stdout, Stderr: stderr})
			require.NoError(t, err)
			code, err := g.Wait()
			require.NoError(t, err)
			assert.Equal(t, tc.wantCode, code)
			if tc.wantStdout != "" {
				assert.Equal(t, tc.wantStdout, string(stdout.Bytes()))
			}
			if tc.wantStderr != "" {
				assert.Equal(t, tc.wantStderr, string(stderr.Bytes()))
			}
		})
	}
}

// The reaper intercepts these signals for itself; the program must still
// get their default dispositions (a pipeline relies on SIGPIPE). Other
// ignored signals are the caller's (make, for one, runs recipes with
// signals 32 and 33 ignored) and pass through exec as usual.
func TestProgramDoesNotInheritTheReapersSignals(t *testing.T) {
	stdout := NewHeadCapture(1 << 10)
	g, err := Start(Spec{Argv: []string{"bash", "-c", "grep SigIgn /proc/self/status"}, Stdout: stdout, Stderr: NewHeadCapture(1 << 10)})
	require.NoError(t, err)
	code, err := g.Wait()
	require.NoError(t, err)
	require.Zero(t, code)
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(stdout.Bytes()), "SigIgn:")), 16, 64)
	require.NoError(t, err, "SigIgn line %q", stdout.Bytes())
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGPIPE, syscall.SIGTERM} {
		assert.Zero(t, mask&(1<<(sig-1)), "the program starts with %v ignored", sig)
	}
}

func TestKillReachesTheWholeGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	g, err := Start(Spec{Argv: []string{"bash", "-c", `sleep 60 & echo $! > "$1"; wait`, "bash", pidFile}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { b, _ := os.ReadFile(pidFile); return strings.HasSuffix(string(b), "\n") }, 10*time.Second, 5*time.Millisecond)
	g.Kill()
	code, err := g.Wait()
	require.NoError(t, err)
	assert.Equal(t, -1, code, "a killed leader reports -1")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	// The grandchild must be gone too: /proc/<pid> disappears once it is reaped
	// by init, so poll briefly.
	childProc := "/proc/" + strings.TrimSpace(string(b))
	assert.Eventually(t, func() bool {
		st, err := os.ReadFile(childProc + "/stat")
		return err != nil || strings.Contains(string(st), ") Z ")
	}, 10*time.Second, 5*time.Millisecond)
}

func TestCapture(t *testing.T) {
	tests := []struct {
		name          string
		capture       *Capture
		writes        []string
		want          string
		wantTruncated bool
	}{
		{name: "head keeps the beginning", capture: NewHeadCapture(4), writes: []string{"ab", "cdef"}, want: "abcd", wantTruncated: true},
		{name: "tail keeps the end", capture: NewTailCapture(4), writes: []string{"ab", "cdef", "g"}, want: "defg", wantTruncated: true},
		{name: "tail with one huge write", capture: NewTailCapture(3), writes: []string{"abcdefgh"}, want: "fgh", wantTruncated: true},
		{name: "within the limit nothing is truncated", capture: NewTailCapture(8), writes: []string{"ab", "cd"}, want: "abcd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.writes {
				n, err := tc.capture.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			assert.Equal(t, tc.want, string(tc.capture.Bytes()))
			assert.Equal(t, tc.wantTruncated, tc.capture.Truncated())
		})
	}
}

// escapeeScript starts a descendant that leaves the process group and the
// session (setsid, via a double fork), ignores SIGTERM, keeps stdout and
// stderr open, and writes its PID to $1; then the leader either waits or
// exits.
const escapeeScript = `(trap '' TERM; setsid bash -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 300' "$1" &) ; ` +
	`while [ ! -s "$1" ]; do sleep 0.01; done; `

func readPID(t *testing.T, pidFile string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)
	return pid
}

// gone reports whether pid no longer runs (absent, or a zombie not yet reaped).
func gone(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err != nil || strings.Contains(string(st), ") Z ")
}

func TestEscapedDescendants(t *testing.T) {
	tests := []struct {
		name   string
		script string
		kill   bool
	}{
		{name: "Kill reaches a descendant in another session that ignores SIGTERM", script: escapeeScript + "sleep 300", kill: true},
		{name: "a leader that exits takes an escaped descendant holding stdout with it", script: escapeeScript + "echo done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "escapee.pid")
			g, err := Start(Spec{Argv: []string{"bash", "-c", tc.script, "bash", pidFile}})
			require.NoError(t, err)
			pid := readPID(t, pidFile)
			if tc.kill {
				g.Kill()
			}
			requireWaitReturns(t, g, "Wait did not return while an escaped descendant lived")
			assert.Eventually(t, func() bool { return gone(pid) }, 10*time.Second, 10*time.Millisecond, "escaped descendant %d still runs", pid)
		})
	}
}

func TestWaitStopsReadingAfterGraceWithoutReaper(t *testing.T) {
	exe := reaperExe.Swap(nil)
	t.Cleanup(func() { reaperExe.Store(exe) })
	pidFile := filepath.Join(t.TempDir(), "escapee.pid")
	g, err := Start(Spec{Argv: []string{"bash", "-c", escapeeScript + "echo done", "bash", pidFile}})
	require.NoError(t, err)
	pid := readPID(t, pidFile)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	requireWaitReturns(t, g, "Wait kept reading a pipe an escaped descendant held open")
}

// requireWaitReturns fails the test if g.Wait does not return well after
// OutputGrace; a generous bound, since the machine may be busy.
func requireWaitReturns(t *testing.T, g *Group, msg string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		_, _ = g.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(OutputGrace + 30*time.Second):
		t.Fatal(msg)
	}
}
