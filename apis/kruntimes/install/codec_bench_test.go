package install

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// BenchmarkRunCodec encodes and decodes a typical scheduled task Run as JSON
// and as protobuf, the serializers behind the wire formats and storage:
//
//	go test ./apis/kruntimes/install -run '^$' -bench BenchmarkRunCodec -benchmem
func BenchmarkRunCodec(b *testing.B) {
	scheme := runtime.NewScheme()
	Install(scheme)
	serializers := []struct {
		name string
		s    runtime.Serializer
	}{
		{"json", json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{})},
		{"protobuf", protobuf.NewSerializer(scheme, scheme)},
	}
	run := typicalRun()
	for _, sz := range serializers {
		var buf bytes.Buffer
		if err := sz.s.Encode(run, &buf); err != nil {
			b.Fatal(err)
		}
		data := buf.Bytes()
		b.Run(sz.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			var out bytes.Buffer
			for b.Loop() {
				out.Reset()
				if err := sz.s.Encode(run, &out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data)), "bytes/obj")
		})
		b.Run(sz.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := sz.s.Decode(data, nil, &v1alpha1.Run{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func typicalRun() *v1alpha1.Run {
	now := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC))
	return &v1alpha1.Run{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Run"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "run-12345", Namespace: "team-a", UID: "0b0e7a4e-3f0c-4a53-9d7b-6c1d2f0a9e11",
			ResourceVersion: "123456", Generation: 1, CreationTimestamp: metav1.NewTime(now.Time),
			Labels: map[string]string{"app": "etl", "kruntimes.io/runtime": "python"},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "kruntimes.io/v1alpha1",
				Time: &metav1.Time{Time: now.Time}, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:runtime":{},"f:source":{"f:inline":{}},"f:mode":{"f:task":{}}}}`),
			}},
		},
		Spec: v1alpha1.RunSpec{
			Runtime: "python",
			Source:  v1alpha1.RunSource{Inline: "import sys\nprint('hello', sys.argv)\n"},
			Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{Args: []string{"--day", "2026-01-02"}}},
			Env:     []v1alpha1.EnvVar{{Name: "STAGE", Value: "prod"}, {Name: "LOG_LEVEL", Value: "info"}},
			Timeout: &metav1.Duration{Duration: 10 * time.Minute},
			RetryPolicy: &v1alpha1.RetryPolicy{MaxAttempts: 3, Backoff: &v1alpha1.RetryBackoff{
				Initial: &metav1.Duration{Duration: time.Second}, Max: &metav1.Duration{Duration: time.Minute}, Factor: "2"}},
			TTLSecondsAfterFinished: new(int32(3600)),
		},
		Status: v1alpha1.RunStatus{
			Phase: lifecycle.Running, Attempt: 1, AssignedPod: "python-7d9f8-abcde", AssignedPodUID: "5f3c2b1a-0000-4000-8000-000000000001",
			ScheduledTime: &now, StartTime: &now,
			Conditions: []metav1.Condition{{Type: "Scheduled", Status: metav1.ConditionTrue, Reason: lifecycle.ReasonScheduled,
				Message: "bound to python-7d9f8-abcde", LastTransitionTime: metav1.NewTime(now.Time), ObservedGeneration: 1}},
		},
	}
}
