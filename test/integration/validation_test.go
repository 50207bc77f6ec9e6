package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// Status steps that walk a Run through its lifecycle before a test changes it.
var (
	scheduled = func(s *v1alpha1.RunStatus) {
		s.Phase, s.AssignedPod, s.AssignedPodUID = lifecycle.Scheduled, "pod-a", "uid-a"
		now := metav1.NowMicro()
		s.ScheduledTime = &now
	}
	running = func(s *v1alpha1.RunStatus) {
		s.Phase = lifecycle.Running
		now := metav1.NowMicro()
		s.StartTime = &now
	}
	ready       = func(s *v1alpha1.RunStatus) { s.Phase = lifecycle.Ready }
	withOutputs = func(s *v1alpha1.RunStatus) { s.Outputs = map[string]string{"RESULT": "42"} }
	succeeded   = func(s *v1alpha1.RunStatus) {
		s.Phase, s.ExitCode = lifecycle.Succeeded, new(int32)
		now := metav1.NowMicro()
		s.CompletionTime = &now
	}
)

type invalidRunCase struct {
	name string
	// run is created first (or, for op "create", is the invalid object).
	run func(name string) *v1alpha1.Run
	// steps are status updates applied before the rejected change.
	steps []func(*v1alpha1.RunStatus)
	// op is create, update or status.
	op     string
	change func(*v1alpha1.Run)
	// field is the path the 422 must name.
	field string
}

