package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/proto/pki"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// functionTimeout bounds a function Run from create to Ready (or to the end
// a test expects), through the hosted scheduler, runtimed and a Python import.
const functionTimeout = 60 * time.Second

// functionRuntime is a Runtime of the built-in Runtime Server for language.
func functionRuntime(name, language string, capacity int32) *v1alpha1.Runtime {
	rt := newTestRuntime(name, 1, capacity)
	rt.Spec.Template.Spec.Containers[0].Args = []string{"--language=" + language, "--listen=" + runtimepod.RuntimeSocket}
	return rt
}

// functionRun is a function Run of runtime whose inline source is written
// to inlinePath.
func functionRun(name, runtime, inlinePath, source, handler string) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RunSpec{
			Runtime: runtime,
			Source:  v1alpha1.RunSource{Inline: source, InlinePath: inlinePath},
			Mode:    v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: handler}},
		},
	}
}

// runtimeHost is what the test reaches of one Runtime Pod on the local
// node: its runtimed process, and the Runtime Server's socket and workspace
// as host paths.
type runtimeHost struct {
	pod         *corev1.Pod
	runtimedPID int
	socket      string
	workspace   string
	functions   runtimev1.FunctionRuntimeClient
}

// hostOf waits for the single Ready Pod of runtime and finds its runtimed,
// whose flags name the host paths the node agent translated.
func hostOf(ctx context.Context, t *testing.T, f *framework.Framework, ns, runtime string) *runtimeHost {
	t.Helper()
	return hostFor(t, waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"="+runtime, ""))
}

// hostFor finds the runtimed of pod, Ready on the local node.
func hostFor(t *testing.T, pod *corev1.Pod) *runtimeHost {
	t.Helper()
	pid := runtimedPID(t, string(pod.UID))
	require.NotZero(t, pid, "runtimed of Pod %s runs on this machine", pod.Name)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(t, err)
	h := &runtimeHost{pod: pod, runtimedPID: pid}
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--runtime-socket=unix://"); ok {
			h.socket = v
		}
		if v, ok := strings.CutPrefix(arg, "--workspace-dir="); ok {
			h.workspace = v
		}
	}
	require.NotEmpty(t, h.socket, "runtimed's --runtime-socket: %q", cmdline)
	require.NotEmpty(t, h.workspace, "runtimed's --workspace-dir: %q", cmdline)
	conn, err := grpc.NewClient("unix://"+h.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	h.functions = runtimev1.NewFunctionRuntimeClient(conn)
	return h
}

// registration asks the Runtime Server over its socket for the Run's
// registration; nil when it has none.
func (h *runtimeHost) registration(ctx context.Context, t *testing.T, uid types.UID) *runtimev1.RegistrationStatus {
	t.Helper()
	list, err := h.functions.ListFunctions(ctx, &runtimev1.ListFunctionsRequest{})
	require.NoError(t, err)
	for _, st := range list.GetRegistrations() {
		if st.GetRunUid() == string(uid) {
			return st
		}
	}
	return nil
}

// invoke calls the function straight on the Runtime Server.
func (h *runtimeHost) invoke(ctx context.Context, t *testing.T, uid types.UID, input string) (*runtimev1.InvokeFunctionResponse, error) {
	t.Helper()
	st := h.registration(ctx, t, uid)
	require.NotNil(t, st, "Run %s is registered", uid)
	return h.functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: string(uid), RegistrationId: st.GetRegistrationId(),
		InvocationId: "inv-" + string(uid), Input: []byte(input)})
}

// processWithArg finds a process of this machine one of whose arguments is
// arg, or 0.
func processWithArg(t *testing.T, exeSuffix, arg string) int {
	t.Helper()
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, e := range entries {
		cmdline, err := os.ReadFile(e)
		if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), arg) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && strings.Contains(filepath.Base(exe), exeSuffix) {
			return pid
		}
	}
	return 0
}

// processInDir finds a process of this machine working in dir, or 0: a
// Python worker works in its function's workspace.
func processInDir(dir string) int {
	entries, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, e := range entries {
		if cwd, err := os.Readlink(e); err == nil && cwd == dir {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
			return pid
		}
	}
	return 0
}

