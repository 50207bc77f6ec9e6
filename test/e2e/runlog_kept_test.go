package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster/nodeagent"
)

// TestRunLogKept: a task that writes 20 MB keeps its head and tail with a
// marker, within the 1 MiB bound; the log is served after the task's Pod is
// gone; kruntimes-view reads it and an identity without get runs/log is
// refused (403) — all through kube-apiserver's aggregation.
func TestRunLogKept(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "runlogkept")
	ctx := framework.Context(t, 5*time.Minute)
	examples := filepath.Join(f.RepoRoot, "artifacts", "examples")

	out, err := f.Kubectl(ctx, "-n", ns, "apply", "-f", filepath.Join(examples, "runtime-bash.yaml"))
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "runtime/bash", "--timeout=3m")
	require.NoError(t, err, out)
	// What each process's RSS does while the task writes 20 MB and the log
	// is read: reported, not asserted (race-built binaries, a shared
	// machine).
	pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	watched := map[string]int{"kruntimes-apiserver": f.Cluster.KruntimesReplicaPIDs()[0]}
	for _, pod := range pods.Items {
		for _, exe := range []string{"runtimed", "kruntimes-runtime"} {
			watched[exe+" of "+pod.Name] = podProcess(exe, nodeagent.PodDir(filepath.Join(f.Cluster.Config().StateDir, "pods"), pod.UID))
		}
	}
	rss := newRSSSampler(watched)
	const written = 20_000_000
	big := strings.NewReplacer("name: hello", "name: big",
		`echo "hello, $NAME"`, `yes 0123456789abcdefghi | head -c `+strconv.Itoa(written)).
		Replace(mustRead(t, filepath.Join(examples, "run-task.yaml")))
	out, err = f.KubectlWithInput(ctx, big, "-n", ns, "create", "-f", "-")
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=jsonpath={.status.phase}=Succeeded", "run/big", "--timeout=2m")
	require.NoError(t, err, out)

	logPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + ns + "/runs/big/log"
	kept, err := f.Kubectl(ctx, "get", "--raw", logPath)
	require.NoError(t, err)
	for name, r := range rss.stop() {
		t.Logf("RSS of %s (pid %d) while the task wrote %d bytes and the log was read: %.1f MiB before, at most %.1f MiB (+%.1f MiB), %.1f MiB after",
			name, r.pid, written, mib(r.before), mib(r.max), mib(r.max-r.before), mib(r.after))
	}
	marker := regexp.MustCompile(`(?m)^\[kruntimes: (\d+) bytes of this log were dropped here; the first and the last bytes are kept\]\n`)
	m := marker.FindStringSubmatchIndex(kept)
	require.NotNil(t, m, "a marker line between head and tail")
	dropped, err := strconv.Atoi(kept[m[2]:m[3]])
	require.NoError(t, err)
	head, tail := kept[:m[0]], kept[m[1]:]
	full := strings.Repeat("0123456789abcdefghi\n", written/20)
	if !strings.HasPrefix(full, head) {
		// A head that ends mid-line is ended before the marker's line.
		head = strings.TrimSuffix(head, "\n")
	}
	assert.True(t, strings.HasPrefix(full, head), "the head is the first bytes written")
	assert.True(t, strings.HasSuffix(full, tail), "the tail is the last bytes written")
	assert.Equal(t, written, len(head)+dropped+len(tail), "head + dropped + tail is everything written")
	assert.LessOrEqual(t, len(head)+len(tail), 1<<20, "what is kept is within --run-log-max-bytes (1 MiB)")
	assert.Greater(t, len(head)+len(tail), 900<<10, "about the bound is kept")

	// A task that prints nothing: runtimed saves no log for it.
	silent := strings.NewReplacer("name: hello", "name: silent", `echo "hello, $NAME"`, `true`).
		Replace(mustRead(t, filepath.Join(examples, "run-task.yaml")))
	out, err = f.KubectlWithInput(ctx, silent, "-n", ns, "create", "-f", "-")
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=jsonpath={.status.phase}=Succeeded", "run/silent", "--timeout=2m")
	require.NoError(t, err, out)

	t.Run("the log is served after the task's Pod is deleted; a silent task's is empty", func(t *testing.T) {
		pods := map[string]bool{}
		for _, name := range []string{"big", "silent"} {
			run, err := client.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			if run.Status.AssignedPod != "" {
				pods[run.Status.AssignedPod] = true
			}
		}
		if len(pods) == 0 {
			list, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			require.NotEmpty(t, list.Items)
			pods[list.Items[0].Name] = true
		}
		for pod := range pods {
			require.NoError(t, f.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
			require.NoError(t, framework.Poll(ctx, framework.PollInterval, 2*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
				_, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}), "the Pod is gone")
		}
		again, err := f.Kubectl(ctx, "get", "--raw", logPath)
		require.NoError(t, err)
		assert.Equal(t, len(kept), len(again))
		assert.True(t, kept == again, "the same log")
		for _, query := range []string{"", "?follow=true", "?attempt=1"} {
			empty, err := f.Kubectl(ctx, "get", "--raw", "/apis/kruntimes.io/v1alpha1/namespaces/"+ns+"/runs/silent/log"+query)
			require.NoError(t, err, "a silent task's log reads as an empty 200 (%s): %s", query, empty)
			assert.Empty(t, empty, query)
		}
	})

	t.Run("kruntimes-view reads the log; an identity without get runs/log is 403", func(t *testing.T) {
		for _, sa := range []string{"viewer", "nobody"} {
			out, err := f.Kubectl(ctx, "-n", ns, "create", "serviceaccount", sa)
			require.NoError(t, err, out)
		}
		out, err := f.Kubectl(ctx, "-n", ns, "create", "rolebinding", "viewer", "--clusterrole=kruntimes-view", "--serviceaccount="+ns+":viewer")
		require.NoError(t, err, out)
		var viewed string
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			viewed, err = f.Kubectl(ctx, "--as=system:serviceaccount:"+ns+":viewer", "get", "--raw", logPath+"?tailLines=1")
			return !seen.Err(err), nil
		}), "kruntimes-view may get runs/log (the RoleBinding may take a moment to be seen)")
		assert.Equal(t, "0123456789abcdefghi\n", viewed)
		out, err = f.Kubectl(ctx, "--as=system:serviceaccount:"+ns+":nobody", "get", "--raw", logPath)
		require.Error(t, err)
		assert.Contains(t, out+err.Error(), "Forbidden")
	})

	t.Run("a retried task keeps attempt=1 and attempt=2 separately", func(t *testing.T) {
		// Runtime Pods of the local cluster are processes of this machine:
		// a file of the test's own tells the second attempt from the first.
		marker := filepath.Join(t.TempDir(), "first-attempt-ran")
		retried := strings.NewReplacer("name: hello", "name: retried",
			"  timeout: 1m", "  timeout: 1m\n  retryPolicy:\n    maxAttempts: 2\n    backoff:\n      initial: 100ms",
			`echo "hello, $NAME"`, `if [ -e `+marker+` ]; then echo "second try"; else touch `+marker+`; echo "first try"; exit 3; fi`).
			Replace(mustRead(t, filepath.Join(examples, "run-task.yaml")))
		out, err := f.KubectlWithInput(ctx, retried, "-n", ns, "create", "-f", "-")
		require.NoError(t, err, out)
		out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=jsonpath={.status.phase}=Succeeded", "run/retried", "--timeout=2m")
		require.NoError(t, err, out)
		run, err := client.KruntimesV1alpha1().Runs(ns).Get(ctx, "retried", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, int32(2), run.Status.Attempt)
		retriedPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + ns + "/runs/retried/log"
		for query, want := range map[string]string{
			"?attempt=1": "first try\n",
			"?attempt=2": "second try\n",
			"":           "second try\n",
		} {
			got, err := f.Kubectl(ctx, "get", "--raw", retriedPath+query)
			require.NoError(t, err, got)
			assert.Equal(t, want, got, query)
		}
		out, err = f.Kubectl(ctx, "get", "--raw", retriedPath+"?attempt=3")
		require.Error(t, err, "attempt 3 never ran: 400")
		assert.Contains(t, out+err.Error(), "attempts 1 to 2 exist")
	})
}

