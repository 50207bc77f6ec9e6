package integration

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

const namespace = "default"

func taskRun(name string) *v1alpha1.Run {
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1alpha1.RunSpec{
			Runtime: "bash",
			Source:  v1alpha1.RunSource{Inline: "echo hello"},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}},
			Env:     []v1alpha1.EnvVar{{Name: "GREETING", Value: "hi"}},
		},
	}
}

func functionRun(name string) *v1alpha1.Run {
	idle := int32(300)
	return &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1alpha1.RunSpec{
			Runtime: "python",
			Source:  v1alpha1.RunSource{Inline: "def handle(event, context):\n    return event\n", InlinePath: "handler.py"},
			Mode:    v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "handler.handle", IdleTimeoutSeconds: &idle}},
		},
	}
}

func bashRuntime(name string) *v1alpha1.Runtime {
	return &v1alpha1.Runtime{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1alpha1.RuntimeSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:  "runtime",
				Image: "kruntimes.io/kruntimes-runtime:latest",
				Args:  []string{"--language=bash"},
			}}}},
		},
	}
}
