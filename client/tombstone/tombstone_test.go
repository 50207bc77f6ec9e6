package tombstone

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestAs(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	for _, tc := range []struct {
		name string
		obj  any
		want *corev1.Pod
	}{
		{"object", pod, pod},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: pod}, pod},
		{"another type", &corev1.Node{}, nil},
		{"another type in a tombstone", cache.DeletedFinalStateUnknown{Key: "a", Obj: &corev1.Node{}}, nil},
		{"nil", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := As[*corev1.Pod](tc.obj)
			assert.Equal(t, tc.want != nil, ok)
			assert.Same(t, tc.want, got)
		})
	}
}
