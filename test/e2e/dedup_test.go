package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// serverTimingMicros parses a Server-Timing header: the dur of each named
// part in µs, and each desc.
func serverTimingMicros(t *testing.T, header string) (durs map[string]int64, descs map[string]string) {
	t.Helper()
	durs, descs = map[string]int64{}, map[string]string{}
	require.NotEmpty(t, header, "every answer carries Server-Timing")
	for _, metric := range strings.Split(header, ",") {
		fields := strings.Split(strings.TrimSpace(metric), ";")
		for _, param := range fields[1:] {
			k, v, ok := strings.Cut(param, "=")
			require.True(t, ok, "%q", header)
			switch k {
			case "dur":
				ms, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err, "%q", header)
				durs[fields[0]] = int64(ms*1000 + 0.5)
			case "desc":
				descs[fields[0]] = v
			}
		}
	}
	return durs, descs
}

// TestInvokeDeduplication: a caller-sent invocation ID runs once within
// runtimed's window, through kube-apiserver's aggregation and real Runtime
// Pods; every answer says where its time went.
func TestInvokeDeduplication(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "dedup")
	ctx := framework.Context(t, 8*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 4), metav1.CreateOptions{})
	require.NoError(t, err)
	createRun(ctx, t, runs, ns, functionRun("record", "python", "handlers.py", invokeHandlers, "handlers.record"))
	waitForRun(ctx, t, runs, ns, "record", functionTimeout, "Ready", inPhase(lifecycle.Ready))
	admin := newInvoker(t, f.AdminConfig)
	file := filepath.Join(t.TempDir(), "ran")
	post := func(ctx context.Context, id string, sleep int) (answer, time.Duration) {
		headers := map[string]string{}
		if id != "" {
			headers[invocation.HeaderID] = id
		}
		started := time.Now()
		a := admin.post(ctx, t, invokePath(ns, "record"), []byte(fmt.Sprintf(`{"file":%q,"sleep":%d}`, file, sleep)), headers)
		return a, time.Since(started)
	}

	t.Run("the same ID twice runs once, and both answers are identical", func(t *testing.T) {
		first, total := post(ctx, "order-1", 0)
		require.Equal(t, http.StatusOK, first.code, "%s", first.body)
		assert.Empty(t, first.header.Get(invocation.HeaderDeduplicated))
		second, _ := post(ctx, "order-1", 0)
		require.Equal(t, http.StatusOK, second.code, "%s", second.body)
		assert.Equal(t, "true", second.header.Get(invocation.HeaderDeduplicated), "the repeat is marked")
		assert.Equal(t, string(first.body), string(second.body), "the repeat's body is the first's")
		assert.Equal(t, []string{"order-1"}, readLines(t, file), "the handler ran once")

		durs, descs := serverTimingMicros(t, first.header.Get("Server-Timing"))
		for _, part := range []string{"apiserver", "runtimed", "handler"} {
			assert.Contains(t, durs, part, "Server-Timing of a first answer: %s", first.header.Get("Server-Timing"))
		}
		assert.Equal(t, "warm", descs["worker"], "the Python worker was running")
		var sum int64
		for _, d := range durs {
			sum += d
		}
		assert.LessOrEqual(t, sum, total.Microseconds(), "the parts add up to no more than the client's total")

		durs, descs = serverTimingMicros(t, second.header.Get("Server-Timing"))
		assert.Equal(t, "replayed", descs["dedup"])
		assert.NotContains(t, durs, "handler", "a replay did not run the handler")
	})

	t.Run("a repeat while the first runs waits for it instead of a 429", func(t *testing.T) {
		firstDone := make(chan answer, 1)
		before := len(readLines(t, file))
		go func() { a, _ := post(ctx, "order-2", 3); firstDone <- a }()
		waitForLines(ctx, t, file, before+1)
		repeat, _ := post(ctx, "order-2", 3)
		first := <-firstDone
		require.Equal(t, http.StatusOK, first.code, "%s", first.body)
		require.Equal(t, http.StatusOK, repeat.code, "the repeat waited: %s", repeat.body)
		assert.Equal(t, "true", repeat.header.Get(invocation.HeaderDeduplicated))
		assert.Equal(t, string(first.body), string(repeat.body))
		assert.Len(t, readLines(t, file), before+1, "the handler ran once")
	})

	t.Run("another ID, or none, runs again", func(t *testing.T) {
		before := len(readLines(t, file))
		for _, id := range []string{"order-3", "", ""} {
			a, _ := post(ctx, id, 0)
			require.Equal(t, http.StatusOK, a.code, "%s", a.body)
			assert.Empty(t, a.header.Get(invocation.HeaderDeduplicated))
			assert.NotEmpty(t, a.header.Get(invocation.HeaderID))
		}
		assert.Len(t, readLines(t, file), before+3, "each ran")
	})

	t.Run("krt invoke -v prints the ID, Server-Timing and the replay mark", func(t *testing.T) {
		krt := func() string {
			cmd := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), "--kubeconfig="+f.Kubeconfig, "-n", ns, "invoke", "record",
				"--data", fmt.Sprintf(`{"file":%q}`, file), "--invocation-id", "from-krt", "-v")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
			return stderr.String()
		}
		before := len(readLines(t, file))
		first := krt()
		assert.Contains(t, first, "Invocation ID: from-krt\n")
		assert.Contains(t, first, "Server-Timing: apiserver;dur=")
		assert.Contains(t, first, "worker;desc=warm")
		assert.NotContains(t, first, invocation.HeaderDeduplicated)
		second := krt()
		assert.Contains(t, second, "dedup;desc=replayed")
		assert.Contains(t, second, invocation.HeaderDeduplicated+": true")
		assert.Len(t, readLines(t, file), before+1, "the handler ran once")
	})

	// The limit docs/invoke.md states: the record lives in the owning
	// runtimed, so a repeat after the function moved to another Pod runs.
	t.Run("a repeat after the function moved to another Pod runs again", func(t *testing.T) {
		first, _ := post(ctx, "order-moved", 0)
		require.Equal(t, http.StatusOK, first.code, "%s", first.body)
		run, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "record", metav1.GetOptions{})
		require.NoError(t, err)
		oldPod := run.Status.AssignedPodUID

		out, err := f.Kubectl(ctx, "-n", ns, "rollout", "restart", "deployment/runtime-python")
		require.NoError(t, err, "%s", out)
		waitForRun(ctx, t, runs, ns, "record", functionTimeout, "Ready on another Pod", func(r *v1alpha1.Run) bool {
			return r.Status.Phase == lifecycle.Ready && r.Status.AssignedPodUID != oldPod
		})
		before := len(readLines(t, file))
		var again answer
		// Until the apiserver routes to the new owner it answers 503 with
		// Retry-After (nothing ran, nothing recorded).
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			again, _ = post(ctx, "order-moved", 0)
			seen.State("answered %d: %s", again.code, again.body)
			return again.code != http.StatusServiceUnavailable, nil
		}))
		require.Equal(t, http.StatusOK, again.code, "%s", again.body)
		assert.Empty(t, again.header.Get(invocation.HeaderDeduplicated), "not a replay")
		assert.Len(t, readLines(t, file), before+1, "the new owner's record started empty: the handler ran again")
	})
}
