package e2e

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	kruntimesscheme "kruntimes.io/kruntimes/client/clientset/versioned/scheme"
)

// Helpers for the tests that construct a controller in the test process, as
// controllers/manager does, over real informers and real servers.

// newEventRecorder records Events into kube as controllers/manager does,
// until the test ends.
func newEventRecorder(t *testing.T, kube kubernetes.Interface, component string) record.EventRecorder {
	t.Helper()
	broadcaster := record.NewBroadcaster(record.WithContext(t.Context()))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, kruntimesscheme.AddToScheme(scheme))
	return broadcaster.NewRecorder(scheme, corev1.EventSource{Component: component})
}

// informerFactory is what the client-go and the generated informer
// factories share.
type informerFactory interface {
	Start(stopCh <-chan struct{})
	WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool
}

// startInformers starts the factories and waits until their informers have
// synced: from then on, the objects the test made so far are queued ahead of
// anything it makes next (see settle).
func startInformers(t *testing.T, stop <-chan struct{}, factories ...informerFactory) {
	t.Helper()
	for _, f := range factories {
		f.Start(stop)
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(stop) {
			require.True(t, ok, "informer of %v synced", typ)
		}
	}
}