func invalidRunCases() []invalidRunCase {
	withFunction := func(r *v1alpha1.Run) { r.Spec.Mode.Function = &v1alpha1.FunctionMode{Handler: "h.main"} }
	return []invalidRunCase{
		{name: "300 KiB inline source", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Source.Inline = strings.Repeat("x", 300<<10) }, field: "spec.source.inline"},
		{name: "both task and function", run: taskRun, op: "create", change: withFunction, field: "spec.mode"},
		{name: "neither task nor function", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Mode.Task = nil }, field: "spec.mode"},
		{name: "function with inline source and no inlinePath", run: functionRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Source.InlinePath = "" }, field: "spec.source.inlinePath"},
		{name: "inlinePath ../x escapes the workspace", run: functionRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Source.InlinePath = "../x" }, field: "spec.source.inlinePath"},
		{name: "absolute inlinePath", run: functionRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Source.InlinePath = "/etc/passwd" }, field: "spec.source.inlinePath"},
		{name: "unclean inlinePath", run: functionRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Source.InlinePath = "a//b.py" }, field: "spec.source.inlinePath"},
		{name: "missing runtime", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Runtime = "" }, field: "spec.runtime"},
		{name: "runtime is not a DNS label", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Runtime = "Bash_1" }, field: "spec.runtime"},
		{name: "maxAttempts above 100", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 101} }, field: "spec.retryPolicy.maxAttempts"},
		{name: "negative maxAttempts", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: -1} }, field: "spec.retryPolicy.maxAttempts"},
		{name: "257 env vars", run: taskRun, op: "create", change: func(r *v1alpha1.Run) {
			r.Spec.Env = nil
			for i := 0; i < 257; i++ {
				r.Spec.Env = append(r.Spec.Env, v1alpha1.EnvVar{Name: fmt.Sprintf("V%d", i)})
			}
		}, field: "spec.env"},
		{name: "env name is not an identifier", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Env = []v1alpha1.EnvVar{{Name: "1=BAD"}} }, field: "spec.env[0].name"},
		{name: "function without handler", run: functionRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Mode.Function.Handler = "" }, field: "spec.mode.function.handler"},
		{name: "negative timeout", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Timeout = &metav1.Duration{Duration: -time.Second} }, field: "spec.timeout"},
		{name: "name is not a DNS label", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Name = "my.run" }, field: "metadata.name"},
		{name: "zero idleTimeoutSeconds", run: functionRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Mode.Function.IdleTimeoutSeconds = new(int32) }, field: "spec.mode.function.idleTimeoutSeconds"},
		{name: "task with nothing to run", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { r.Spec.Source.Inline = "" }, field: "spec.mode.task.entrypoint"},
		{name: "negative ttlSecondsAfterFinished", run: taskRun, op: "create",
			change: func(r *v1alpha1.Run) { ttl := int32(-1); r.Spec.TTLSecondsAfterFinished = &ttl }, field: "spec.ttlSecondsAfterFinished"},

		{name: "spec.mode changed after create", run: taskRun, op: "update", change: func(r *v1alpha1.Run) {
			r.Spec.Mode = v1alpha1.RunMode{Task: &v1alpha1.TaskMode{Entrypoint: "/bin/true"}}
		}, field: "spec.mode"},
		{name: "spec.runtime changed after create", run: taskRun, op: "update",
			change: func(r *v1alpha1.Run) { r.Spec.Runtime = "python" }, field: "spec.runtime"},
		{name: "spec.env changed after create", run: taskRun, op: "update",
			change: func(r *v1alpha1.Run) { r.Spec.Env[0].Value = "changed" }, field: "spec.env"},
		{name: "spec.source changed after create", run: taskRun, op: "update",
			change: func(r *v1alpha1.Run) { r.Spec.Source.Inline = "echo other" }, field: "spec.source"},
		{name: "spec.retryPolicy changed after create", run: taskRun, op: "update",
			change: func(r *v1alpha1.Run) { r.Spec.RetryPolicy.MaxAttempts = 5 }, field: "spec.retryPolicy"},
		{name: "cancelRequested true → false", run: func(string) *v1alpha1.Run {
			r := taskRun("")
			r.Spec.CancelRequested = true
			return r
		}, op: "update", change: func(r *v1alpha1.Run) { r.Spec.CancelRequested = false }, field: "spec.cancelRequested"},

		{name: "a task Run moved to Ready", run: taskRun, steps: steps(scheduled, running), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Ready }, field: "status.phase"},
		{name: "Succeeded → Running", run: taskRun, steps: steps(scheduled, running, succeeded), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.Phase = lifecycle.Running }, field: "status.phase"},
		{name: "Pending → Running skips scheduling", run: taskRun, op: "status", change: func(r *v1alpha1.Run) {
			scheduled(&r.Status)
			r.Status.Phase = lifecycle.Running
		}, field: "status.phase"},
		{name: "Ready → Pending without attempt+1", run: functionRun, steps: steps(scheduled, running, ready), op: "status",
			change: func(r *v1alpha1.Run) {
				r.Status.Phase, r.Status.AssignedPod, r.Status.AssignedPodUID = lifecycle.Pending, "", ""
			}, field: "status.attempt"},
		{name: "attempt decreasing", run: taskRun, steps: steps(scheduled), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.Attempt = 0 }, field: "status.attempt"},
		{name: "assignedPod without assignedPodUID", run: taskRun, op: "status", change: func(r *v1alpha1.Run) {
			r.Status.Phase, r.Status.AssignedPod = lifecycle.Scheduled, "pod-a"
		}, field: "status.assignedPodUID"},
		{name: "an active Run moved to another Pod", run: taskRun, steps: steps(scheduled, running), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.AssignedPod, r.Status.AssignedPodUID = "pod-b", "uid-b" }, field: "status.assignedPod"},
		// No case for status.endpoint: the server writes its own over
		// whatever a writer sends (TestDirectEndpointInStatus).
		{name: "outputs with 65 keys", run: taskRun, steps: steps(scheduled, running), op: "status", change: func(r *v1alpha1.Run) {
			r.Status.Outputs = map[string]string{}
			for i := 0; i < 65; i++ {
				r.Status.Outputs[fmt.Sprintf("k%d", i)] = "v"
			}
		}, field: "status.outputs"},
		{name: "a 9 KiB output value", run: taskRun, steps: steps(scheduled, running), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.Outputs = map[string]string{"big": strings.Repeat("v", 9<<10)} }, field: "status.outputs[big]"},
		{name: "message over 4 KiB", run: taskRun, op: "status",
			change: func(r *v1alpha1.Run) { r.Status.Message = strings.Repeat("m", 4<<10+1) }, field: "status.message"},
		{name: "17 conditions", run: taskRun, op: "status", change: func(r *v1alpha1.Run) {
			for i := 0; i < 17; i++ {
				r.Status.Conditions = append(r.Status.Conditions, metav1.Condition{
					Type: fmt.Sprintf("C%d", i), Status: metav1.ConditionTrue, Reason: "R", LastTransitionTime: metav1.Now()})
			}
		}, field: "status.conditions"},
		{name: "exit code on a function Run", run: functionRun, steps: steps(scheduled, running), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.ExitCode = new(int32) }, field: "status.exitCode"},
		{name: "a Succeeded Run's outputs rewritten", run: taskRun, steps: steps(scheduled, running, withOutputs, succeeded), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.Outputs = map[string]string{"RESULT": "forged"} }, field: "status.outputs"},
		{name: "a Succeeded Run's exit code changed", run: taskRun, steps: steps(scheduled, running, succeeded), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.ExitCode = ptr(int32(7)) }, field: "status.exitCode"},
		{name: "a Succeeded Run's message changed", run: taskRun, steps: steps(scheduled, running, succeeded), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.Message = "rewritten" }, field: "status.message"},
		{name: "a Succeeded Run's completionTime moved", run: taskRun, steps: steps(scheduled, running, succeeded), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.CompletionTime = ptr(metav1.NewMicroTime(time.Now().Add(time.Hour))) }, field: "status.completionTime"},
		{name: "a Succeeded Run's assignment cleared", run: taskRun, steps: steps(scheduled, running, succeeded), op: "status",
			change: func(r *v1alpha1.Run) { r.Status.AssignedPod, r.Status.AssignedPodUID = "", "" }, field: "status.assignedPod"},
		{name: "a Succeeded Run's conditions rewritten", run: taskRun, steps: steps(scheduled, running, succeeded), op: "status",
			change: func(r *v1alpha1.Run) {
				r.Status.Conditions = []metav1.Condition{{Type: "Completed", Status: metav1.ConditionFalse, Reason: "Forged", LastTransitionTime: metav1.Now()}}
			}, field: "status.conditions"},
	}
}

