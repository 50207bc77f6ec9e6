package functions

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/slots"
	"kruntimes.io/kruntimes/runtimed/workspace"
	"kruntimes.io/kruntimes/runtimes/bash"
	"kruntimes.io/kruntimes/runtimes/language"
	"kruntimes.io/kruntimes/runtimes/python"
	"kruntimes.io/kruntimes/runtimes/server"
)

const (
	testNamespace = "ns"
	testPodName   = "runtime-python-0"
	testPodUID    = types.UID("pod-uid")
)

// harness is a function controller against a real kruntimes-apiserver and
// a real Runtime Server (Python and bash) on a unix socket; the test stands
// in for the scheduler.
type harness struct {
	client    versioned.Interface
	functions runtimev1.FunctionRuntimeClient
	workspace workspace.Root
	capacity  int
	slots     *slots.Table
	clock     clock.WithTicker
	// socket is where the Runtime Server listens.
	socket string
	// stopRuntimeServer stops the Runtime Server.
	stopRuntimeServer func()
	// stop stops the controller (not the servers); stopped closes after.
	stop       context.CancelFunc
	stopped    chan struct{}
	controller *Controller
}

type harnessOptions struct {
	capacity int
	// clock is shared by the controller and the Runtime Server.
	clock interface {
		clock.WithTicker
		clock.WithDelayedExecution
	}
}

func start(t testing.TB, opts harnessOptions) *harness {
	t.Helper()
	if opts.capacity == 0 {
		opts.capacity = 4
	}
	if opts.clock == nil {
		opts.clock = clock.RealClock{}
	}
	h := &harness{workspace: workspace.Root(t.TempDir()), clock: opts.clock}
	h.socket = filepath.Join(t.TempDir(), "runtime.sock")
	h.stopRuntimeServer = h.startRuntimeServer(t, opts.clock)
	conn, err := grpc.NewClient("unix://"+h.socket,
		append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	h.functions = runtimev1.NewFunctionRuntimeClient(conn)
	// The server writes status.endpoint from its own options.
	h.client = testserver.Start(t, "", "--invoke-endpoint-base=https://kube.example").Client
	h.capacity = opts.capacity
	h.startController(t)
	return h
}

// startRuntimeServer serves Python (the default language) and bash
// functions: handlers named *.sh are bash scripts. The returned func stops
// it, as a crash would: every registration is gone.
func (h *harness) startRuntimeServer(t testing.TB, clk clock.WithDelayedExecution) func() {
	t.Helper()
	srv, err := server.New(server.Options{
		Language:  python.New(""),
		Functions: byHandler{python: python.New(""), bash: bash.New("", t.TempDir())},
		StateDir:  t.TempDir(),
		BaseEnv:   []string{"PATH=" + os.Getenv("PATH")},
		Clock:     clk,
	})
	require.NoError(t, err)
	lis, err := net.Listen("unix", h.socket)
	require.NoError(t, err)
	gs := grpc.NewServer(transport.ServerOptions()...)
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			gs.Stop()
			srv.Close(context.Background())
		})
	}
	t.Cleanup(stop)
	return stop
}

// byHandler loads *.sh handlers with bash and the rest with Python, so one
// Runtime Server serves both languages' fixtures.
type byHandler struct{ python, bash language.FunctionLoader }

func (l byHandler) LoadFunction(ctx context.Context, spec language.FunctionSpec) (language.Function, error) {
	if filepath.Ext(spec.Handler) == ".sh" {
		return l.bash.LoadFunction(ctx, spec)
	}
	return l.python.LoadFunction(ctx, spec)
}

