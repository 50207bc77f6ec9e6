// Package fuzzer fills kruntimes objects with random but valid-shaped values
// for the round-trip tests of apis/kruntimes/install.
package fuzzer

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// Funcs returns the fuzzer functions of the kruntimes.io group. They produce
// objects that are already defaulted, since decoding applies defaults.
var Funcs = func(runtimeserializer.CodecFactory) []any {
	return []any{
		func(s *kruntimes.RunSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.RetryPolicy == nil {
				s.RetryPolicy = &kruntimes.RetryPolicy{}
			}
			if s.RetryPolicy.MaxAttempts == 0 {
				s.RetryPolicy.MaxAttempts = 1
			}
		},
		func(d *metav1.Duration, c randfill.Continue) {
			// Durations travel as strings; keep them in a range that prints exactly.
			d.Duration = time.Duration(c.Int63n(int64(24*time.Hour))) / time.Millisecond * time.Millisecond
		},
		func(s *kruntimes.RuntimeSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.Replicas == nil {
				r := c.Int31n(10)
				s.Replicas = &r
			}
			if s.Capacity.Runs == 0 {
				s.Capacity.Runs = 1
			}
			if s.RuntimedImage == "" {
				s.RuntimedImage = "kruntimes.io/runtimed:latest"
			}
			// core/v1 has its own round-trip tests upstream; a small
			// template with every field kruntimes reads is enough here.
			s.Template = corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": c.String(0)}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "runtime",
					Image: fmt.Sprintf("img-%d", c.Uint32()),
					Args:  []string{c.String(0)},
				}}},
			}
		},
	}
}