func runReady(run *v1alpha1.Run) *metav1.Condition {
	return meta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionReady)
}

func withoutFinalizer(phase lifecycle.Phase) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool {
		return r.Status.Phase == phase && !slices.Contains(r.Finalizers, lifecycle.FinalizerRegistrationCleanup)
	}
}

func readyAtAttempt(attempt int32) func(*v1alpha1.Run) bool {
	return func(r *v1alpha1.Run) bool { return r.Status.Phase == lifecycle.Ready && r.Status.Attempt == attempt }
}

func createRun(ctx context.Context, t *testing.T, runs versioned.Interface, ns string, run *v1alpha1.Run) *v1alpha1.Run {
	t.Helper()
	created, err := runs.KruntimesV1alpha1().Runs(ns).Create(ctx, run, metav1.CreateOptions{})
	require.NoError(t, err)
	return created
}

// TestFunctionRuns walks function Runs through their lifecycle on real
// Runtime Pods: the hosted scheduler places them, runtimed registers them
// on the built-in Runtime Servers, and the test asks those over their
// sockets what they hold.
func TestFunctionRuns(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "functions")
	ctx := framework.Context(t, 10*time.Minute)
	examples := filepath.Join(f.RepoRoot, "artifacts", "examples")

	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 8), metav1.CreateOptions{})
	require.NoError(t, err)
	python := hostOf(ctx, t, f, ns, "python")
	t.Cleanup(func() {
		if t.Failed() {
			out, err := f.Kubectl(context.Background(), "logs", "-n", ns, python.pod.Name, "-c", runtimepod.ContainerRuntimed, "--tail=100")
			t.Logf("runtimed logs (err %v):\n%s", err, out)
		}
	})

	t.Run("a Python function becomes Ready and kubectl wait sees it", func(t *testing.T) {
		out, err := f.Kubectl(ctx, "-n", ns, "create", "-f", filepath.Join(examples, "run-function.yaml"))
		require.NoError(t, err, out)
		out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "run/echo", "--timeout=60s")
		require.NoError(t, err, "kubectl wait --for=condition=Ready: %s", out)

		run, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Ready, run.Status.Phase)
		cond := runReady(run)
		require.NotNil(t, cond)
		assert.Equal(t, lifecycle.ReasonFunctionRegistered, cond.Reason)
		require.NotNil(t, run.Status.ReadyTime)
		require.NotNil(t, run.Status.Endpoint)
		assert.Equal(t, f.Cluster.APIServerURL+"/apis/kruntimes.io/v1alpha1/namespaces/"+ns+"/runs/echo/invoke?uid="+string(run.UID), run.Status.Endpoint.URL,
			"the local cluster advertises kube-apiserver as it is reached from this machine")
		assert.Contains(t, run.Finalizers, lifecycle.FinalizerRegistrationCleanup)
		assert.Equal(t, python.pod.Name, run.Status.AssignedPod)

		st := python.registration(ctx, t, run.UID)
		require.NotNil(t, st, "the Runtime Server holds the registration")
		assert.Equal(t, int64(1), st.GetRegistrationAttempt())
		resp, err := python.invoke(ctx, t, run.UID, `{"x":1}`)
		require.NoError(t, err)
		assert.Contains(t, string(resp.GetOutput()), `"echo":{"x":1}`)
	})

	t.Run("a syntax error is retried, then Failed with the traceback's last line", func(t *testing.T) {
		run := functionRun("broken", "python", "handler.py", "def handle(event, context)\n    return 1\n", "handler.handle")
		run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2, Backoff: &v1alpha1.RetryBackoff{Initial: &metav1.Duration{Duration: 100 * time.Millisecond}}}
		createRun(ctx, t, runs, ns, run)
		failed := waitForRun(ctx, t, runs, ns, "broken", functionTimeout, "Failed", withoutFinalizer(lifecycle.Failed))
		assert.Equal(t, int32(2), failed.Status.Attempt, "retried once")
		assert.Contains(t, failed.Status.Message, "SyntaxError: ")
		completed := meta.FindStatusCondition(failed.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonRegistrationFailed, completed.Reason)
		assert.Nil(t, python.registration(ctx, t, failed.UID))
	})

	t.Run("cancel unregisters, removes the workspace and the finalizer, frees the slot", func(t *testing.T) {
		created := createRun(ctx, t, runs, ns, functionRun("cancelled", "python", "handler.py", "def handle(event, context):\n    return 1\n", "handler.handle"))
		waitForRun(ctx, t, runs, ns, "cancelled", functionTimeout, "Ready", inPhase(lifecycle.Ready))
		workspace := filepath.Join(python.workspace, string(created.UID))
		require.DirExists(t, workspace)
		usedBefore := slotsUsed(ctx, t, python.pod)

		out, err := f.Kubectl(ctx, "-n", ns, "patch", "run", "cancelled", "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		require.NoError(t, err, out)
		done := waitForRun(ctx, t, runs, ns, "cancelled", functionTimeout, "Cancelled", withoutFinalizer(lifecycle.Cancelled))
		assert.Equal(t, metav1.ConditionFalse, runReady(done).Status)
		assert.Nil(t, python.registration(ctx, t, created.UID), "unregistered on the Runtime Server")
		assert.NoDirExists(t, workspace)
		assert.Equal(t, usedBefore-1, slotsUsed(ctx, t, python.pod), "its slot is free")
	})

	t.Run("lifetime timeout ends the function as Timeout/LifetimeExceeded", func(t *testing.T) {
		run := functionRun("short", "python", "handler.py", "def handle(event, context):\n    return 1\n", "handler.handle")
		run.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Second}
		createRun(ctx, t, runs, ns, run)
		done := waitForRun(ctx, t, runs, ns, "short", functionTimeout, "Timeout", withoutFinalizer(lifecycle.Timeout))
		completed := meta.FindStatusCondition(done.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonLifetimeExceeded, completed.Reason)
		assert.False(t, done.Status.CompletionTime.Time.Before(done.Status.StartTime.Add(3*time.Second)))
	})

	t.Run("idle timeout waits for the invocation in flight and counts from its end", func(t *testing.T) {
		run := functionRun("idle", "python", "handler.py", "import time\ndef handle(event, context):\n    time.sleep(event['sleep'])\n    return 'done'\n", "handler.handle")
		run.Spec.Mode.Function.IdleTimeoutSeconds = ptr.To[int32](2)
		created := createRun(ctx, t, runs, ns, run)
		waitForRun(ctx, t, runs, ns, "idle", functionTimeout, "Ready", inPhase(lifecycle.Ready))
		// An invocation three times as long as the idle timeout, sent
		// straight to the Runtime Server.
		resp, err := python.invoke(ctx, t, created.UID, `{"sleep": 6}`)
		require.NoError(t, err)
		ended := time.Now()
		assert.Equal(t, `"done"`, string(resp.GetOutput()))
		assert.Nil(t, resp.GetError())
		still, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "idle", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Ready, still.Status.Phase, "never idle while an invocation is in flight")

		done := waitForRun(ctx, t, runs, ns, "idle", functionTimeout, "Timeout", withoutFinalizer(lifecycle.Timeout))
		completed := meta.FindStatusCondition(done.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonIdleTimeout, completed.Reason)
		assert.False(t, done.Status.CompletionTime.Time.Before(ended.Add(2*time.Second-100*time.Millisecond)),
			"idle counts from the end of the last invocation (%s), not from registration: completed %s", ended, done.Status.CompletionTime)
	})

	t.Run("a killed Python worker makes the Run not Ready, then Ready at attempt 2", func(t *testing.T) {
		run := functionRun("fragile", "python", "handler.py", "def handle(event, context):\n    return 'ok'\n", "handler.handle")
		run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2}
		created := createRun(ctx, t, runs, ns, run)
		ready := waitForRun(ctx, t, runs, ns, "fragile", functionTimeout, "Ready", inPhase(lifecycle.Ready))
		worker := processInDir(filepath.Join(python.workspace, string(created.UID)))
		require.NotZero(t, worker, "the warm worker of the registration runs here")
		require.NoError(t, syscall.Kill(worker, syscall.SIGKILL))

		notReady := watchForRun(ctx, t, runs, ns, "fragile", ready.ResourceVersion, functionTimeout, "not Ready at attempt 2", func(r *v1alpha1.Run) bool {
			return r.Status.Attempt == 2
		})
		assert.Equal(t, lifecycle.Running, notReady.Status.Phase, "registering again on the same Pod")
		assert.Equal(t, metav1.ConditionFalse, runReady(notReady).Status)
		assert.Equal(t, ready.Status.AssignedPodUID, notReady.Status.AssignedPodUID)
		waitForRun(ctx, t, runs, ns, "fragile", functionTimeout, "Ready at attempt 2", readyAtAttempt(2))
		st := python.registration(ctx, t, created.UID)
		require.NotNil(t, st)
		assert.Equal(t, int64(2), st.GetRegistrationAttempt())
	})

	t.Run("a SIGKILLed runtimed re-adopts its registrations without writing", func(t *testing.T) {
		before, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, lifecycle.Ready, before.Status.Phase)
		reg := python.registration(ctx, t, before.UID)
		require.NotNil(t, reg)

		require.NoError(t, syscall.Kill(python.runtimedPID, syscall.SIGKILL))
		restarted := waitForNewRuntimed(ctx, t, f, ns, python)
		err = framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			m, err := runtimedMetrics(ctx, f, python.pod)
			if seen.Err(err) {
				return false, nil
			}
			return m[`kruntimes_runtimed_registrations`] != "" && m[`kruntimes_runtimed_registrations`] != "0", nil
		})
		require.NoError(t, err, "the restarted runtimed (pid %d) holds the registrations again", restarted)
		after, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "no status write when nothing changed")
		assert.Equal(t, int32(1), after.Status.Attempt)
		again := python.registration(ctx, t, before.UID)
		require.NotNil(t, again)
		assert.Equal(t, reg.GetRegistrationId(), again.GetRegistrationId(), "the same registration, adopted")
		python.runtimedPID = restarted
	})

	t.Run("a restarted Runtime Server gets its functions registered again at the next attempt", func(t *testing.T) {
		before, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err)
		server := processWithArg(t, "kruntimes-runtime", "--listen=unix://"+python.socket)
		require.NotZero(t, server, "the Runtime Server listening on %s runs here", python.socket)
		require.NoError(t, syscall.Kill(server, syscall.SIGKILL))
		// run-function.yaml allows 3 attempts.
		again := waitForRun(ctx, t, runs, ns, "echo", functionTimeout, "Ready at attempt 2", readyAtAttempt(before.Status.Attempt+1))
		assert.Equal(t, before.Status.AssignedPodUID, again.Status.AssignedPodUID)
		st := python.registration(ctx, t, again.UID)
		require.NotNil(t, st)
		assert.Equal(t, int64(again.Status.Attempt), st.GetRegistrationAttempt())
	})
}

