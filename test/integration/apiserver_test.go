package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	applyv1alpha1 "kruntimes.io/kruntimes/client/applyconfiguration/kruntimes/v1alpha1"
)

// TestRunLifecycleThroughTheAPI walks a task Run from create to delete and
// checks what the server owns: defaults, the initial status, status changes
// only through runs/status, microsecond timestamps.
func TestRunLifecycleThroughTheAPI(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *testServer) {
		ctx := context.Background()
		runs := s.client.KruntimesV1alpha1().Runs(namespace)

		sent := taskRun("lifecycle")
		sent.Status.Phase = lifecycle.Succeeded // ignored: status starts Pending
		created, err := runs.Create(ctx, sent, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Pending, created.Status.Phase)
		assert.Equal(t, int32(1), created.Status.Attempt)
		require.NotNil(t, created.Spec.RetryPolicy, "retryPolicy is defaulted")
		assert.Equal(t, int32(1), created.Spec.RetryPolicy.MaxAttempts)
		assert.Equal(t, int64(1), created.Generation)

		// A status sent to the main resource is ignored; metadata changes land.
		changed := created.DeepCopy()
		changed.Labels = map[string]string{"team": "a"}
		changed.Status.Phase = lifecycle.Running
		changed.Spec.TTLSecondsAfterFinished = ptr[int32](60)
		updated, err := runs.Update(ctx, changed, metav1.UpdateOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Pending, updated.Status.Phase)
		assert.Equal(t, "a", updated.Labels["team"])
		assert.Equal(t, int32(60), *updated.Spec.TTLSecondsAfterFinished)

		// A status update cannot change the spec.
		walk := updated
		for _, step := range steps(scheduled, running) {
			step(&walk.Status)
			walk.Spec.Runtime = "python"
			walk, err = runs.UpdateStatus(ctx, walk, metav1.UpdateOptions{})
			require.NoError(t, err)
			assert.Equal(t, "bash", walk.Spec.Runtime, "runs/status ignores spec changes")
		}
		walk.Status.Phase = lifecycle.Succeeded
		walk.Status.ExitCode = ptr[int32](0)
		walk.Status.Outputs = map[string]string{"answer": "42"}
		completion := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC))
		walk.Status.CompletionTime = &completion
		done, err := runs.UpdateStatus(ctx, walk, metav1.UpdateOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Succeeded, done.Status.Phase)
		assert.Equal(t, "42", done.Status.Outputs["answer"])
		assert.Equal(t, 123456000, done.Status.CompletionTime.Nanosecond(), "timestamps keep microseconds")

		// cancelRequested false → true is allowed.
		cancel := done.DeepCopy()
		cancel.Spec.CancelRequested = true
		_, err = runs.Update(ctx, cancel, metav1.UpdateOptions{})
		require.NoError(t, err)

		list, err := runs.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.Len(t, list.Items, 1)

		require.NoError(t, runs.Delete(ctx, "lifecycle", metav1.DeleteOptions{}))
		_, err = runs.Get(ctx, "lifecycle", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err))
	})
}

// TestFunctionRunBecomesReady covers the function path of the phase table and
// the endpoint fields.
func TestFunctionRunBecomesReady(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	runs := s.client.KruntimesV1alpha1().Runs(namespace)
	run, err := runs.Create(ctx, functionRun("fn"), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, step := range steps(scheduled, running, ready) {
		step(&run.Status)
		run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	run.Status.Endpoint = &v1alpha1.RunEndpoint{
		Protocol: v1alpha1.RunEndpointProtocolHTTPS,
		URL:      "https://kubernetes.default.svc/apis/kruntimes.io/v1alpha1/namespaces/default/runs/fn/invoke?uid=" + string(run.UID),
	}
	run.Status.Conditions = []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: lifecycle.ReasonFunctionRegistered, LastTransitionTime: metav1.Now()}}
	run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)

	// Recovery: Ready → Pending with attempt+1 and the assignment cleared.
	run.Status.Phase, run.Status.Attempt = lifecycle.Pending, 2
	run.Status.AssignedPod, run.Status.AssignedPodUID = "", ""
	run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(2), run.Status.Attempt)
}

