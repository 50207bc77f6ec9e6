package ha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster"
)

// leaseDuration is the replicas' --leader-elect-lease-duration: short, so
// that the survivor takes over the controllers within seconds.
const leaseDuration = 4 * time.Second

func TestMain(m *testing.M) {
	os.Exit(framework.MainWith(m, func(c *localcluster.Config) {
		// Two replicas share etcd3 storage behind the local Service front,
		// as the chart's Deployment does with replicas: 2.
		c.KruntimesStorage = "etcd3"
		c.KruntimesReplicas = 2
		// A Pod IP block apart from the shared suite's (127.101–200), which
		// may run at the same time.
		c.PodIPBase = net.IPv4(127, byte(201+os.Getpid()%50), 0, 0)
		c.KruntimesArgs = append(c.KruntimesArgs,
			"--leader-elect-lease-duration="+leaseDuration.String(),
			"--leader-elect-renew-deadline=3s",
			"--leader-elect-retry-period=500ms",
			// The chart's shutdownDelay, shorter: long enough for the front
			// (probing /readyz every 250 ms) to stop choosing the replica.
			"--shutdown-delay-duration=2s",
		)
	}))
}

// TestRollingRestartLosesNoInvocation restarts both replicas one after the
// other, as a rolling update of the chart's Deployment does, while a client
// invokes a function through kube-apiserver, sending each invocation again
// with its ID when the answer allows: every invocation is answered, its
// handler ran once, and kruntimes-apiserver itself answered nothing but
// 200 and 429 + Retry-After.
func TestRollingRestartLosesNoInvocation(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ctx := framework.Context(t, 5*time.Minute)
	runs, fn := readyFunction(ctx, t, f, "rolling")

	load := startLoad(ctx, t, runs, fn)
	load.markDisruption()
	for i := range f.Cluster.KruntimesReplicaPIDs() {
		started := time.Now()
		require.NoError(t, f.Cluster.RestartKruntimesReplica(ctx, i), "restarting replica %d", i)
		t.Logf("replica %d restarted and ready in %s", i, time.Since(started).Round(time.Millisecond))
		// Traffic flows again before the next replica goes.
		require.NoError(t, framework.Poll(ctx, 50*time.Millisecond, time.Minute, func(context.Context, *framework.Observed) (bool, error) {
			return load.streakSinceDisruption() >= 10, nil
		}), "invocations answer after replica %d restarted: %s", i, load)
	}
	t.Logf("during the rolling restart: %s", load)
	load.mu.Lock()
	defer load.mu.Unlock()
	assert.Positive(t, load.ok)
	assert.Empty(t, load.lost, "every invocation is answered, at most after being sent again with its ID")
	assert.Empty(t, load.wrong, "every answer is its own invocation's")
	// kruntimes-apiserver itself answers nothing but 200 and 429 while it
	// restarts gracefully. The one other answer is kube-apiserver's proxy's
	// plain 503 when it sent the invocation on its HTTP/2 connection at the
	// moment the replica's GOAWAY closed it (the proxy cannot resend a body
	// it already streamed; docs/deploy.md): the outcome is unknown, and the
	// invocation's ID makes sending it again safe.
	for _, err := range load.notFromProxy {
		t.Errorf("an unknown outcome that was not kube-apiserver's proxy's 503: %s", describe(err))
	}
	for _, err := range load.unknown {
		t.Logf("an attempt ended with its outcome unknown and was sent again with its ID: %s", describe(err))
	}
	assertRanOnce(t, load)
}

// assertRanOnce checks that the handler ran exactly once for every
// invocation answered, however often it was sent.
func assertRanOnce(t *testing.T, load *invokeLoad) {
	t.Helper()
	data, err := os.ReadFile(load.executions)
	require.NoError(t, err)
	ran := map[string]int{}
	for _, id := range strings.Fields(string(data)) {
		ran[id]++
	}
	for id, attempts := range load.answered {
		assert.Equal(t, 1, ran[id], "invocation %s (sent %d times) ran once", id, attempts)
	}
	for id, n := range ran {
		assert.LessOrEqual(t, n, 1, "invocation %s ran %d times", id, n)
	}
}

