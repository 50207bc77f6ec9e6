package framework

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestPollReportsWhatTheConditionLastSaw(t *testing.T) {
	runs := schema.GroupResource{Group: "kruntimes.io", Resource: "runs"}
	forbidden := apierrors.NewForbidden(runs, "hello", errors.New("RBAC: not yet"))
	tests := []struct {
		name      string
		condition func(context.Context, *Observed) (bool, error)
		wantErr   []string
		notWant   []string
	}{
		{
			name: "a timeout names the last error the condition retried on",
			condition: func(_ context.Context, seen *Observed) (bool, error) {
				seen.Err(forbidden)
				return false, nil
			},
			wantErr: []string{"context deadline exceeded", "last error (attempt", `runs.kruntimes.io "hello" is forbidden`},
		},
		{
			name: "a timeout names the last state the condition waited on",
			condition: func(_ context.Context, seen *Observed) (bool, error) {
				seen.State("phase %s", "Pending")
				return false, nil
			},
			wantErr: []string{"last state: phase Pending"},
			notWant: []string{"last error"},
		},
		{
			name: "an object that still exists is the state of a wait for its deletion",
			condition: func(_ context.Context, seen *Observed) (bool, error) {
				return seen.Deleted(nil), nil
			},
			wantErr: []string{"last state: still exists"},
		},
		{
			name: "a deletion wait records errors other than NotFound",
			condition: func(_ context.Context, seen *Observed) (bool, error) {
				return seen.Deleted(forbidden), nil
			},
			wantErr: []string{"is forbidden"},
		},
		{
			name: "an error the condition returns ends polling as it is",
			condition: func(context.Context, *Observed) (bool, error) {
				return false, errors.New("Run went Failed while no slot was free")
			},
			wantErr: []string{"Run went Failed while no slot was free"},
			notWant: []string{"attempts"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Poll(context.Background(), time.Millisecond, 20*time.Millisecond, tc.condition)
			require.Error(t, err)
			for _, want := range tc.wantErr {
				assert.Contains(t, err.Error(), want)
			}
			for _, notWant := range tc.notWant {
				assert.NotContains(t, err.Error(), notWant)
			}
		})
	}

	t.Run("a condition that is met returns nil", func(t *testing.T) {
		gone := apierrors.NewNotFound(runs, "hello")
		require.NoError(t, Poll(context.Background(), time.Millisecond, time.Second, func(_ context.Context, seen *Observed) (bool, error) {
			return seen.Deleted(gone), nil
		}))
	})
	t.Run("a timeout still is a wait timeout", func(t *testing.T) {
		err := Poll(context.Background(), time.Millisecond, 5*time.Millisecond, func(context.Context, *Observed) (bool, error) { return false, nil })
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
}