// TestBashFunctionRun registers a bash handler script.
func TestBashFunctionRun(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "bash-function")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("bash", "bash", 2), metav1.CreateOptions{})
	require.NoError(t, err)
	bash := hostOf(ctx, t, f, ns, "bash")

	created := createRun(ctx, t, runs, ns, functionRun("shell", "bash", "handler.sh", "read -r input\nprintf '{\"got\":%s}' \"$input\"\n", "handler.sh"))
	out, err := f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "run/shell", "--timeout=60s")
	require.NoError(t, err, out)
	resp, err := bash.invoke(ctx, t, created.UID, `{"b":2}`)
	require.NoError(t, err)
	assert.JSONEq(t, `{"got":{"b":2}}`, string(resp.GetOutput()))
}

// TestReadyFunctionHoldsItsSlot: on a Runtime of one Pod with one slot, a
// second function waits Pending (NoCapacity) while the first is Ready, and
// is placed as soon as deleting the first completed its finalizer flow.
func TestReadyFunctionHoldsItsSlot(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "function-slot")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("single", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	single := hostOf(ctx, t, f, ns, "single")
	source := "def handle(event, context):\n    return 1\n"

	first := createRun(ctx, t, runs, ns, functionRun("first", "single", "handler.py", source, "handler.handle"))
	waitForRun(ctx, t, runs, ns, "first", functionTimeout, "Ready", inPhase(lifecycle.Ready))
	createRun(ctx, t, runs, ns, functionRun("second", "single", "handler.py", source, "handler.handle"))
	waiting := waitForRun(ctx, t, runs, ns, "second", functionTimeout, "Pending for lack of capacity", func(r *v1alpha1.Run) bool {
		c := meta.FindStatusCondition(r.Status.Conditions, lifecycle.ConditionScheduled)
		return r.Status.Phase == lifecycle.Pending && c != nil && c.Reason == lifecycle.ReasonNoCapacity
	})
	assert.Empty(t, waiting.Status.AssignedPod)

	require.NoError(t, runs.KruntimesV1alpha1().Runs(ns).Delete(ctx, "first", metav1.DeleteOptions{}))
	err = framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		_, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "first", metav1.GetOptions{})
		return seen.Deleted(err), nil
	})
	require.NoError(t, err, "the deleted Run goes once runtimed removed its finalizer")
	assert.Nil(t, single.registration(ctx, t, first.UID), "unregistered")
	assert.NoDirExists(t, filepath.Join(single.workspace, string(first.UID)))
	waitForRun(ctx, t, runs, ns, "second", functionTimeout, "Ready in the freed slot", inPhase(lifecycle.Ready))
}