// startController starts a new controller, with a new slot table (as a
// restarted runtimed would) on the same servers and workspace.
func (h *harness) startController(t testing.TB) {
	t.Helper()
	table, err := slots.New(h.capacity)
	require.NoError(t, err)
	h.slots = table
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	factory := externalversions.NewSharedInformerFactoryWithOptions(h.client, 0, externalversions.WithNamespace(testNamespace))
	c, err := New(Config{
		Runs:          h.client.KruntimesV1alpha1(),
		Informer:      factory.Kruntimes().V1alpha1().Runs(),
		RuntimeServer: h.functions,
		Workspace:     h.workspace,
		Pod:           runtimepod.Pod{Name: testPodName, Namespace: testNamespace, UID: testPodUID},
		Slots:         h.slots,
		WatchInterval: 100 * time.Millisecond,
		Clock:         h.clock,
	})
	require.NoError(t, err)
	factory.Start(ctx.Done())
	stopped := make(chan struct{})
	go func() { c.Run(ctx, 2); close(stopped) }()
	h.controller, h.stop, h.stopped = c, cancel, stopped
	t.Cleanup(h.stopController)
}

func (h *harness) stopController() {
	h.stop()
	<-h.stopped
}

// scheduled creates a function Run and binds it to the test Pod.
func (h *harness) scheduled(t testing.TB, name, source, handler string, mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
	t.Helper()
	path := "handler.py"
	if filepath.Ext(handler) == ".sh" {
		path = handler
	}
	run := &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: v1alpha1.RunSpec{
			Runtime: "python",
			Source:  v1alpha1.RunSource{Inline: source, InlinePath: path},
			Mode:    v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: handler}},
		},
	}
	for _, m := range mutate {
		m(run)
	}
	created, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Create(t.Context(), run, metav1.CreateOptions{})
	require.NoError(t, err)
	return h.bind(t, created)
}

// bind does what the scheduler does: Pending → Scheduled on the test Pod.
func (h *harness) bind(t testing.TB, run *v1alpha1.Run) *v1alpha1.Run {
	t.Helper()
	now := metav1.NowMicro()
	run = run.DeepCopy()
	run.Status.Phase = lifecycle.Scheduled
	run.Status.AssignedPod, run.Status.AssignedPodUID, run.Status.ScheduledTime = testPodName, testPodUID, &now
	bound, err := h.client.KruntimesV1alpha1().Runs(testNamespace).UpdateStatus(t.Context(), run, metav1.UpdateOptions{})
	require.NoError(t, err)
	return bound
}

func (h *harness) get(t *testing.T, name string) *v1alpha1.Run {
	t.Helper()
	run, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return run
}

// waitFor polls the Run until done holds and returns it; a failure shows
// the last copy seen.
func (h *harness) waitFor(t testing.TB, name, what string, done func(*v1alpha1.Run) bool) *v1alpha1.Run {
	t.Helper()
	var last *v1alpha1.Run
	var lastErr error
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		run, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = run
		return done(run), nil
	})
	if err != nil {
		require.NoError(t, err, "waiting for %s to be %s; last error %v; last copy: phase %s attempt %d message %q conditions %+v",
			name, what, lastErr, phaseOf(last), attemptOf(last), messageOf(last), conditionsOf(last))
	}
	return last
}

func (h *harness) waitGone(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "Run %s is deleted once its finalizer is gone", name)
}

func (h *harness) registrations(t *testing.T) map[types.UID]*runtimev1.RegistrationStatus {
	t.Helper()
	list, err := h.functions.ListFunctions(t.Context(), &runtimev1.ListFunctionsRequest{})
	require.NoError(t, err)
	out := map[types.UID]*runtimev1.RegistrationStatus{}
	for _, st := range list.GetRegistrations() {
		out[types.UID(st.GetRunUid())] = st
	}
	return out
}

func (h *harness) invoke(t *testing.T, run *v1alpha1.Run, input string) *runtimev1.InvokeFunctionResponse {
	t.Helper()
	id, err := h.controller.Admit(run.UID, run.Status.Attempt, testPodUID)
	require.NoError(t, err)
	resp, err := h.functions.InvokeFunction(t.Context(), &runtimev1.InvokeFunctionRequest{RunUid: string(run.UID), RegistrationId: id,
		InvocationId: "inv-" + string(run.UID), Input: []byte(input)})
	require.NoError(t, err)
	return resp
}

