package validation

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// bashRuntime is a minimal valid Runtime, as defaulting leaves it.
func bashRuntime() *kruntimes.Runtime {
	one := int32(1)
	return &kruntimes.Runtime{
		ObjectMeta: metav1.ObjectMeta{Name: "bash", Namespace: "default", ResourceVersion: "3"},
		Spec: kruntimes.RuntimeSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:  "runtime",
				Image: "kruntimes.io/kruntimes-runtime:latest",
			}}}},
			Replicas:      &one,
			Capacity:      kruntimes.RuntimeCapacity{Runs: 1},
			RuntimedImage: "kruntimes.io/runtimed:latest",
		},
		Status: kruntimes.RuntimeStatus{ObservedGeneration: 1, Replicas: 1, ReadyReplicas: 1},
	}
}

func TestMinimalRuntimeIsValid(t *testing.T) {
	assert.Empty(t, ValidateRuntime(bashRuntime()), "create")
	assert.Empty(t, ValidateRuntimeUpdate(bashRuntime(), bashRuntime()), "update")
	assert.Empty(t, ValidateRuntimeStatusUpdate(bashRuntime(), bashRuntime()), "status update")
}

func TestRuntimeSpecBounds(t *testing.T) {
	type c = boundCase[*kruntimes.Runtime]
	cases := []c{
		accepted("capacity of 1 Run per Pod is accepted",
			func(rt *kruntimes.Runtime) { rt.Spec.Capacity.Runs = 1 }),
		rejected("capacity of 0 Runs per Pod is rejected at spec.capacity.runs",
			func(rt *kruntimes.Runtime) { rt.Spec.Capacity.Runs = 0 },
			field.ErrorTypeInvalid, "spec.capacity.runs"),
		accepted("capacity of 1024 Runs per Pod is accepted",
			func(rt *kruntimes.Runtime) { rt.Spec.Capacity.Runs = 1024 }),
		rejected("capacity of 1025 Runs per Pod is rejected at spec.capacity.runs",
			func(rt *kruntimes.Runtime) { rt.Spec.Capacity.Runs = 1025 },
			field.ErrorTypeInvalid, "spec.capacity.runs"),

		accepted("0 replicas are accepted",
			func(rt *kruntimes.Runtime) { zero := int32(0); rt.Spec.Replicas = &zero }),
		rejected("-1 replicas are rejected at spec.replicas",
			func(rt *kruntimes.Runtime) { minusOne := int32(-1); rt.Spec.Replicas = &minusOne },
			field.ErrorTypeInvalid, "spec.replicas"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt := bashRuntime()
			tc.mutate(rt)
			tc.assertErrors(t, ValidateRuntime(rt))
		})
		t.Run(tc.name+" on update", func(t *testing.T) {
			rt := bashRuntime()
			tc.mutate(rt)
			tc.assertErrors(t, ValidateRuntimeUpdate(rt, bashRuntime()))
		})
	}
}

func TestRuntimeStatusBounds(t *testing.T) {
	type c = boundCase[*kruntimes.Runtime]
	cases := []c{
		accepted("16 conditions are accepted",
			func(rt *kruntimes.Runtime) { rt.Status.Conditions = conditions(16) }),
		rejected("17 conditions are rejected at status.conditions",
			func(rt *kruntimes.Runtime) { rt.Status.Conditions = conditions(17) },
			field.ErrorTypeTooMany, "status.conditions"),

		accepted("0 replicas, none ready, are accepted",
			func(rt *kruntimes.Runtime) { rt.Status.Replicas, rt.Status.ReadyReplicas = 0, 0 }),
		accepted("readyReplicas equal to replicas are accepted",
			func(rt *kruntimes.Runtime) { rt.Status.Replicas, rt.Status.ReadyReplicas = 3, 3 }),
		rejected("readyReplicas one above replicas are rejected at status.readyReplicas",
			func(rt *kruntimes.Runtime) { rt.Status.Replicas, rt.Status.ReadyReplicas = 3, 4 },
			field.ErrorTypeInvalid, "status.readyReplicas"),
		rejected("-1 readyReplicas are rejected at status.readyReplicas",
			func(rt *kruntimes.Runtime) { rt.Status.ReadyReplicas = -1 },
			field.ErrorTypeInvalid, "status.readyReplicas"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt := bashRuntime()
			tc.mutate(rt)
			tc.assertErrors(t, ValidateRuntimeStatusUpdate(rt, bashRuntime()))
		})
	}
}
