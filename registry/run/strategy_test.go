package run

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

func TestStatusUpdateManagesTheRegistrationCleanupFinalizer(t *testing.T) {
	run := func(function bool, phase lifecycle.Phase, finalizers ...string) *kruntimes.Run {
		r := &kruntimes.Run{ObjectMeta: metav1.ObjectMeta{Finalizers: finalizers}, Status: kruntimes.RunStatus{Phase: phase}}
		if function {
			r.Spec.Mode.Function = &kruntimes.FunctionMode{Handler: "h.h"}
		} else {
			r.Spec.Mode.Task = &kruntimes.TaskMode{}
		}
		return r
	}
	const cleanup = lifecycle.FinalizerRegistrationCleanup
	cases := []struct {
		name string
		old  *kruntimes.Run
		to   lifecycle.Phase
		want []string
	}{
		{"claiming a function adds it in the same write", run(true, lifecycle.Scheduled, "user"), lifecycle.Running, []string{"user", cleanup}},
		{"claiming a task does not", run(false, lifecycle.Scheduled), lifecycle.Running, nil},
		{"a function sent back to Pending loses it", run(true, lifecycle.Ready, "user", cleanup), lifecycle.Pending, []string{"user"}},
		{"a function that ends keeps it for runtimed to remove after cleanup", run(true, lifecycle.Ready, cleanup), lifecycle.Cancelled, []string{cleanup}},
		{"re-registering on the same Pod keeps it", run(true, lifecycle.Ready, cleanup), lifecycle.Running, []string{cleanup}},
		{"a status write that keeps the phase keeps the finalizers as they are", run(true, lifecycle.Running), lifecycle.Running, nil},
	}
	strategy := NewStatusStrategy(NewStrategy(nil), Endpoint{Base: "https://kubernetes.default.svc"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			updated := tc.old.DeepCopy()
			updated.Status.Phase = tc.to
			updated.Finalizers = []string{"a stale copy's"}
			strategy.PrepareForUpdate(t.Context(), updated, tc.old)
			assert.Equal(t, tc.want, updated.Finalizers)
		})
	}
}

func TestStatusEndpointIsTheServers(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	direct := Endpoint{Base: "https://kruntimes-apiserver.kruntimes-system.svc", CABundle: ca}
	strategy := NewStatusStrategy(NewStrategy(nil), direct)
	old := &kruntimes.Run{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team a", Name: "fn", UID: "u-1"},
		Spec:       kruntimes.RunSpec{Mode: kruntimes.RunMode{Function: &kruntimes.FunctionMode{}}},
		Status:     kruntimes.RunStatus{Phase: lifecycle.Running},
	}
	want := &kruntimes.RunEndpoint{
		Protocol: kruntimes.RunEndpointProtocolHTTPS,
		URL:      "https://kruntimes-apiserver.kruntimes-system.svc/apis/kruntimes.io/v1alpha1/namespaces/team%20a/runs/fn/invoke?uid=u-1",
		CABundle: ca,
	}

	t.Run("a foreign URL and CA are replaced", func(t *testing.T) {
		updated := old.DeepCopy()
		updated.Status.Phase = lifecycle.Ready
		updated.Status.Endpoint = &kruntimes.RunEndpoint{Protocol: kruntimes.RunEndpointProtocolHTTPS, URL: "https://evil.example/steal", CABundle: []byte("theirs")}
		strategy.PrepareForUpdate(t.Context(), updated, old)
		assert.Equal(t, want, updated.Status.Endpoint)
	})
	t.Run("no endpoint stays none", func(t *testing.T) {
		updated := old.DeepCopy()
		strategy.PrepareForUpdate(t.Context(), updated, old)
		assert.Nil(t, updated.Status.Endpoint)
	})
	t.Run("a terminal Run's endpoint is left for validation to freeze", func(t *testing.T) {
		ended := old.DeepCopy()
		ended.Status.Phase = lifecycle.Cancelled
		ended.Status.Endpoint = &kruntimes.RunEndpoint{Protocol: kruntimes.RunEndpointProtocolHTTPS, URL: "https://kubernetes.default.svc/old"}
		updated := ended.DeepCopy()
		strategy.PrepareForUpdate(t.Context(), updated, ended)
		assert.Equal(t, ended.Status.Endpoint, updated.Status.Endpoint)
	})
}
