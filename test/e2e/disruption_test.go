package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// rolloutHandler records the start and the end of every execution, with
// the Pod it ran on (POD_UID from the downward API), in a file of the
// test's: the handlers' own account of whether two executions of one
// function ever overlapped.
const rolloutHandler = `import json, os, time

def _record(path, what, invocation):
    with open(path, "a") as f:
        f.write(json.dumps({"what": what, "id": invocation, "pod": os.environ.get("POD_UID", ""), "t": time.time()}) + "\n")

def handle(event, context):
    _record(event["file"], "start", context.invocation_id)
    time.sleep(event["sleep"])
    _record(event["file"], "end", context.invocation_id)
    return os.environ.get("POD_UID", "")
`

// rolloutFunctions is how many functions the rollout test moves; the issue
// asks for 20, this machine (two cores shared by every test) bears 8 in
// reasonable time, each a warm Python worker invoked in a loop.
const rolloutFunctions = 8

// rolloutCall is one invoke as a client saw it.
type rolloutCall struct {
	sent, answered time.Time
	code           int
	retryAfter     string
	err            error
}

// TestRuntimeRolloutRelocatesFunctions is the planned disruption of issue
// 23: kubectl rollout restart of a Runtime whose Ready functions (maxAttempts
// 1) are invoked in a loop by handlers that sleep 1.5 s. Every function is
// Ready again on the new Pod at attempt 1; its handler records show no two
// executions overlapping in time; clients saw only 200, and 503 with
// Retry-After while the function moved. It reports the longest 503 window
// per function and the time from the rollout's start to all Ready.
func TestRuntimeRolloutRelocatesFunctions(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "rollout")
	ctx := framework.Context(t, 10*time.Minute)

	rt := functionRuntime("python", "python", rolloutFunctions)
	// The default grace: runtimed relocates within half of it.
	rt.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	rt.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_UID",
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, rt, metav1.CreateOptions{})
	require.NoError(t, err)

	records := t.TempDir()
	names := make([]string, rolloutFunctions)
	for i := range names {
		names[i] = fmt.Sprintf("fn-%d", i)
		createRun(ctx, t, runs, ns, functionRun(names[i], "python", "handler.py", rolloutHandler, "handler.handle"))
	}
	before := map[string]*v1alpha1.Run{}
	for _, name := range names {
		before[name] = waitForRun(ctx, t, runs, ns, name, functionTimeout, "Ready", inPhase(lifecycle.Ready))
	}
	oldPods := map[types.UID]bool{}
	for _, run := range before {
		oldPods[run.Status.AssignedPodUID] = true
	}

	// One client per function, invoking in a loop until stopped.
	client, err := rest.HTTPClientFor(f.AdminConfig)
	require.NoError(t, err)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var mu sync.Mutex
	calls := map[string][]rolloutCall{}
	var wg sync.WaitGroup
	var stopping atomic.Bool
	for _, name := range names {
		body, err := json.Marshal(map[string]any{"file": filepath.Join(records, name+".jsonl"), "sleep": 1.5})
		require.NoError(t, err)
		url := f.AdminConfig.Host + invokePath(ns, name) + "?timeout=20s"
		wg.Go(func() {
			// Stopping lets the call in flight answer, so that every
			// execution the handler started has its end record.
			for loadCtx.Err() == nil && !stopping.Load() {
				c := invokeOnce(loadCtx, client, url, body)
				if loadCtx.Err() != nil {
					return // cut by the end of the test, not an answer
				}
				mu.Lock()
				calls[name] = append(calls[name], c)
				mu.Unlock()
				if c.code != http.StatusOK {
					// Ask again soon, to measure the window closely.
					select {
					case <-loadCtx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		})
	}
	okSince := func(since time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, name := range names {
			if !slices.ContainsFunc(calls[name], func(c rolloutCall) bool { return c.code == http.StatusOK && c.sent.After(since) }) {
				return false
			}
		}
		return true
	}
	err = framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		return okSince(time.Time{}), nil
	})
	require.NoError(t, err, "every function answers 200 before the rollout")

	// What the relocation's parts cost: the Runs' transitions and the old
	// Pods' deletion as a watch sees them (reported, not asserted).
	timeline := watchRelocation(loadCtx, t, f, runs, ns, oldPods)
	started := time.Now()
	out, err := f.Kubectl(ctx, "-n", ns, "rollout", "restart", "deployment/runtime-python")
	require.NoError(t, err, out)
	var allReady time.Time
	after := map[string]*v1alpha1.Run{}
	err = framework.Poll(ctx, 100*time.Millisecond, 3*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		list, err := runs.KruntimesV1alpha1().Runs(ns).List(ctx, metav1.ListOptions{})
		if seen.Err(err) {
			return false, nil
		}
		for i := range list.Items {
			run := &list.Items[i]
			if run.Status.Phase != lifecycle.Ready || oldPods[run.Status.AssignedPodUID] {
				seen.State("Run %s is %s on Pod %s (attempt %d): %s", run.Name, run.Status.Phase, run.Status.AssignedPod, run.Status.Attempt, run.Status.Message)
				return false, nil
			}
			after[run.Name] = run.DeepCopy()
		}
		return len(after) == rolloutFunctions, nil
	})
	require.NoError(t, err, "every function is Ready on a new Pod")
	allReady = time.Now()
	err = framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: lifecycle.LabelRuntime + "=python"})
		if seen.Err(err) {
			return false, nil
		}
		for _, p := range pods.Items {
			if oldPods[p.UID] {
				seen.State("old Pod %s is still there", p.Name)
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "the old Pod is gone")
	err = framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		return okSince(allReady), nil
	})
	require.NoError(t, err, "every function answers 200 on its new Pod")
	stopping.Store(true)
	wg.Wait()

	t.Run("every function is Ready on a new Pod at the same attempt", func(t *testing.T) {
		for _, name := range names {
			run := after[name]
			require.NotNil(t, run, name)
			assert.Equal(t, before[name].UID, run.UID)
			assert.Equal(t, int32(1), run.Status.Attempt, "%s spent no attempt", name)
			assert.False(t, oldPods[run.Status.AssignedPodUID], "%s is on a new Pod", name)
			ready := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady)
			require.NotNil(t, ready)
			assert.Equal(t, metav1.ConditionTrue, ready.Status)
		}
	})

	t.Run("clients saw only 200, and 503 with Retry-After", func(t *testing.T) {
		byCode := map[int]int{}
		for _, name := range names {
			for _, c := range calls[name] {
				byCode[c.code]++
				switch c.code {
				case http.StatusOK:
				case http.StatusServiceUnavailable:
					assert.NotEmpty(t, c.retryAfter, "a 503 of %s carries Retry-After", name)
				default:
					t.Errorf("%s: an invoke sent at %s answered %d (%v)", name, c.sent.Format(time.RFC3339Nano), c.code, c.err)
				}
			}
		}
		t.Logf("answers by code: %v", byCode)
		assert.Positive(t, byCode[http.StatusOK])
	})

	t.Run("no two executions of one function overlap, and each ran on the old Pod and then the new one", func(t *testing.T) {
		for _, name := range names {
			execs := readExecutions(t, filepath.Join(records, name+".jsonl"))
			pods := map[string]bool{}
			for i, e := range execs {
				pods[e.pod] = true
				assert.False(t, e.end.IsZero(), "%s: execution %s on Pod %s has no end record: it was cut", name, e.id, e.pod)
				if i > 0 && !execs[i-1].end.IsZero() {
					assert.False(t, e.start.Before(execs[i-1].end), "%s: execution %s on Pod %s started at %s, before %s on Pod %s ended at %s",
						name, e.id, e.pod, e.start.Format(time.RFC3339Nano), execs[i-1].id, execs[i-1].pod, execs[i-1].end.Format(time.RFC3339Nano))
				}
			}
			assert.True(t, pods[string(before[name].Status.AssignedPodUID)], "%s ran on its old Pod", name)
			assert.True(t, pods[string(after[name].Status.AssignedPodUID)], "%s ran on its new Pod", name)
		}
	})

	// The numbers the issue asks for (reported, not asserted).
	var longest, mostRefused, slowest time.Duration
	for _, name := range names {
		window := longestRefusal(calls[name], answeredAt)
		longest = max(longest, window)
		refused := longestRefusal(calls[name], sentAt)
		mostRefused = max(mostRefused, refused)
		// A call that waited in the apiserver for the function to move
		// is answered 200, later: the longest one is the function's stall.
		var longestOK time.Duration
		for _, c := range calls[name] {
			if c.code == http.StatusOK {
				longestOK = max(longestOK, c.answered.Sub(c.sent))
			}
		}
		slowest = max(slowest, longestOK)
		t.Logf("%s: %d answers, longest 503 window %s (refusing %s: first 503 sent to the accepted call sent), longest 200 %s (sent to answered, the handler's 1.5 s included)",
			name, len(calls[name]), window.Round(time.Millisecond), refused.Round(time.Millisecond), longestOK.Round(time.Millisecond))
	}
	t.Logf("rollout restart of %d Ready functions: all Ready on the new Pod %s after the rollout started; longest 503 window of a function %s (until the 200 answered, so it includes one handler's 1.5 s), longest refusing %s, longest 200 %s",
		rolloutFunctions, allReady.Sub(started).Round(time.Millisecond), longest.Round(time.Millisecond), mostRefused.Round(time.Millisecond), slowest.Round(time.Millisecond))
	mu.Lock()
	timeline.report(t, names, calls)
	mu.Unlock()
}