func phaseIs(p lifecycle.Phase) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool { return r.Status.Phase == p }
}

func readyAt(attempt int32) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool { return r.Status.Phase == lifecycle.Ready && r.Status.Attempt == attempt }
}

func phaseOf(r *v1alpha1.Run) lifecycle.Phase {
	if r == nil {
		return ""
	}
	return r.Status.Phase
}

func attemptOf(r *v1alpha1.Run) int32 {
	if r == nil {
		return 0
	}
	return r.Status.Attempt
}

func messageOf(r *v1alpha1.Run) string {
	if r == nil {
		return ""
	}
	return r.Status.Message
}

func conditionsOf(r *v1alpha1.Run) []metav1.Condition {
	if r == nil {
		return nil
	}
	return r.Status.Conditions
}

const echoPython = "def handle(event, context):\n    return {'echo': event}\n"

func TestPythonFunctionBecomesReady(t *testing.T) {
	h := start(t, harnessOptions{})
	created := h.scheduled(t, "echo", echoPython, "handler.handle")
	run := h.waitFor(t, "echo", "Ready", phaseIs(lifecycle.Ready))

	assert.Equal(t, int32(1), run.Status.Attempt)
	require.NotNil(t, run.Status.StartTime)
	require.NotNil(t, run.Status.ReadyTime)
	assert.False(t, run.Status.ReadyTime.Before(run.Status.StartTime), "ready after the claim")
	require.NotNil(t, run.Status.Endpoint)
	assert.Equal(t, v1alpha1.RunEndpointProtocolHTTPS, run.Status.Endpoint.Protocol)
	assert.Equal(t, "https://kube.example/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/echo/invoke?uid="+string(created.UID), run.Status.Endpoint.URL)
	assert.Empty(t, run.Status.Endpoint.CABundle)
	ready := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionTrue, ready.Status)
	assert.Equal(t, lifecycle.ReasonFunctionRegistered, ready.Reason)
	assert.Contains(t, run.Finalizers, lifecycle.FinalizerRegistrationCleanup)
	assert.Equal(t, 1, h.slots.Used(), "a Ready function holds its slot")

	resp := h.invoke(t, run, `{"a":1}`)
	assert.JSONEq(t, `{"echo":{"a":1}}`, string(resp.GetOutput()))
	_, err := h.controller.Admit(run.UID, 2, testPodUID)
	assert.ErrorIs(t, err, ErrNotAdmitted, "another attempt is fenced off")
	_, err = h.controller.Admit(run.UID, 1, "another-pod")
	assert.ErrorIs(t, err, ErrNotAdmitted, "another Pod is fenced off")
}

func TestBashFunctionBecomesReady(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "shell", "read -r input; printf '{\"got\":%s}' \"$input\"\n", "echo.sh")
	run := h.waitFor(t, "shell", "Ready", phaseIs(lifecycle.Ready))
	resp := h.invoke(t, run, `{"b":2}`)
	assert.JSONEq(t, `{"got":{"b":2}}`, string(resp.GetOutput()))
}