// TestFieldSelectors: list and watch select Runs by spec.runtime,
// status.phase and status.assignedPod; a Run that moves into the selection
// arrives on the watch as ADDED.
func TestFieldSelectors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *testServer) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runs := s.client.KruntimesV1alpha1().Runs(namespace)

		bash, err := runs.Create(ctx, taskRun("bash-1"), metav1.CreateOptions{})
		require.NoError(t, err)
		py := taskRun("python-1")
		py.Spec.Runtime = "python"
		_, err = runs.Create(ctx, py, metav1.CreateOptions{})
		require.NoError(t, err)

		names := func(selector string) []string {
			list, err := runs.List(ctx, metav1.ListOptions{FieldSelector: selector})
			require.NoError(t, err, selector)
			var out []string
			for _, r := range list.Items {
				out = append(out, r.Name)
			}
			return out
		}
		assert.Equal(t, []string{"bash-1"}, names("spec.runtime=bash"))
		assert.ElementsMatch(t, []string{"bash-1", "python-1"}, names("status.phase=Pending"))
		assert.Empty(t, names("status.assignedPod=pod-a"))

		w, err := runs.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector(lifecycle.FieldStatusAssignedPod, "pod-a").String(),
			ResourceVersion: bash.ResourceVersion,
		})
		require.NoError(t, err)
		defer w.Stop()

		scheduled(&bash.Status)
		bash, err = runs.UpdateStatus(ctx, bash, metav1.UpdateOptions{})
		require.NoError(t, err)
		assert.Equal(t, []string{"bash-1"}, names("status.assignedPod=pod-a"))
		assert.Equal(t, []string{"bash-1"}, names("status.phase=Scheduled"))
		// runtimed's selection: its Pod's name and UID; a Pod re-created
		// under that name has another UID and selects nothing.
		assert.Equal(t, []string{"bash-1"}, names("status.assignedPod=pod-a,status.assignedPodUID=uid-a"))
		assert.Empty(t, names("status.assignedPod=pod-a,status.assignedPodUID=uid-a2"))

		select {
		case ev := <-w.ResultChan():
			require.Equal(t, watch.Added, ev.Type, "a Run moving into the selection is ADDED")
			assert.Equal(t, "bash-1", ev.Object.(*v1alpha1.Run).Name)
		case <-ctx.Done():
			t.Fatal("the watch saw no event")
		}

		_, err = runs.List(ctx, metav1.ListOptions{FieldSelector: "spec.handler=x"})
		assert.True(t, apierrors.IsBadRequest(err), "an unsupported field selector is a 400, got %v", err)
	})
}

// TestTableColumns: kubectl get asks for a Table and prints these columns.
func TestTableColumns(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	_, err := s.client.KruntimesV1alpha1().Runs(namespace).Create(ctx, taskRun("table"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = s.client.KruntimesV1alpha1().Runtimes(namespace).Create(ctx, bashRuntime("bash"), metav1.CreateOptions{})
	require.NoError(t, err)

	accept := http.Header{"Accept": {"application/json;as=Table;v=v1;g=meta.k8s.io"}}
	for _, tc := range []struct {
		path    string
		columns []string
		cells   []any
	}{
		{"/apis/kruntimes.io/v1alpha1/namespaces/default/runs", []string{"Name", "Runtime", "Mode", "Phase", "Pod", "Attempt", "Age"},
			[]any{"table", "bash", "Task", "Pending", "", float64(1)}},
		{"/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes", []string{"Name", "Replicas", "Ready", "Capacity", "Age"},
			[]any{"bash", float64(1), float64(0), float64(1)}},
	} {
		code, body := s.raw(t, http.MethodGet, tc.path, "", nil, accept)
		require.Equal(t, http.StatusOK, code, string(body))
		var table metav1.Table
		require.NoError(t, json.Unmarshal(body, &table))
		var columns []string
		for _, c := range table.ColumnDefinitions {
			columns = append(columns, c.Name)
		}
		assert.Equal(t, tc.columns, columns)
		require.Len(t, table.Rows, 1)
		assert.Equal(t, tc.cells, table.Rows[0].Cells[:len(tc.cells)])
	}
}

// TestOpenAPIIsPublished: kubectl explain reads OpenAPI v3 (v2 for older
// clients), server-side apply needs the models.
func TestOpenAPIIsPublished(t *testing.T) {
	s := startServer(t, "")
	code, body := s.raw(t, http.MethodGet, "/openapi/v3/apis/kruntimes.io/v1alpha1", "", nil, nil)
	require.Equal(t, http.StatusOK, code)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Description string                     `json:"description"`
				Properties  map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(body, &doc))
	fn, ok := doc.Components.Schemas["io.kruntimes.v1alpha1.FunctionMode"]
	require.True(t, ok, "FunctionMode model is published")
	assert.Contains(t, fn.Properties, "handler")
	assert.Contains(t, fn.Properties, "idleTimeoutSeconds")
	assert.NotEmpty(t, doc.Components.Schemas["io.kruntimes.v1alpha1.Run"].Description)

	code, body = s.raw(t, http.MethodGet, "/openapi/v2", "", nil, nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), "io.kruntimes.v1alpha1.RunSpec")
}