// longestRefusal is the longest time a function refused: from the sending
// of the first of consecutive non-200 answers to end(the 200 that ended
// them) — its sending (when the function accepted it: how long the service
// refused) or its answer (a handler's run later: what the caller waited).
func longestRefusal(calls []rolloutCall, end func(rolloutCall) time.Time) time.Duration {
	var longest time.Duration
	var since time.Time
	for _, c := range calls {
		switch {
		case c.code == http.StatusOK && !since.IsZero():
			longest = max(longest, end(c).Sub(since))
			since = time.Time{}
		case c.code != http.StatusOK && since.IsZero():
			since = c.sent
		}
	}
	return longest
}

func sentAt(c rolloutCall) time.Time     { return c.sent }
func answeredAt(c rolloutCall) time.Time { return c.answered }

// relocationTimeline is what a watch saw of a rollout: when each old Pod
// was first seen deleting, and each Run's transitions.
type relocationTimeline struct {
	mu       sync.Mutex
	deleting map[types.UID]time.Time
	seen     map[string][]runTransition
}

// runTransition is one observed state of a Run.
type runTransition struct {
	at     time.Time
	phase  lifecycle.Phase
	pod    types.UID
	reason string
}

// watchRelocation records, until ctx ends, the Runs of ns and the deletion
// of oldPods.
func watchRelocation(ctx context.Context, t *testing.T, f *framework.Framework, runs versioned.Interface, ns string, oldPods map[types.UID]bool) *relocationTimeline {
	t.Helper()
	tl := &relocationTimeline{deleting: map[types.UID]time.Time{}, seen: map[string][]runTransition{}}
	rw, err := runs.KruntimesV1alpha1().Runs(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	pw, err := f.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	go func() {
		defer rw.Stop()
		for ev := range rw.ResultChan() {
			run, ok := ev.Object.(*v1alpha1.Run)
			if !ok {
				continue
			}
			tr := runTransition{at: time.Now(), phase: run.Status.Phase, pod: run.Status.AssignedPodUID}
			if c := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady); c != nil {
				tr.reason = c.Reason
			}
			tl.mu.Lock()
			prev := tl.seen[run.Name]
			if len(prev) == 0 || prev[len(prev)-1].phase != tr.phase || prev[len(prev)-1].pod != tr.pod {
				tl.seen[run.Name] = append(prev, tr)
			}
			tl.mu.Unlock()
		}
	}()
	go func() {
		defer pw.Stop()
		for ev := range pw.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || pod.DeletionTimestamp == nil || !oldPods[pod.UID] {
				continue
			}
			tl.mu.Lock()
			if _, ok := tl.deleting[pod.UID]; !ok {
				tl.deleting[pod.UID] = time.Now()
			}
			tl.mu.Unlock()
		}
	}()
	return tl
}

