package tasks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	kruntimesclient "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/heartbeat"
	"kruntimes.io/kruntimes/runtimed/slots"
	"kruntimes.io/kruntimes/runtimed/workspace"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/server"
)

const (
	testNamespace = "ns"
	testPodName   = "runtime-bash-0"
	testPodUID    = types.UID("pod-uid")
)

// countingRuntime counts Execute calls on the way to the real Runtime Server.
type countingRuntime struct {
	runtimev1.RuntimeClient
	executes atomic.Int32
}

func (c *countingRuntime) Execute(ctx context.Context, in *runtimev1.ExecuteRequest, opts ...grpc.CallOption) (*runtimev1.TaskStatus, error) {
	c.executes.Add(1)
	return c.RuntimeClient.Execute(ctx, in, opts...)
}

type harness struct {
	client        versioned.Interface
	runtimeServer *countingRuntime
	workspace     workspace.Root
}

// start runs a Controller of capacity against a real kruntimes-apiserver
// holding runs and the real bash Runtime Server on a unix socket.
func start(t testing.TB, capacity int, runs ...*v1alpha1.Run) *harness {
	t.Helper()
	return startWith(t, capacity, harnessOptions{}, runs...)
}

// harnessOptions change what startWith starts.
type harnessOptions struct {
	// wrap, when set, is applied to the Runs client the controller writes
	// through.
	wrap func(kruntimesclient.RunsGetter) kruntimesclient.RunsGetter
	// heartbeat, when set, fences the controller.
	heartbeat Heartbeat
}

// startWith is start with opts.
func startWith(t testing.TB, capacity int, opts harnessOptions, runs ...*v1alpha1.Run) *harness {
	t.Helper()
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("bash is required to run tasks")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)

	srv, err := server.New(server.Options{Language: bash.New("", t.TempDir()), StateDir: t.TempDir(), BaseEnv: os.Environ()})
	require.NoError(t, err)
	socket := filepath.Join(t.TempDir(), "runtime.sock")
	lis, err := net.Listen("unix", socket)
	require.NoError(t, err)
	gs := grpc.NewServer()
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)

	api := testserver.Start(t, "")
	client := api.Client
	for _, r := range runs {
		createAt(t, client, r)
	}
	var writer kruntimesclient.RunsGetter = client.KruntimesV1alpha1()
	if opts.wrap != nil {
		writer = opts.wrap(writer)
	}
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithNamespace(testNamespace))
	h := &harness{client: client, runtimeServer: &countingRuntime{RuntimeClient: runtimev1.NewRuntimeClient(conn)}, workspace: workspace.Root(t.TempDir())}
	c, err := New(Config{
		Runs:          writer,
		Informer:      factory.Kruntimes().V1alpha1().Runs(),
		RuntimeServer: h.runtimeServer,
		Workspace:     h.workspace,
		Pod:           runtimepod.Pod{Name: testPodName, Namespace: testNamespace, UID: testPodUID},
		Slots:         mustSlots(t, capacity),
		Heartbeat:     opts.heartbeat,
	})
	require.NoError(t, err)
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { c.Run(ctx, 2); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		factory.Shutdown()
		conn.Close()
		srv.Close(context.Background())
		gs.Stop()
	})
	return h
}

// createAt creates run and walks its status, through runs/status as the
// scheduler and runtimed would, to the phase it carries.
func createAt(t testing.TB, client versioned.Interface, run *v1alpha1.Run) {
	t.Helper()
	runs := client.KruntimesV1alpha1().Runs(run.Namespace)
	want := run.Status
	created, err := runs.Create(t.Context(), run, metav1.CreateOptions{})
	require.NoError(t, err)
	steps := []lifecycle.Phase{lifecycle.Scheduled}
	if want.Phase == lifecycle.Running {
		steps = append(steps, lifecycle.Running)
	}
	for _, phase := range steps {
		status := want
		status.Phase = phase
		if phase == lifecycle.Scheduled {
			status.StartTime = nil
		}
		created.Status = status
		created, err = runs.UpdateStatus(t.Context(), created, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
}

func scheduledRun(name, script string) *v1alpha1.Run {
	now := metav1.NowMicro()
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: v1alpha1.RunSpec{
			Runtime: "bash",
			Source:  v1alpha1.RunSource{Inline: script},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}},
		},
		Status: v1alpha1.RunStatus{
			Phase: lifecycle.Scheduled, Attempt: 1,
			AssignedPod: testPodName, AssignedPodUID: testPodUID, ScheduledTime: &now,
		},
	}
}