// TestServerSideApply: spec through the main resource, status through
// runs/status, each with its own field manager.
func TestServerSideApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *testServer) {
		ctx := context.Background()
		runs := s.client.KruntimesV1alpha1().Runs(namespace)
		apply := applyv1alpha1.Run("applied", namespace).
			WithLabels(map[string]string{"app": "demo"}).
			WithSpec(applyv1alpha1.RunSpec().
				WithRuntime("bash").
				WithSource(applyv1alpha1.RunSource().WithInline("echo hi")).
				WithMode(applyv1alpha1.RunMode().WithTask(applyv1alpha1.TaskMode().WithArgs("a", "b"))))
		run, err := runs.Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "user", Force: true})
		require.NoError(t, err)
		assert.Equal(t, []string{"a", "b"}, run.Spec.Mode.Task.Args)
		assert.Equal(t, lifecycle.Pending, run.Status.Phase)

		status := applyv1alpha1.Run("applied", namespace).WithStatus(applyv1alpha1.RunStatus().
			WithPhase(lifecycle.Scheduled).WithAttempt(1).WithAssignedPod("pod-a").WithAssignedPodUID("uid-a"))
		run, err = runs.ApplyStatus(ctx, status, metav1.ApplyOptions{FieldManager: "scheduler", Force: true})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Scheduled, run.Status.Phase)
		assert.Equal(t, "pod-a", run.Status.AssignedPod)

		// Re-applying the same spec is a no-op, not an immutability error.
		_, err = runs.Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "user", Force: true})
		require.NoError(t, err)
	})
}

// TestRuntimes: defaults, validation and status of Runtimes.
func TestRuntimes(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	runtimes := s.client.KruntimesV1alpha1().Runtimes(namespace)

	rt, err := runtimes.Create(ctx, bashRuntime("bash"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(1), *rt.Spec.Replicas)
	assert.Equal(t, int32(1), rt.Spec.Capacity.Runs)
	assert.Equal(t, v1alpha1.DefaultRuntimedImage, rt.Spec.RuntimedImage)

	noRuntime := bashRuntime("broken")
	noRuntime.Spec.Template.Spec.Containers[0].Name = "server"
	_, err = runtimes.Create(ctx, noRuntime, metav1.CreateOptions{})
	assertInvalidField(t, err, "spec.template.spec.containers")

	tooBig := bashRuntime("huge")
	tooBig.Spec.Capacity.Runs = 5000
	_, err = runtimes.Create(ctx, tooBig, metav1.CreateOptions{})
	assertInvalidField(t, err, "spec.capacity.runs")

	rt.Status.Replicas, rt.Status.ReadyReplicas = 1, 2
	_, err = runtimes.UpdateStatus(ctx, rt, metav1.UpdateOptions{})
	assertInvalidField(t, err, "status.readyReplicas")

	rt.Status.ReadyReplicas, rt.Status.ObservedGeneration = 1, rt.Generation
	rt, err = runtimes.UpdateStatus(ctx, rt, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(1), rt.Status.ReadyReplicas)

	rt.Spec.Replicas = ptr[int32](3)
	rt, err = runtimes.Update(ctx, rt, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), rt.Generation, "a spec change bumps the generation")
}

// TestRestartKeepsRuns: the embedded backend is durable across a restart on
// the same directory, resourceVersions included.
func TestRestartKeepsRuns(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir)
	ctx := context.Background()
	created, err := s.client.KruntimesV1alpha1().Runs(namespace).Create(ctx, taskRun("durable"), metav1.CreateOptions{})
	require.NoError(t, err)
	s.stop()

	s = startServer(t, dir)
	got, err := s.client.KruntimesV1alpha1().Runs(namespace).Get(ctx, "durable", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, created.ResourceVersion, got.ResourceVersion)
	assert.Equal(t, created.UID, got.UID)
}

func ptr[T any](v T) *T { return &v }
