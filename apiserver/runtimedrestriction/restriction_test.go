package runtimedrestriction

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// runtimed of Pod "bash-1" (UID uid-1) of Runtime "bash" in namespace "ns".
var runtimedUser = &user.DefaultInfo{
	Name: "system:serviceaccount:ns:runtime-bash",
	Extra: map[string][]string{
		serviceaccount.PodNameKey: {"bash-1"},
		serviceaccount.PodUIDKey:  {"uid-1"},
	},
}

func assignedRun(name, runtime, pod, podUID string, phase lifecycle.Phase) *kruntimes.Run {
	return &kruntimes.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       kruntimes.RunSpec{Runtime: runtime, Mode: kruntimes.RunMode{Function: &kruntimes.FunctionMode{}}},
		Status:     kruntimes.RunStatus{Phase: phase, AssignedPod: pod, AssignedPodUID: types.UID(podUID)},
	}
}

func TestAuthorizer(t *testing.T) {
	stored := map[string]*kruntimes.Run{
		"mine":          assignedRun("mine", "bash", "bash-1", "uid-1", lifecycle.Running),
		"other-pod":     assignedRun("other-pod", "bash", "bash-2", "uid-2", lifecycle.Running),
		"earlier-pod":   assignedRun("earlier-pod", "bash", "bash-1", "uid-0", lifecycle.Running),
		"other-runtime": assignedRun("other-runtime", "python", "bash-1", "uid-1", lifecycle.Running),
	}
	a := NewAuthorizer(func(_ context.Context, ns, name string) (*kruntimes.Run, error) {
		if run, ok := stored[name]; ok && ns == "ns" {
			return run, nil
		}
		return nil, apierrors.NewNotFound(kruntimes.Resource("runs"), name)
	})
	request := func(u user.Info, verb, ns, resource, sub, name, selector string) authorizer.AttributesRecord {
		r := authorizer.AttributesRecord{
			User: u, Verb: verb, Namespace: ns, APIGroup: kruntimes.GroupName, Resource: resource,
			Subresource: sub, Name: name, ResourceRequest: true,
		}
		if selector != "" {
			s, err := fields.ParseSelector(selector)
			require.NoError(t, err)
			r.FieldSelectorRequirements = s.Requirements()
		}
		return r
	}
	own := lifecycle.FieldStatusAssignedPod + "=bash-1," + lifecycle.FieldStatusAssignedPodUID + "=uid-1"
	cases := []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  authorizer.Decision
	}{
		{"list with its own Pod's selector is allowed", request(runtimedUser, "list", "ns", "runs", "", "", own), authorizer.DecisionAllow},
		{"watch with its own Pod's selector and more is allowed", request(runtimedUser, "watch", "ns", "runs", "", "", "metadata.name=x,"+own), authorizer.DecisionAllow},
		{"list by its Pod's name alone is denied", request(runtimedUser, "list", "ns", "runs", "", "", lifecycle.FieldStatusAssignedPod+"=bash-1"), authorizer.DecisionDeny},
		{"watch by its Pod's name alone is denied", request(runtimedUser, "watch", "ns", "runs", "", "", lifecycle.FieldStatusAssignedPod+"=bash-1"), authorizer.DecisionDeny},
		{"list by its Pod's name and an earlier Pod's UID is denied",
			request(runtimedUser, "list", "ns", "runs", "", "", lifecycle.FieldStatusAssignedPod+"=bash-1,"+lifecycle.FieldStatusAssignedPodUID+"=uid-0"), authorizer.DecisionDeny},
		{"list by its Pod's UID alone is denied", request(runtimedUser, "list", "ns", "runs", "", "", lifecycle.FieldStatusAssignedPodUID+"=uid-1"), authorizer.DecisionDeny},
		{"list with a not-equal UID selector is denied",
			request(runtimedUser, "list", "ns", "runs", "", "", lifecycle.FieldStatusAssignedPod+"=bash-1,"+lifecycle.FieldStatusAssignedPodUID+"!=uid-0"), authorizer.DecisionDeny},
		{"list without a selector is denied", request(runtimedUser, "list", "ns", "runs", "", "", ""), authorizer.DecisionDeny},
		{"list with another Pod's selector is denied",
			request(runtimedUser, "list", "ns", "runs", "", "", lifecycle.FieldStatusAssignedPod+"=bash-2,"+lifecycle.FieldStatusAssignedPodUID+"=uid-1"), authorizer.DecisionDeny},
		{"list with a not-equal selector is denied", request(runtimedUser, "list", "ns", "runs", "", "", lifecycle.FieldStatusAssignedPod+"!=bash-1"), authorizer.DecisionDeny},
		{"list in another namespace is denied", request(runtimedUser, "list", "other", "runs", "", "", own), authorizer.DecisionDeny},
		{"list across namespaces is denied", request(runtimedUser, "list", "", "runs", "", "", own), authorizer.DecisionDeny},
		{"get of its Pod's Run is allowed", request(runtimedUser, "get", "ns", "runs", "", "mine", ""), authorizer.DecisionAllow},
		{"get of another Pod's Run is denied", request(runtimedUser, "get", "ns", "runs", "", "other-pod", ""), authorizer.DecisionDeny},
		{"get of a Run of an earlier Pod of the name is denied", request(runtimedUser, "get", "ns", "runs", "", "earlier-pod", ""), authorizer.DecisionDeny},
		{"get of another Runtime's Run is denied", request(runtimedUser, "get", "ns", "runs", "", "other-runtime", ""), authorizer.DecisionDeny},
		{"get of an absent Run is denied like a foreign one", request(runtimedUser, "get", "ns", "runs", "", "absent", ""), authorizer.DecisionDeny},
		{"status update is left to admission", request(runtimedUser, "update", "ns", "runs", "status", "other-pod", ""), authorizer.DecisionAllow},
		{"patch is left to admission", request(runtimedUser, "patch", "ns", "runs", "", "mine", ""), authorizer.DecisionAllow},
		{"create is denied", request(runtimedUser, "create", "ns", "runs", "", "", ""), authorizer.DecisionDeny},
		{"delete is denied", request(runtimedUser, "delete", "ns", "runs", "", "mine", ""), authorizer.DecisionDeny},
		{"handing over the log of its Pod's Run is allowed", request(runtimedUser, "create", "ns", "runs", "log", "mine", ""), authorizer.DecisionAllow},
		{"handing over the log of another Pod's Run is denied", request(runtimedUser, "create", "ns", "runs", "log", "other-pod", ""), authorizer.DecisionDeny},
		{"reading the log of its own Pod's Run is denied", request(runtimedUser, "get", "ns", "runs", "log", "mine", ""), authorizer.DecisionDeny},
		{"invoke is denied", request(runtimedUser, "create", "ns", "runs", "invoke", "mine", ""), authorizer.DecisionDeny},
		{"runtimes are denied", request(runtimedUser, "get", "ns", "runtimes", "", "bash", ""), authorizer.DecisionDeny},
		{"a Runtime's ServiceAccount without a Pod binding is denied",
			request(&user.DefaultInfo{Name: "system:serviceaccount:ns:runtime-bash"}, "list", "ns", "runs", "", "", own), authorizer.DecisionDeny},
		{"another ServiceAccount is left to the delegating authorizer",
			request(&user.DefaultInfo{Name: "system:serviceaccount:ns:default", Extra: runtimedUser.Extra}, "list", "ns", "runs", "", "", ""), authorizer.DecisionNoOpinion},
		{"a user is left to the delegating authorizer", request(&user.DefaultInfo{Name: "alice"}, "delete", "ns", "runs", "", "mine", ""), authorizer.DecisionNoOpinion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := a.Authorize(context.Background(), tc.attrs)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, reason)
			if got == authorizer.DecisionDeny {
				assert.NotEmpty(t, reason, "a denial says why")
			}
		})
	}

	t.Run("requests outside kruntimes.io are left alone", func(t *testing.T) {
		attrs := request(runtimedUser, "update", "ns", "leases", "", "bash-2", "")
		attrs.APIGroup = "coordination.k8s.io"
		got, _, err := a.Authorize(context.Background(), attrs)
		require.NoError(t, err)
		assert.Equal(t, authorizer.DecisionNoOpinion, got)
	})
}