func (h *harness) waitFor(t *testing.T, name string, what string, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	t.Helper()
	var last *v1alpha1.Run
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		run, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = run
		return done(run), nil
	})
	require.NoError(t, err, "waiting for %s: %s; last status %+v", name, what, last)
	return last
}

func terminal(r *v1alpha1.Run) bool { return lifecycle.IsTerminal(r.Status.Phase) }

func TestScheduledTaskRunsToItsOutcome(t *testing.T) {
	cases := []struct {
		name       string
		script     string
		wantPhase  lifecycle.Phase
		wantExit   int32
		wantOutput map[string]string
	}{
		{name: "exit 0 with outputs → Succeeded", script: "echo ok=yes >> $KRUNTIMES_OUTPUTS", wantPhase: lifecycle.Succeeded, wantOutput: map[string]string{"ok": "yes"}},
		{name: "exit 4 → Failed with the exit code", script: "exit 4", wantPhase: lifecycle.Failed, wantExit: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, 1, scheduledRun("r", tc.script))
			run := h.waitFor(t, "r", "terminal", terminal)
			assert.Equal(t, tc.wantPhase, run.Status.Phase, run.Status.Message)
			require.NotNil(t, run.Status.ExitCode)
			assert.Equal(t, tc.wantExit, *run.Status.ExitCode)
			assert.Equal(t, tc.wantOutput, run.Status.Outputs)
			assert.NotNil(t, run.Status.StartTime)
			assert.NotNil(t, run.Status.CompletionTime)
			assert.Equal(t, int32(1), h.runtimeServer.executes.Load(), "executed once")
			assertReleased(t, h, run.UID)
		})
	}
}

// assertReleased checks that the Runtime Server forgot every execution and
// the Run's workspace is gone.
func assertReleased(t *testing.T, h *harness, uid types.UID) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := h.runtimeServer.List(ctx, &runtimev1.ListRequest{})
		if err != nil || len(list.GetTasks()) > 0 {
			return false, nil
		}
		_, err = os.Stat(h.workspace.RunDir(uid))
		return os.IsNotExist(err), nil
	})
	require.NoError(t, err, "execution forgotten and workspace removed")
}

// TestCapacityIsNeverExceeded runs two Runs on one slot: each execution
// lies between its Run's startTime (the claim) and completionTime (written
// before the slot is released), so with capacity 1 those intervals must not
// overlap.
func TestCapacityIsNeverExceeded(t *testing.T) {
	h := start(t, 1, scheduledRun("first", "sleep 0.2"), scheduledRun("second", "sleep 0.2"))
	first := h.waitFor(t, "first", "terminal", terminal)
	second := h.waitFor(t, "second", "terminal", terminal)
	for _, run := range []*v1alpha1.Run{first, second} {
		require.Equal(t, lifecycle.Succeeded, run.Status.Phase, "%s: %s", run.Name, run.Status.Message)
		require.NotNil(t, run.Status.StartTime, run.Name)
		require.NotNil(t, run.Status.CompletionTime, run.Name)
	}
	if second.Status.StartTime.Before(first.Status.StartTime) {
		first, second = second, first
	}
	assert.False(t, second.Status.StartTime.Before(first.Status.CompletionTime),
		"with capacity 1, %s was claimed at %s, before %s completed at %s", second.Name,
		second.Status.StartTime.Format(time.StampMicro), first.Name, first.Status.CompletionTime.Format(time.StampMicro))
}