// report logs, per function, when each part of its move was seen, from
// its old Pod's deletion: the last 200 before the move, the first 503,
// Pending (Relocating), Scheduled, Running and Ready on the new Pod, the
// first 200 sent and answered; then the medians.
func (tl *relocationTimeline) report(t *testing.T, names []string, calls map[string][]rolloutCall) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	parts := []string{"last200", "first503", "Pending", "Scheduled", "Running", "Ready", "200sent", "200answered"}
	all := map[string][]time.Duration{}
	for _, name := range names {
		seen := tl.seen[name]
		var t0 time.Time
		var oldPod types.UID
		for _, tr := range seen {
			if tr.phase == lifecycle.Ready {
				oldPod = tr.pod
				break
			}
		}
		t0 = tl.deleting[oldPod]
		if t0.IsZero() {
			t.Logf("%s: timeline: the deletion of its old Pod was not seen", name)
			continue
		}
		at := map[string]time.Time{}
		moved := false
		for _, tr := range seen {
			switch {
			case tr.at.Before(t0):
			case tr.phase == lifecycle.Pending && at["Pending"].IsZero():
				at["Pending"], moved = tr.at, true
			case moved && tr.phase == lifecycle.Scheduled && at["Scheduled"].IsZero():
				at["Scheduled"] = tr.at
			case moved && tr.phase == lifecycle.Running && at["Running"].IsZero():
				at["Running"] = tr.at
			case moved && tr.phase == lifecycle.Ready && at["Ready"].IsZero():
				at["Ready"] = tr.at
			}
		}
		for _, c := range calls[name] {
			switch {
			case c.code == http.StatusOK && at["first503"].IsZero() && c.answered.After(t0):
				at["last200"] = c.answered
			case c.code != http.StatusOK && at["first503"].IsZero():
				at["first503"] = c.sent
			case c.code == http.StatusOK && !at["first503"].IsZero() && at["200sent"].IsZero():
				at["200sent"], at["200answered"] = c.sent, c.answered
			}
		}
		line := ""
		for _, p := range parts {
			if at[p].IsZero() {
				line += fmt.Sprintf(" %s=-", p)
				continue
			}
			d := at[p].Sub(t0)
			all[p] = append(all[p], d)
			line += fmt.Sprintf(" %s=%s", p, d.Round(time.Millisecond))
		}
		t.Logf("%s: timeline from its old Pod's deletion:%s", name, line)
	}
	line := ""
	for _, p := range parts {
		ds := all[p]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		line += fmt.Sprintf(" %s=%s", p, ds[len(ds)/2].Round(time.Millisecond))
	}
	t.Logf("relocation timeline, medians from the old Pod's deletion:%s", line)
}

