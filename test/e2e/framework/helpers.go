package framework

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Timeouts the suite waits with.
const (
	// PollInterval is how often conditions are re-checked.
	PollInterval = 250 * time.Millisecond
	// ShortTimeout bounds API round trips that should be quick.
	ShortTimeout = 30 * time.Second
	// PodTimeout bounds a Pod becoming Ready on the local node.
	PodTimeout = 2 * time.Minute
)

// CreateNamespace creates a namespace named after the test and deletes it
// when the test ends.
func (f *Framework) CreateNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := f.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = f.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Context returns a context that ends with the test or after timeout.
func Context(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}