func TestConflictingStatusWriteIsRedone(t *testing.T) {
	var racer *racingRuns
	h := startWith(t, 1, harnessOptions{wrap: func(runs kruntimesclient.RunsGetter) kruntimesclient.RunsGetter {
		racer = &racingRuns{RunsGetter: runs}
		return racer
	}}, scheduledRun("r", "true"))
	run := h.waitFor(t, "r", "terminal", terminal)
	assert.Equal(t, lifecycle.Succeeded, run.Status.Phase)
	assert.Equal(t, int32(1), h.runtimeServer.executes.Load(), "a redone claim never executes twice")
	assert.GreaterOrEqual(t, racer.conflicts.Load(), int32(2), "both the claim and the outcome lost a race first")
}

// racingRuns makes the controller lose a real race on its first two status
// writes: another writer changes the Run just before, so the server answers
// 409 Conflict.
type racingRuns struct {
	kruntimesclient.RunsGetter
	writes, conflicts atomic.Int32
}

func (r *racingRuns) Runs(namespace string) kruntimesclient.RunInterface {
	return &racingRunInterface{RunInterface: r.RunsGetter.Runs(namespace), racer: r}
}

type racingRunInterface struct {
	kruntimesclient.RunInterface
	racer *racingRuns
}

func (r *racingRunInterface) UpdateStatus(ctx context.Context, run *v1alpha1.Run, opts metav1.UpdateOptions) (*v1alpha1.Run, error) {
	if n := r.racer.writes.Add(1); n <= 3 && n%2 == 1 {
		current, err := r.RunInterface.Get(ctx, run.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		current.Labels = map[string]string{"raced": fmt.Sprint(n)}
		if _, err := r.RunInterface.Update(ctx, current, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
	}
	updated, err := r.RunInterface.UpdateStatus(ctx, run, opts)
	if apierrors.IsConflict(err) {
		r.racer.conflicts.Add(1)
	}
	return updated, err
}

func TestDeletedRunningRunIsCancelledAndCleanedUp(t *testing.T) {
	h := start(t, 1, scheduledRun("r", "sleep 3600"))
	run := h.waitFor(t, "r", "Running", func(r *v1alpha1.Run) bool { return r.Status.Phase == lifecycle.Running })
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := h.runtimeServer.List(ctx, &runtimev1.ListRequest{})
		return err == nil && len(list.GetTasks()) == 1, nil
	})
	require.NoError(t, err, "the task runs")
	require.NoError(t, h.client.KruntimesV1alpha1().Runs(testNamespace).Delete(t.Context(), "r", metav1.DeleteOptions{}))
	assertReleased(t, h, run.UID)
}

func TestRunningRunWithoutExecutionIsLost(t *testing.T) {
	run := scheduledRun("r", "true")
	run.Status.Phase = lifecycle.Running
	now := metav1.NowMicro()
	run.Status.StartTime = &now
	h := startHarness(t, run)
	got := h.waitFor(t, "r", "terminal", terminal)
	assert.Equal(t, lifecycle.Failed, got.Status.Phase)
	assert.Contains(t, got.Status.Message, "lost")
	assert.Zero(t, h.runtimeServer.executes.Load(), "a lost attempt is never re-executed in place")
}

func TestRunOfAnotherPodIsLeftAlone(t *testing.T) {
	other := scheduledRun("other", "true")
	other.Status.AssignedPodUID = "an-older-pod-with-the-same-name"
	h := startHarness(t, other, scheduledRun("mine", "true"))
	h.waitFor(t, "mine", "terminal", terminal)
	got, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Get(t.Context(), "other", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, lifecycle.Scheduled, got.Status.Phase)
}

func TestCancelRequestedBeforeClaimIsCancelledWithoutExecuting(t *testing.T) {
	run := scheduledRun("r", "sleep 3600")
	run.Spec.CancelRequested = true
	h := startHarness(t, run)
	got := h.waitFor(t, "r", "terminal", terminal)
	assert.Equal(t, lifecycle.Cancelled, got.Status.Phase)
	assert.Zero(t, h.runtimeServer.executes.Load())
}

func startHarness(t *testing.T, runs ...*v1alpha1.Run) *harness { return start(t, 1, runs...) }