// rssSample is what an rssSampler saw of one process.
type rssSample struct {
	pid                int
	before, max, after int64
}

// rssSampler reads the resident set size of processes every 20 ms.
type rssSampler struct {
	done    chan struct{}
	stopped chan map[string]rssSample
}

func newRSSSampler(pids map[string]int) *rssSampler {
	s := &rssSampler{done: make(chan struct{}), stopped: make(chan map[string]rssSample, 1)}
	samples := map[string]rssSample{}
	for name, pid := range pids {
		now := vmRSS(pid)
		samples[name] = rssSample{pid: pid, before: now, max: now}
	}
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				for name, r := range samples {
					r.after = vmRSS(r.pid)
					samples[name] = r
				}
				s.stopped <- samples
				return
			case <-tick.C:
				for name, r := range samples {
					r.max = max(r.max, vmRSS(r.pid))
					samples[name] = r
				}
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() map[string]rssSample {
	close(s.done)
	return <-s.stopped
}

// vmRSS is pid's resident set size in bytes, or 0.
func vmRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// podProcess finds the process of the local node whose executable is
// bin/<exe> and who works in podDir, a Pod's directory, or 0.
func podProcess(exe, podDir string) int {
	entries, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, e := range entries {
		path, err := os.Readlink(e)
		if err != nil || filepath.Base(path) != exe {
			continue
		}
		dir := filepath.Dir(e)
		if cwd, err := os.Readlink(filepath.Join(dir, "cwd")); err == nil && strings.HasPrefix(cwd, podDir+"/") {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			return pid
		}
	}
	return 0
}