// invokeOnce POSTs body to url and returns what the client saw.
func invokeOnce(ctx context.Context, client *http.Client, url string, body []byte) rolloutCall {
	c := rolloutCall{sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		c.err, c.answered = err, time.Now()
		return c
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		c.err, c.answered = err, time.Now()
		return c
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	c.answered, c.code, c.retryAfter = time.Now(), resp.StatusCode, resp.Header.Get("Retry-After")
	if c.code != http.StatusOK {
		c.err = fmt.Errorf("%s", bytes.TrimSpace(data))
	}
	return c
}

// execution is one run of the rollout handler, from its own records.
type execution struct {
	id, pod    string
	start, end time.Time
}

// readExecutions pairs the start and end records of path by invocation ID,
// sorted by start.
func readExecutions(t *testing.T, path string) []execution {
	t.Helper()
	file, err := os.Open(path)
	require.NoError(t, err)
	defer file.Close()
	byID := map[string]*execution{}
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		var r struct {
			What, ID, Pod string
			T             float64
		}
		require.NoError(t, json.Unmarshal(scanner.Bytes(), &r), "%s: %s", path, scanner.Text())
		e := byID[r.ID]
		if e == nil {
			e = &execution{id: r.ID, pod: r.Pod}
			byID[r.ID] = e
		}
		at := time.Unix(0, int64(r.T*float64(time.Second)))
		if r.What == "start" {
			e.start = at
		} else {
			e.end = at
		}
	}
	require.NoError(t, scanner.Err())
	out := make([]execution, 0, len(byID))
	for _, e := range byID {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	require.NotEmpty(t, out, "%s has executions", path)
	return out
}
