package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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

// Observed is what a condition polled by Poll saw on its attempts: the last
// error it retried on (a 403 while RBAC propagates, a 500 from a restarting
// server) and the last state it was waiting to change.
type Observed struct {
	attempt    int
	err        error
	errAttempt int
	state      string
}

// Err records err when it is not nil and reports whether it was, for
// conditions that retry on errors: `if seen.Err(err) { return false, nil }`.
func (o *Observed) Err(err error) bool {
	if err == nil {
		return false
	}
	o.err, o.errAttempt = err, o.attempt
	return true
}

// State records the state the condition saw and is waiting to change.
func (o *Observed) State(format string, args ...any) {
	o.state = fmt.Sprintf(format, args...)
}

// Deleted reports whether err, from a GET of an object being deleted, says
// the object is gone. Any other error is recorded; no error records that the
// object still exists.
func (o *Observed) Deleted(err error) bool {
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err == nil:
		o.State("still exists")
	default:
		o.Err(err)
	}
	return false
}

// explain adds what the condition last saw to err.
func (o *Observed) explain(err error) error {
	var seen string
	if o.state != "" {
		seen += "; last state: " + o.state
	}
	if o.err != nil {
		seen += fmt.Sprintf("; last error (attempt %d): %v", o.errAttempt, o.err)
	}
	return fmt.Errorf("%w after %d attempts%s", err, o.attempt, seen)
}

// Poll is wait.PollUntilContextTimeout (checking at once) for conditions
// that record what they see: it calls condition every interval until it
// returns true or an error, or timeout passes. A timeout's error then names
// the last error and state the condition recorded in seen instead of only
// "context deadline exceeded", so that a 403 reads as a 403.
func Poll(ctx context.Context, interval, timeout time.Duration, condition func(ctx context.Context, seen *Observed) (bool, error)) error {
	seen := &Observed{}
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		seen.attempt++
		return condition(ctx, seen)
	})
	if err != nil && wait.Interrupted(err) {
		return seen.explain(err)
	}
	return err
}
