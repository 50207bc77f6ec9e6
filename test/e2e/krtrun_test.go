package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// numbered prints n numbered lines 200 ms apart, each with the time it was
// printed (Unix nanoseconds): the Runtime Pod runs on this machine's clock.
const numbered = `for i in $(seq 1 12); do echo "line $i $(date +%s%N)"; sleep 0.2; done`

// arrivedLine is a line of output and when this test read it.
type arrivedLine struct {
	text string
	at   time.Time
}

// readArrivedLines reads r line by line, stamping each as it arrives.
func readArrivedLines(r io.Reader) <-chan arrivedLine {
	ch := make(chan arrivedLine, 256)
	go func() {
		defer close(ch)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				ch <- arrivedLine{text: line, at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// assertLive checks that each numbered line arrived before the next one
// was printed, and returns the lines' text and print-to-arrival latencies.
func assertLive(t *testing.T, lines []arrivedLine) (string, []time.Duration) {
	t.Helper()
	var text strings.Builder
	var latencies []time.Duration
	var printed []time.Time
	for i, l := range lines {
		text.WriteString(l.text)
		fields := strings.Fields(l.text)
		require.Len(t, fields, 3, "line %d: %q", i, l.text)
		require.Equal(t, strconv.Itoa(i+1), fields[1])
		ns, err := strconv.ParseInt(fields[2], 10, 64)
		require.NoError(t, err)
		printed = append(printed, time.Unix(0, ns))
		latencies = append(latencies, l.at.Sub(printed[i]))
	}
	for i := 0; i+1 < len(lines); i++ {
		assert.True(t, lines[i].at.Before(printed[i+1]), "line %d arrived %v after line %d was printed", i+1, lines[i].at.Sub(printed[i+1]), i+2)
	}
	return text.String(), latencies
}

// TestKrtRunLogsFollow follows tasks live through kube-apiserver's
// aggregation: krt run, krt logs -f, kubectl get --raw ...?follow=true, and
// krt cancel of a followed Run; krt run's exit codes.
func TestKrtRunLogsFollow(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "krtrun")
	ctx := framework.Context(t, 8*time.Minute)
	examples := filepath.Join(f.RepoRoot, "artifacts", "examples")
	out, err := f.Kubectl(ctx, "-n", ns, "apply", "-f", filepath.Join(examples, "runtime-bash.yaml"))
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "runtime/bash", "--timeout=3m")
	require.NoError(t, err, out)
	runs := client.KruntimesV1alpha1().Runs(ns)

	krt := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), append([]string{"--kubeconfig=" + f.Kubeconfig, "-n", ns}, args...)...)
	}
	exitCode := func(err error) int {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		require.NoError(t, err)
		return 0
	}
	collect := func(t *testing.T, ch <-chan arrivedLine) []arrivedLine {
		var lines []arrivedLine
		for l := range ch {
			lines = append(lines, l)
		}
		return lines
	}

	t.Run("krt run prints each line before the next is printed and exits with the task's code", func(t *testing.T) {
		cmd := krt(ctx, "run", "--name", "numbered", "--", "sh", "-c", numbered+"; echo oops >&2; exit 3")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		lines := collect(t, readArrivedLines(stdout))
		code := exitCode(cmd.Wait())
		assert.Equal(t, 3, code, stderr.String())
		require.Len(t, lines, 12, stderr.String())
		text, latencies := assertLive(t, lines)
		t.Logf("print to krt run's stdout: %v", latencies)
		assert.Contains(t, stderr.String(), "oops\n")
		assert.Contains(t, stderr.String(), "run/numbered Failed (exit code 3)")

		kept, err := krt(ctx, "logs", "numbered", "--stream", "Stdout").Output()
		require.NoError(t, err)
		assert.Equal(t, text, string(kept), "what was followed is what was kept")
	})

	t.Run("krt run -- sh -c 'echo hi; exit 0'", func(t *testing.T) {
		out, err := krt(ctx, "run", "--", "sh", "-c", "echo hi; exit 0").Output()
		require.NoError(t, err)
		assert.Equal(t, "hi\n", string(out))
	})

	t.Run("krt logs -f and kubectl get --raw follow a Run from before it starts to its end", func(t *testing.T) {
		// Created by --wait's krt run in the background: nothing follows it
		// but the two readers below, which start while it is Pending or
		// sleeping (TestRunLogFollowsARunningTask in test/integration starts
		// one on a Pending Run for certain).
		wait := krt(ctx, "run", "--wait", "--name", "watched", "--", "sh", "-c", "sleep 3; "+numbered)
		require.NoError(t, wait.Start())
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, _ *framework.Observed) (bool, error) {
			_, err := runs.Get(ctx, "watched", metav1.GetOptions{})
			return err == nil, nil
		}))
		logs := krt(ctx, "logs", "-f", "watched")
		logsOut, err := logs.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, logs.Start())
		raw := f.KubectlCommand(ctx, "get", "--raw", "/apis/kruntimes.io/v1alpha1/namespaces/"+ns+"/runs/watched/log?follow=true")
		rawOut, err := raw.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, raw.Start())

		logsCh, rawCh := readArrivedLines(logsOut), readArrivedLines(rawOut)
		logsLines, rawLines := collect(t, logsCh), collect(t, rawCh)
		require.NoError(t, logs.Wait(), "krt logs -f ends after the last byte")
		require.NoError(t, raw.Wait())
		require.NoError(t, wait.Wait())
		require.Len(t, logsLines, 12)
		require.Len(t, rawLines, 12)
		text, latencies := assertLive(t, logsLines)
		t.Logf("print to krt logs -f: %v", latencies)
		rawText, _ := assertLive(t, rawLines)
		assert.Equal(t, text, rawText)
		kept, err := krt(ctx, "logs", "watched").Output()
		require.NoError(t, err)
		assert.Equal(t, text, string(kept))
	})

	t.Run("a follow through aggregation outlives the 60 s request timeout", func(t *testing.T) {
		// kube-apiserver treats a log subresource as long-running, and
		// kruntimes-apiserver a follow of runs/log.
		wait := krt(ctx, "run", "--wait", "--name", "long", "--", "sh", "-c", `for i in $(seq 1 8); do echo "tick $i"; sleep 10; done`)
		require.NoError(t, wait.Start())
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, _ *framework.Observed) (bool, error) {
			_, err := runs.Get(ctx, "long", metav1.GetOptions{})
			return err == nil, nil
		}))
		started := time.Now()
		out, err := f.Kubectl(ctx, "get", "--raw", "/apis/kruntimes.io/v1alpha1/namespaces/"+ns+"/runs/long/log?follow=true")
		require.NoError(t, err, out)
		took := time.Since(started)
		require.NoError(t, wait.Wait())
		assert.Equal(t, "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\ntick 7\ntick 8\n", out)
		assert.Greater(t, took, 70*time.Second, "one follow for the task's whole life")
	})

	t.Run("krt cancel ends a followed krt run with 130", func(t *testing.T) {
		run := krt(ctx, "run", "--name", "sleeper", "--", "sh", "-c", "echo started; exec sleep 300")
		stdout, err := run.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		run.Stderr = &stderr
		require.NoError(t, run.Start())
		lines := readArrivedLines(stdout)
		select {
		case l := <-lines:
			assert.Equal(t, "started\n", l.text, "followed live while it runs")
		case <-time.After(2 * time.Minute):
			t.Fatal("krt run printed nothing of the running task")
		}
		out, err := krt(ctx, "cancel", "sleeper", "--wait", "--timeout", "90s").CombinedOutput()
		require.NoError(t, err, string(out))
		for range lines {
		}
		assert.Equal(t, 130, exitCode(run.Wait()), stderr.String())
		got, err := runs.Get(ctx, "sleeper", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Cancelled, got.Status.Phase)
	})
}