func TestSyntaxErrorIsRetriedThenFails(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "broken", "def handle(event, context)\n    return 1\n", "handler.handle", func(r *v1alpha1.Run) {
		r.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2, Backoff: &v1alpha1.RetryBackoff{Initial: &metav1.Duration{Duration: time.Millisecond}}}
	})
	pending := h.waitFor(t, "broken", "Pending for attempt 2", func(r *v1alpha1.Run) bool {
		return r.Status.Phase == lifecycle.Pending && r.Status.Attempt == 2
	})
	assert.Empty(t, pending.Status.AssignedPod, "the retry may go to any Pod")
	assert.NotContains(t, pending.Finalizers, lifecycle.FinalizerRegistrationCleanup, "nothing of it is left on the Pod")
	assert.Contains(t, pending.Status.Message, "SyntaxError")
	assert.Empty(t, h.registrations(t), "the failed registration is gone from the Runtime Server")

	h.bind(t, pending)
	failed := h.waitFor(t, "broken", "Failed without finalizer", func(r *v1alpha1.Run) bool {
		return r.Status.Phase == lifecycle.Failed && !slices.Contains(r.Finalizers, lifecycle.FinalizerRegistrationCleanup)
	})
	assert.Equal(t, int32(2), failed.Status.Attempt)
	assert.Contains(t, failed.Status.Message, "SyntaxError: ", "the traceback's last line says what is wrong")
	completed := meta.FindStatusCondition(failed.Status.Conditions, lifecycle.ConditionCompleted)
	require.NotNil(t, completed)
	assert.Equal(t, lifecycle.ReasonRegistrationFailed, completed.Reason)
	assert.Zero(t, h.slots.Used())
}

func TestCancelReleasesEverything(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "cancelled", echoPython, "handler.handle")
	run := h.waitFor(t, "cancelled", "Ready", phaseIs(lifecycle.Ready))
	require.DirExists(t, h.workspace.RunDir(run.UID))

	run.Spec.CancelRequested = true
	_, err := h.client.KruntimesV1alpha1().Runs(testNamespace).Update(t.Context(), run, metav1.UpdateOptions{})
	require.NoError(t, err)
	done := h.waitFor(t, "cancelled", "Cancelled without finalizer", func(r *v1alpha1.Run) bool {
		return r.Status.Phase == lifecycle.Cancelled && !slices.Contains(r.Finalizers, lifecycle.FinalizerRegistrationCleanup)
	})
	ready := meta.FindStatusCondition(done.Status.Conditions, lifecycle.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.NotContains(t, h.registrations(t), run.UID, "unregistered")
	assert.NoDirExists(t, h.workspace.RunDir(run.UID))
	assert.Zero(t, h.slots.Used(), "the slot is free")
	_, err = h.controller.Admit(run.UID, 1, testPodUID)
	assert.ErrorIs(t, err, ErrNotAdmitted)
}

func TestDeleteRunsTheFinalizerFlow(t *testing.T) {
	h := start(t, harnessOptions{capacity: 1})
	h.scheduled(t, "deleted", echoPython, "handler.handle")
	run := h.waitFor(t, "deleted", "Ready", phaseIs(lifecycle.Ready))
	// A second function waits for the one slot.
	h.scheduled(t, "waiting", echoPython, "handler.handle")

	require.NoError(t, h.client.KruntimesV1alpha1().Runs(testNamespace).Delete(t.Context(), "deleted", metav1.DeleteOptions{}))
	h.waitGone(t, "deleted")
	assert.NotContains(t, h.registrations(t), run.UID)
	assert.NoDirExists(t, h.workspace.RunDir(run.UID))
	h.waitFor(t, "waiting", "Ready once the slot is free", phaseIs(lifecycle.Ready))
}

func TestLifetimeTimeout(t *testing.T) {
	h := start(t, harnessOptions{})
	h.scheduled(t, "short", echoPython, "handler.handle", func(r *v1alpha1.Run) {
		r.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Second}
	})
	run := h.waitFor(t, "short", "Timeout", phaseIs(lifecycle.Timeout))
	completed := meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionCompleted)
	require.NotNil(t, completed)
	assert.Equal(t, lifecycle.ReasonLifetimeExceeded, completed.Reason)
	assert.False(t, run.Status.CompletionTime.Time.Before(run.Status.StartTime.Add(2*time.Second)), "not before the lifetime")
	assert.NotContains(t, h.registrations(t), run.UID)
	h.waitFor(t, "short", "finalizer removed", func(r *v1alpha1.Run) bool {
		return !slices.Contains(r.Finalizers, lifecycle.FinalizerRegistrationCleanup)
	})
}