// relocated is a Run given back for a planned disruption of its Pod.
func relocated(r *kruntimes.Run) {
	r.Status.Phase, r.Status.AssignedPod, r.Status.AssignedPodUID = lifecycle.Pending, "", ""
	r.Status.Conditions = []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionFalse, Reason: lifecycle.ReasonRelocating}}
}

func TestAdmission(t *testing.T) {
	mine := func(mutate ...func(*kruntimes.Run)) *kruntimes.Run {
		run := assignedRun("r", "bash", "bash-1", "uid-1", lifecycle.Running)
		run.Finalizers = []string{lifecycle.FinalizerRegistrationCleanup}
		for _, m := range mutate {
			m(run)
		}
		return run
	}
	cases := []struct {
		name     string
		old, run *kruntimes.Run
		sub      string
		user     user.Info
		allowed  bool
	}{
		{"claim: Scheduled → Running is allowed", mine(func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Scheduled }), mine(), "status", runtimedUser, true},
		{"ready: Running → Ready is allowed", mine(), mine(func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Ready }), "status", runtimedUser, true},
		{"finish: Running → Succeeded is allowed", mine(), mine(func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Succeeded }), "status", runtimedUser, true},
		{"release: back to Pending without assignment is allowed", mine(), mine(func(r *kruntimes.Run) {
			r.Status.Phase, r.Status.AssignedPod, r.Status.AssignedPodUID = lifecycle.Pending, "", ""
		}), "status", runtimedUser, true},
		{"relocation: its own Ready function back to Pending (reason Relocating) is allowed", mine(func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Ready }),
			mine(relocated), "status", runtimedUser, true},
		{"relocating another Pod's Run is forbidden", mine(func(r *kruntimes.Run) {
			r.Status.Phase, r.Status.AssignedPod, r.Status.AssignedPodUID = lifecycle.Ready, "bash-2", "uid-2"
		}), mine(relocated), "status", runtimedUser, false},
		{"relocating a Run of an earlier Pod of the same name is forbidden", mine(func(r *kruntimes.Run) {
			r.Status.Phase, r.Status.AssignedPodUID = lifecycle.Ready, "uid-0"
		}), mine(relocated), "status", runtimedUser, false},
		{"reassigning to another Pod is forbidden", mine(), mine(func(r *kruntimes.Run) {
			r.Status.AssignedPod, r.Status.AssignedPodUID = "bash-2", "uid-2"
		}), "status", runtimedUser, false},
		{"clearing the assignment without Pending is forbidden", mine(), mine(func(r *kruntimes.Run) {
			r.Status.AssignedPod, r.Status.AssignedPodUID = "", ""
		}), "status", runtimedUser, false},
		{"moving to Scheduled is forbidden", mine(), mine(func(r *kruntimes.Run) { r.Status.Phase = lifecycle.Scheduled }), "status", runtimedUser, false},
		{"status of another Pod's Run is forbidden", mine(func(r *kruntimes.Run) { r.Status.AssignedPod, r.Status.AssignedPodUID = "bash-2", "uid-2" }),
			mine(func(r *kruntimes.Run) { r.Status.AssignedPod, r.Status.AssignedPodUID = "bash-2", "uid-2" }), "status", runtimedUser, false},
		{"status of another Runtime's Run is forbidden", mine(func(r *kruntimes.Run) { r.Spec.Runtime = "python" }),
			mine(func(r *kruntimes.Run) { r.Spec.Runtime = "python" }), "status", runtimedUser, false},
		{"labels through status are forbidden", mine(), mine(func(r *kruntimes.Run) { r.Labels = map[string]string{"a": "b"} }), "status", runtimedUser, false},
		{"removing registration-cleanup is allowed", mine(), mine(func(r *kruntimes.Run) { r.Finalizers = nil }), "", runtimedUser, true},
		{"adding registration-cleanup is allowed", mine(func(r *kruntimes.Run) { r.Finalizers = nil }), mine(), "", runtimedUser, true},
		{"adding another finalizer is forbidden", mine(), mine(func(r *kruntimes.Run) { r.Finalizers = append(r.Finalizers, "example.com/keep") }), "", runtimedUser, false},
		{"removing another finalizer is forbidden", mine(func(r *kruntimes.Run) { r.Finalizers = append(r.Finalizers, "example.com/keep") }), mine(), "", runtimedUser, false},
		{"changing spec is forbidden", mine(), mine(func(r *kruntimes.Run) { r.Spec.CancelRequested = true }), "", runtimedUser, false},
		{"finalizers of another Pod's Run are forbidden", mine(func(r *kruntimes.Run) { r.Status.AssignedPodUID = "uid-2" }),
			mine(func(r *kruntimes.Run) { r.Status.AssignedPodUID, r.Finalizers = "uid-2", nil }), "", runtimedUser, false},
		{"a user may change anything", mine(), mine(func(r *kruntimes.Run) { r.Spec.CancelRequested = true }), "", &user.DefaultInfo{Name: "alice"}, true},
	}
	plugin := NewAdmission()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			attrs := admission.NewAttributesRecord(tc.run, tc.old, kruntimes.Kind("Run").WithVersion(""), "ns", "r",
				kruntimes.Resource("runs").WithVersion(""), tc.sub, admission.Update, &metav1.UpdateOptions{}, false, tc.user)
			err := plugin.Validate(context.Background(), attrs, nil)
			if tc.allowed {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, apierrors.IsForbidden(err), "want 403, got %v", err)
		})
	}

	t.Run("runtimed may not delete a Run", func(t *testing.T) {
		attrs := admission.NewAttributesRecord(nil, mine(), kruntimes.Kind("Run").WithVersion(""), "ns", "r",
			kruntimes.Resource("runs").WithVersion(""), "", admission.Delete, &metav1.DeleteOptions{}, false, runtimedUser)
		assert.True(t, apierrors.IsForbidden(plugin.Validate(context.Background(), attrs, nil)))
	})
}