// TestTwoReplicasSurviveLosingOne kills the kruntimes-apiserver replica
// that leads the controllers while a client invokes a function through
// kube-apiserver: invocations answer again, the other replica takes the
// controllers' Lease, and a task created after the loss runs to the end.
func TestTwoReplicasSurviveLosingOne(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ctx := framework.Context(t, 5*time.Minute)
	runs, fn := readyFunction(ctx, t, f, "ha")

	leader, holder := leadingReplica(ctx, t, f)
	t.Logf("replica %d leads the controllers (%s); killing it", leader, holder)

	// Invoke one at a time, as a client would, before and after the kill.
	load := startLoad(ctx, t, runs, fn)
	pid := f.Cluster.KruntimesReplicaPIDs()[leader]
	require.NotZero(t, pid)
	killedAt := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	load.markDisruption()
	t.Cleanup(func() {
		// Whole again for the tests after this one.
		require.NoError(t, f.Cluster.RestartKruntimesReplica(context.Background(), leader))
	})

	require.NoError(t, framework.Poll(ctx, 100*time.Millisecond, 2*time.Minute, func(context.Context, *framework.Observed) (bool, error) {
		return load.streakSinceDisruption() >= 20, nil
	}), "20 invocations in a row answer 200 after the kill: %s", load)
	t.Logf("after the kill: %s; 20 in a row answered %s after it", load, time.Since(killedAt).Round(time.Millisecond))

	require.NoError(t, framework.Poll(ctx, 100*time.Millisecond, 2*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases(manager.DefaultLeaseNamespace).Get(ctx, manager.DefaultLeaseName, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		now := ptr.Deref(l.Spec.HolderIdentity, "")
		seen.State("Lease held by %q", now)
		return now != "" && now != holder, nil
	}), "the surviving replica takes the controllers' Lease")
	t.Logf("the survivor holds the Lease %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	// Placing a new Run needs the scheduler, which now runs in the survivor.
	_, err := runs.Create(ctx, &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "after-the-loss"},
		Spec: v1alpha1.RunSpec{
			Runtime: "python",
			Source:  v1alpha1.RunSource{Inline: "print('still here')\n", InlinePath: "main.py"},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{Entrypoint: "main.py"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	task := waitForPhase(ctx, t, runs, "after-the-loss", lifecycle.Succeeded)
	assert.Equal(t, int32(0), ptr.Deref(task.Status.ExitCode, -1))

	// What was stored before the loss is all there.
	got, err := runs.Get(ctx, fn.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, fn.UID, got.UID)
	assert.Equal(t, lifecycle.Ready, got.Status.Phase, "the function stays Ready: its Pod was not lost")
}

// readyFunction creates a namespace with a Python Runtime and a Ready
// function Run that records each execution and returns its input's n.
func readyFunction(ctx context.Context, t *testing.T, f *framework.Framework, prefix string) (typedv1alpha1.RunInterface, *v1alpha1.Run) {
	t.Helper()
	client, err := versioned.NewForConfig(f.AdminConfig)
	require.NoError(t, err)
	ns := f.CreateNamespace(t, prefix)
	runs := client.KruntimesV1alpha1().Runs(ns)
	_, err = client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, pythonRuntime("python"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = runs.Create(ctx, &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: v1alpha1.RunSpec{
			Runtime: "python",
			// Each execution appends its invocation ID to the file the
			// input names, so a test can count how often each ran.
			Source: v1alpha1.RunSource{InlinePath: "main.py", Inline: "def handle(event, context):\n" +
				"    with open(event['file'], 'a') as f:\n" +
				"        f.write(context.invocation_id + '\\n')\n" +
				"    return event['n']\n"},
			Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "main.handle"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return runs, waitForPhase(ctx, t, runs, "echo", lifecycle.Ready)
}

// startLoad invokes fn until the test ends and returns once ten
// invocations in a row answered.
func startLoad(ctx context.Context, t *testing.T, runs typedv1alpha1.RunInterface, fn *v1alpha1.Run) *invokeLoad {
	t.Helper()
	load := &invokeLoad{runs: runs, name: fn.Name, uid: fn.UID,
		executions: filepath.Join(t.TempDir(), "executions"), answered: map[string]int{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); load.run(loadCtx) }()
	t.Cleanup(func() { stopLoad(); wg.Wait() })
	require.NoError(t, framework.Poll(ctx, 50*time.Millisecond, time.Minute, func(context.Context, *framework.Observed) (bool, error) {
		return load.streak() >= 10, nil
	}), "invocations answer: %s", load)
	return load
}

func pythonRuntime(name string) *v1alpha1.Runtime {
	return &v1alpha1.Runtime{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RuntimeSpec{
			Replicas:      ptr.To[int32](1),
			Capacity:      v1alpha1.RuntimeCapacity{Runs: 4},
			RuntimedImage: "kruntimes.io/runtimed:dev",
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](5),
				Containers: []corev1.Container{{
					Name:  runtimepod.ContainerRuntime,
					Image: "kruntimes.io/kruntimes-runtime:dev",
					Args:  []string{"--language=python", "--listen=" + runtimepod.RuntimeSocket},
				}},
			}},
		},
	}
}

func waitForPhase(ctx context.Context, t *testing.T, runs typedv1alpha1.RunInterface, name string, phase lifecycle.Phase) *v1alpha1.Run {
	t.Helper()
	var run *v1alpha1.Run
	require.NoError(t, framework.Poll(ctx, 100*time.Millisecond, 2*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		got, err := runs.Get(ctx, name, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		seen.State("phase %s: %s", got.Status.Phase, got.Status.Message)
		if lifecycle.IsTerminal(got.Status.Phase) && got.Status.Phase != phase {
			return false, fmt.Errorf("Run %s ended %s: %s", name, got.Status.Phase, got.Status.Message)
		}
		run = got
		return got.Status.Phase == phase, nil
	}), "Run %s reaches %s", name, phase)
	return run
}

// campaigning is the line a replica logs with its leader-election identity.
var campaigning = regexp.MustCompile(`Campaigning for the controllers' Lease.*identity="([^"]+)"`)

// leadingReplica returns the index of the replica that holds the
// controllers' Lease, matched by the identity each logs, and the identity.
func leadingReplica(ctx context.Context, t *testing.T, f *framework.Framework) (int, string) {
	t.Helper()
	var holder string
	require.NoError(t, framework.Poll(ctx, 100*time.Millisecond, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases(manager.DefaultLeaseNamespace).Get(ctx, manager.DefaultLeaseName, metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		return holder != "", nil
	}), "a replica holds the controllers' Lease")
	for i, path := range f.Cluster.KruntimesReplicaLogs() {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		// A restarted replica appends to its log: its last identity counts.
		if all := campaigning.FindAllSubmatch(data, -1); len(all) > 0 && string(all[len(all)-1][1]) == holder {
			return i, holder
		}
	}
	t.Fatalf("no replica's log names the Lease holder %q", holder)
	return 0, ""
}

// invokeLoad invokes one function over and over, one invocation at a
// time, as a careful client does: each invocation carries an ID of its own
// and is sent again with that ID when its answer promises that it did not
// run, or leaves the outcome unknown (runtimed deduplicates by caller and
// ID, so the handler still runs once). It counts how the calls end once a
// disruption began.
type invokeLoad struct {
	runs typedv1alpha1.RunInterface
	name string
	uid  types.UID
	// executions is the file the handler appends each invocation's ID to.
	executions string

	mu        sync.Mutex
	disrupted bool
	inARow    int // consecutive 200s
	afterRun  int // consecutive 200s since the disruption began
	ok        int
	failed    map[string]int // since the disruption began, by outcome
	lastErr   error
	// unknown are the unknown outcomes since the disruption began, and
	// notFromProxy those that were not kube-apiserver's proxy's plain 503.
	unknown, notFromProxy []error
	// lost are the invocations that no attempt completed.
	lost []string
	// answered are the IDs answered 200, with their attempts.
	answered map[string]int
	// wrong are answers whose output is not their own input.
	wrong []string
}

func (l *invokeLoad) markDisruption() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.disrupted, l.afterRun, l.ok, l.failed = true, 0, 0, map[string]int{}
	l.unknown, l.notFromProxy, l.lost = nil, nil, nil
}

func (l *invokeLoad) streak() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inARow
}

func (l *invokeLoad) streakSinceDisruption() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.afterRun
}