func TestEntrypointRunsTheInlineSourceWithArgsAndEnv(t *testing.T) {
	run := scheduledRun("r", `echo "got=$1-$GREETING" >> $KRUNTIMES_OUTPUTS`)
	run.Spec.Mode.Task = &v1alpha1.TaskMode{Entrypoint: "bin/main.sh", Args: []string{"one"}}
	run.Spec.Env = []v1alpha1.EnvVar{{Name: "GREETING", Value: "hi"}}
	h := start(t, 1, run)
	got := h.waitFor(t, "r", "terminal", terminal)
	require.Equal(t, lifecycle.Succeeded, got.Status.Phase, got.Status.Message)
	assert.Equal(t, map[string]string{"got": "one-hi"}, got.Status.Outputs)
}

func TestTimeoutStopsTheTaskAndIsNotRetried(t *testing.T) {
	run := scheduledRun("r", "sleep 3600")
	run.Spec.Timeout = &metav1.Duration{Duration: 300 * time.Millisecond}
	run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 3}
	h := start(t, 1, run)
	got := h.waitFor(t, "r", "terminal", terminal)
	assert.Equal(t, lifecycle.Timeout, got.Status.Phase, got.Status.Message)
	assert.Equal(t, int32(1), got.Status.Attempt)
	assertReleased(t, h, got.UID)
}

func mustSlots(t testing.TB, capacity int) *slots.Table {
	t.Helper()
	table, err := slots.New(capacity)
	require.NoError(t, err)
	return table
}

// lease is a heartbeat Lease the test lapses and renews.
type lease struct {
	mu     sync.Mutex
	lapsed bool
	// ended is closed by lapse; renew makes a new one.
	ended chan struct{}
}

func freshLease() *lease { return &lease{ended: make(chan struct{})} }

func (l *lease) lapse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lapsed {
		l.lapsed = true
		close(l.ended)
	}
}

func (l *lease) renew() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lapsed {
		l.lapsed, l.ended = false, make(chan struct{})
	}
}

func (l *lease) Fresh() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lapsed {
		return errors.New("the heartbeat Lease lapsed")
	}
	return nil
}

func (l *lease) Bound(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	go func() {
		select {
		case <-ended:
			cancel(heartbeat.ErrLapsed)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

func TestTaskIsKilledWhenTheHeartbeatLapses(t *testing.T) {
	beat := freshLease()
	run := scheduledRun("r", "echo started; sleep 3600")
	run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2}
	h := startWith(t, 1, harnessOptions{heartbeat: beat}, run)
	h.waitFor(t, "r", "Running", func(r *v1alpha1.Run) bool { return r.Status.Phase == lifecycle.Running })
	require.Eventually(t, func() bool { return h.runtimeServer.executes.Load() == 1 }, 20*time.Second, 10*time.Millisecond, "the task starts")

	beat.lapse()
	got := h.waitFor(t, "r", "attempt 1 given up as lost with its owner", func(r *v1alpha1.Run) bool { return r.Status.Attempt == 2 })
	assert.Equal(t, lifecycle.Pending, got.Status.Phase, "attempt 2 waits for placement: %s", got.Status.Message)
	assert.Equal(t, lifecycle.ReasonOwnerLost, scheduledReason(got), "placed again at once, as after recovery")
	assert.Contains(t, got.Status.Message, "heartbeat Lease lapsed")
	assertReleased(t, h, got.UID)
}

func TestNoTaskStartsWhileTheHeartbeatIsLapsed(t *testing.T) {
	beat := freshLease()
	beat.lapse()
	h := startWith(t, 1, harnessOptions{heartbeat: beat}, scheduledRun("r", "echo ran"))
	// The claim is a write the API still takes: it only says the Run is
	// here. Executing is what the fence holds back.
	h.waitFor(t, "r", "claimed", func(r *v1alpha1.Run) bool { return r.Status.Phase == lifecycle.Running })
	assert.Never(t, func() bool { return h.runtimeServer.executes.Load() > 0 }, time.Second, 10*time.Millisecond,
		"nothing executes past the Lease")

	beat.renew()
	got := h.waitFor(t, "r", "terminal once the Lease renewed", terminal)
	assert.Equal(t, lifecycle.Succeeded, got.Status.Phase, got.Status.Message)
}

func scheduledReason(r *v1alpha1.Run) string {
	if c := apimeta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionScheduled); c != nil {
		return c.Reason
	}
	return ""
}
