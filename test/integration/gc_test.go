package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/informers/externalversions"
	"kruntimes.io/kruntimes/controllers/gc"
)

// TestGCDeletesFinishedRunsAfterTheirTTL runs the TTL controller against the
// server: an expired terminal Run goes, an unexpired or active one stays.
func TestGCDeletesFinishedRunsAfterTheirTTL(t *testing.T) {
	s := startServer(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	runs := s.client.KruntimesV1alpha1().Runs(namespace)

	finish := func(name string, ttl *int32) *v1alpha1.Run {
		run := taskRun(name)
		run.Spec.TTLSecondsAfterFinished = ttl
		created, err := runs.Create(ctx, run, metav1.CreateOptions{})
		require.NoError(t, err)
		for _, step := range steps(scheduled, running, succeeded) {
			step(&created.Status)
			created, err = runs.UpdateStatus(ctx, created, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		return created
	}
	finish("expires", ptr[int32](1))
	finish("kept-long", ptr[int32](3600))
	finish("kept-forever", nil)
	active := taskRun("active")
	active.Spec.TTLSecondsAfterFinished = ptr[int32](0)
	_, err := runs.Create(ctx, active, metav1.CreateOptions{})
	require.NoError(t, err)

	factory := externalversions.NewSharedInformerFactory(s.client, 0)
	controller, err := gc.New(ctx, factory.Kruntimes().V1alpha1().Runs(), s.client)
	require.NoError(t, err)
	factory.Start(ctx.Done())
	go controller.Run(ctx, 1)

	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := runs.Get(ctx, "expires", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "the expired Run was not deleted")
	for _, name := range []string{"kept-long", "kept-forever", "active"} {
		_, err := runs.Get(ctx, name, metav1.GetOptions{})
		assert.NoError(t, err, "%s must stay", name)
	}
}