func steps(s ...func(*v1alpha1.RunStatus)) []func(*v1alpha1.RunStatus) { return s }

// TestInvalidRunsAreRejected: every invalid create, update and status update
// gets a 422 naming the field, and the stored Run stays exactly as it was.
func TestInvalidRunsAreRejected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *testServer) {
		ctx := context.Background()
		runs := s.client.KruntimesV1alpha1().Runs(namespace)
		cases := invalidRunCases()
		require.GreaterOrEqual(t, len(cases), 25)
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				run := tc.run("")
				run.Name = fmt.Sprintf("invalid-%d", i)
				if tc.op == "create" {
					tc.change(run)
					_, err := runs.Create(ctx, run, metav1.CreateOptions{})
					assertInvalidField(t, err, tc.field)
					_, err = runs.Get(ctx, run.Name, metav1.GetOptions{})
					assert.True(t, apierrors.IsNotFound(err), "a rejected create must store nothing, got %v", err)
					return
				}
				stored, err := runs.Create(ctx, run, metav1.CreateOptions{})
				require.NoError(t, err)
				for _, step := range tc.steps {
					step(&stored.Status)
					stored, err = runs.UpdateStatus(ctx, stored, metav1.UpdateOptions{})
					require.NoError(t, err)
				}
				changed := stored.DeepCopy()
				tc.change(changed)
				if tc.op == "update" {
					_, err = runs.Update(ctx, changed, metav1.UpdateOptions{})
				} else {
					_, err = runs.UpdateStatus(ctx, changed, metav1.UpdateOptions{})
				}
				assertInvalidField(t, err, tc.field)
				after, err := runs.Get(ctx, run.Name, metav1.GetOptions{})
				require.NoError(t, err)
				assert.Equal(t, stored, after, "a rejected change must leave the Run untouched")
			})
		}
	})
}

func assertInvalidField(t *testing.T, err error, field string) {
	t.Helper()
	require.Error(t, err)
	require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
	status, ok := err.(apierrors.APIStatus)
	require.True(t, ok)
	require.NotNil(t, status.Status().Details)
	var fields []string
	for _, c := range status.Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	assert.Contains(t, fields, field, "error: %v", err)
}

// TestStaleResourceVersionConflicts: an update from a stale copy is a 409 and
// the newer write survives.
func TestStaleResourceVersionConflicts(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	runs := s.client.KruntimesV1alpha1().Runs(namespace)
	created, err := runs.Create(ctx, taskRun("stale"), metav1.CreateOptions{})
	require.NoError(t, err)

	fresh := created.DeepCopy()
	fresh.Labels = map[string]string{"who": "first"}
	_, err = runs.Update(ctx, fresh, metav1.UpdateOptions{})
	require.NoError(t, err)

	stale := created.DeepCopy()
	stale.Labels = map[string]string{"who": "second"}
	_, err = runs.Update(ctx, stale, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "want 409, got %v", err)

	scheduledCopy := created.DeepCopy()
	scheduled(&scheduledCopy.Status)
	_, err = runs.UpdateStatus(ctx, scheduledCopy, metav1.UpdateOptions{})
	assert.True(t, apierrors.IsConflict(err), "a stale status update is a 409 too, got %v", err)

	got, err := runs.Get(ctx, "stale", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "first", got.Labels["who"])
	assert.Equal(t, lifecycle.Pending, got.Status.Phase)
}
