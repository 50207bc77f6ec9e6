package invokerouter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

const citySchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`

// remove deletes run and sends its deletion to the watchers.
func (f *fakeRuns) remove(run *kruntimes.Run) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.runs, run.Namespace+"/"+run.Name)
	for _, w := range f.watchers {
		w.Delete(run.DeepCopy())
	}
}

func withInputSchema(schema string) func(*kruntimes.Run) {
	return func(r *kruntimes.Run) {
		r.Spec.Mode.Function.Schema = &kruntimes.FunctionSchema{Input: &runtime.RawExtension{Raw: []byte(schema)}}
	}
}

func TestRouteCarriesTheCompiledInputSchema(t *testing.T) {
	typed := functionRun("typed", withInputSchema(citySchema))
	runs := newFakeRuns(typed, functionRun("untyped"))
	router := startedRouter(t, runs, runtimePod("pod-a"))
	c := router.cache.Load()

	route, err := router.Route(t.Context(), "ns", "untyped", "")
	require.NoError(t, err)
	assert.Nil(t, route.Input, "a Run without a schema is routed without a validator")
	assert.Zero(t, c.schemas.len())

	route, err = router.Route(t.Context(), "ns", "typed", "")
	require.NoError(t, err)
	require.NotNil(t, route.Input)
	assert.Empty(t, route.Input.Validate([]byte(`{"city":"Oslo"}`)))
	assert.Len(t, route.Input.Validate([]byte(`{}`)), 1)
	again, err := router.Route(t.Context(), "ns", "typed", "")
	require.NoError(t, err)
	assert.Same(t, route.Input, again.Input, "compiled once per Run UID")
	assert.Equal(t, 1, c.schemas.len())

	runs.remove(typed)
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.schemas.len() == 0, nil
	})
	require.NoError(t, err, "a deleted Run's schema is evicted")
}

func TestSchemaCacheIsBounded(t *testing.T) {
	raw := []byte(citySchema)
	t.Run("by count, least recently used first", func(t *testing.T) {
		c := newSchemaCache(2, 1<<20)
		first, err := c.validator("a", raw)
		require.NoError(t, err)
		_, _ = c.validator("b", raw)
		_, _ = c.validator("a", raw) // a is now the most recent
		_, _ = c.validator("c", raw)
		assert.Equal(t, 2, c.len())
		again, _ := c.validator("a", raw)
		assert.Same(t, first, again, "a was kept")
		_, kept := c.byUID["b"]
		assert.False(t, kept, "b, the least recently used, was evicted")
	})
	t.Run("by bytes", func(t *testing.T) {
		c := newSchemaCache(100, 3*len(raw))
		for i := range 10 {
			_, err := c.validator(types.UID(fmt.Sprint(i)), raw)
			require.NoError(t, err)
		}
		assert.Equal(t, 3, c.len())
		assert.LessOrEqual(t, c.bytes, 3*len(raw))
	})
	t.Run("a schema that does not compile is not cached", func(t *testing.T) {
		c := newSchemaCache(2, 1<<20)
		_, err := c.validator("a", []byte(`{"type":`))
		require.Error(t, err)
		assert.Zero(t, c.len())
	})
}

func TestRunDeletedForgetsTheSchema(t *testing.T) {
	run := functionRun("typed", withInputSchema(citySchema))
	for _, tc := range []struct {
		name      string
		obj       any
		forgotten bool
	}{
		{"the deleted Run", run, true},
		{"a tombstone of the Run (its watch missed the delete)", cache.DeletedFinalStateUnknown{Key: "ns/typed", Obj: run}, true},
		{"a tombstone of something else", cache.DeletedFinalStateUnknown{Key: "ns/typed", Obj: &corev1.Pod{}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &ownershipCache{schemas: newSchemaCache(2, 1<<20)}
			_, err := c.schemas.validator(run.UID, []byte(citySchema))
			require.NoError(t, err)
			c.runDeleted(tc.obj)
			assert.Equal(t, tc.forgotten, c.schemas.len() == 0)
		})
	}
}