func (l *invokeLoad) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	resent := 0
	for _, attempts := range l.answered {
		resent += attempts - 1
	}
	return fmt.Sprintf("%d answered 200 (%d attempts sent again), failed attempts by outcome %v, %d invocations lost (last error: %v)",
		l.ok, resent, l.failed, len(l.lost), describe(l.lastErr))
}

// maxAttempts bounds how often one invocation is sent.
const maxAttempts = 10

func (l *invokeLoad) run(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		id := fmt.Sprintf("call-%d", n)
		input := fmt.Sprintf(`{"n":%d,"file":%q}`, n, l.executions)
		for attempt := 1; ; attempt++ {
			callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := l.runs.Invoke(callCtx, l.name, []byte(input), typedv1alpha1.InvokeOptions{UID: l.uid, InvocationID: id})
			cancel()
			if ctx.Err() != nil {
				return
			}
			if l.record(id, attempt, n, res, err) {
				break
			}
			// A failed call comes back at once; pace the attempts.
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// record counts one attempt of invocation id and says whether the
// invocation is over: answered, or lost.
func (l *invokeLoad) record(id string, attempt, n int, res *v1alpha1.InvokeResult, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.inARow++
		l.afterRun++
		l.ok++
		l.answered[id] = attempt
		if got := strings.TrimSpace(string(res.Output.Raw)); res.Error != nil || got != fmt.Sprint(n) {
			l.wrong = append(l.wrong, fmt.Sprintf("%s answered %s (error %v)", id, res.Output.Raw, res.Error))
		}
		return true
	}
	l.inARow, l.afterRun, l.lastErr = 0, 0, err
	outcome := typedv1alpha1.ClassifyInvokeError(err)
	if l.disrupted {
		l.failed[outcome.String()]++
		if outcome == typedv1alpha1.InvokeOutcomeUnknown {
			l.unknown = append(l.unknown, err)
			if !fromAggregatorProxy(err) {
				l.notFromProxy = append(l.notFromProxy, err)
			}
		}
	}
	resend := outcome == typedv1alpha1.InvokeNotRun || outcome == typedv1alpha1.InvokeOutcomeUnknown
	if resend && attempt < maxAttempts {
		return false
	}
	if l.disrupted {
		l.lost = append(l.lost, fmt.Sprintf("%s after %d attempts: %s", id, attempt, describe(err)))
	}
	return true
}

// fromAggregatorProxy says whether err is the plain-text 503 that
// kube-apiserver's aggregation proxy writes when its request to
// kruntimes-apiserver failed, rather than an answer of kruntimes-apiserver.
func fromAggregatorProxy(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusServiceUnavailable {
		return false
	}
	return proxyBody(status.Status()) != ""
}

// proxyBody is the text of a response that was no Status, as client-go
// keeps it.
func proxyBody(st metav1.Status) string {
	if st.Details == nil {
		return ""
	}
	for _, c := range st.Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return c.Message
		}
	}
	return ""
}

// describe is err with the body of a response that was no Status, which
// says what kube-apiserver's proxy ran into.
func describe(err error) string {
	if err == nil {
		return "<nil>"
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if body := proxyBody(status.Status()); body != "" {
			return fmt.Sprintf("%v: %s", err, strings.TrimSpace(body))
		}
	}
	return err.Error()
}
