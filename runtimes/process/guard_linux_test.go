package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envGuardChild makes this test binary run guardChild instead of the tests:
// the guard makes a process a subreaper for good, which the other tests of
// this binary must not be.
const envGuardChild = "KRUNTIMES_TEST_GUARD_CHILD"

// guardChild starts a program that leaves a daemon (a new session) and then
// kills its own reaper, as user code of the reaper's user can; it prints the
// daemon's PID and whether the daemon is still alive once the program is
// gone. mode is "guarded" or "unguarded".
func guardChild(mode string) int {
	if mode == "guarded" {
		if err := GuardOrphans(context.Background()); err != nil {
			fmt.Println("guard:", err)
			return 1
		}
	}
	out := NewHeadCapture(1 << 10)
	g, err := Start(Spec{Argv: []string{"bash", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!; kill -KILL $PPID; sleep 300`}, Stdout: out})
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	_, _ = g.Wait()
	daemon := strings.TrimSpace(string(out.Bytes()))
	fmt.Println("daemon", daemon)
	// Unguarded, the daemon is expected to live: a short look shows it.
	wait := 30 * time.Second
	if mode != "guarded" {
		wait = 2 * time.Second
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if !alive(daemon) {
			fmt.Println("gone")
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("alive")
	return 0
}

// alive reports whether pid names a process that has not exited (a zombie
// has).
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && !strings.HasPrefix(s[i+1:], " Z")
}

func runGuardChild(t *testing.T, mode string) (daemon string, outcome string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envGuardChild+"="+mode)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if pid, ok := strings.CutPrefix(line, "daemon "); ok {
			daemon = pid
		} else if line == "gone" || line == "alive" {
			outcome = line
		}
	}
	require.NotEmpty(t, daemon, "%s", out)
	if pid, err := strconv.Atoi(daemon); err == nil && outcome != "gone" {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	return daemon, outcome
}

// A program that kills its reaper leaves its daemon to whoever adopts
// orphans: with the guard that is the Runtime Server, which kills it. The
// unguarded run shows that the daemon would otherwise live on.
func TestGuardOrphansKillsWhatOutlivesAKilledReaper(t *testing.T) {
	_, outcome := runGuardChild(t, "unguarded")
	require.Equal(t, "alive", outcome, "without the guard the daemon outlives its killed reaper (else this test proves nothing)")
	_, outcome = runGuardChild(t, "guarded")
	assert.Equal(t, "gone", outcome, "the guard kills the daemon its killed reaper left")
}

// A reaper that user code stopped (SIGSTOP) cannot act on its stop signal;
// Kill then kills it after reaperKillGrace, and Wait returns.
func TestKillEndsAStoppedReaper(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	g, err := Start(Spec{Argv: []string{"bash", "-c", `kill -STOP $PPID; touch "$1"; exec sleep 300`, "bash", ready}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 5*time.Millisecond)
	g.Kill()
	waited := make(chan int, 1)
	go func() { code, _ := g.Wait(); waited <- code }()
	select {
	case code := <-waited:
		assert.Equal(t, -1, code)
	case <-time.After(reaperKillGrace + 10*time.Second):
		t.Fatal("Wait did not return: the stopped reaper was never killed")
	}
}