// waitForNewRuntimed waits until the node agent restarted the runtimed of
// h's Pod and returns its new PID.
func waitForNewRuntimed(ctx context.Context, t *testing.T, f *framework.Framework, ns string, h *runtimeHost) int {
	t.Helper()
	var pid int
	err := framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		pid = runtimedPID(t, string(h.pod.UID))
		return pid != 0 && pid != h.runtimedPID, nil
	})
	require.NoError(t, err, "runtimed of Pod %s is restarted", h.pod.Name)
	return pid
}

// runtimedMetrics reads the kruntimes_runtimed_* metrics of pod, a Runtime
// Pod the runtime controller made: over HTTPS on its metrics port, with a
// scraper's client certificate of the invoke hop's CA, as Prometheus would.
func runtimedMetrics(ctx context.Context, f *framework.Framework, pod *corev1.Pod) (map[string]string, error) {
	client, err := runtimedMetricsClient(f)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(runtimepod.RuntimedMetricsPort))+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	metrics := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if name, value, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "kruntimes_runtimed_") {
			metrics[name] = value
		}
	}
	return metrics, nil
}

// runtimedMetricsClient is a scraper of runtimed's /metrics: a client
// certificate of CommonName kruntimes-metrics issued by the local cluster's
// invoke CA, verifying runtimed under invocation.MetricsServerName.
func runtimedMetricsClient(f *framework.Framework) (*http.Client, error) {
	caCertFile, caKeyFile, _, _ := f.Cluster.InvokePKIFiles()
	caCert, err := os.ReadFile(caCertFile)
	if err != nil {
		return nil, err
	}
	caKey, err := os.ReadFile(caKeyFile)
	if err != nil {
		return nil, err
	}
	ca, err := pki.LoadCA(caCert, caKey)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.IssueMetricsClient(time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caCert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: invocation.MetricsServerName, Certificates: []tls.Certificate{pair},
	}}}, nil
}

// slotsUsed is the number of pod's slots its runtimed says function Runs hold.
func slotsUsed(ctx context.Context, t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	metrics, err := runtimedMetrics(ctx, framework.Get(t), pod)
	require.NoError(t, err)
	n, err := strconv.Atoi(metrics[`kruntimes_runtimed_slots_used{mode="Function"}`])
	require.NoError(t, err, "metrics: %v", metrics)
	return n
}
