package slots

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/lifecycle"
)

func TestTable(t *testing.T) {
	_, err := New(0)
	require.Error(t, err, "a Pod holds at least one Run")

	table, err := New(2)
	require.NoError(t, err)
	var released atomic.Int32
	table.OnRelease(func() { released.Add(1) })

	assert.True(t, table.Acquire("a", lifecycle.ModeTask))
	assert.True(t, table.Acquire("a", lifecycle.ModeTask), "a Run that holds a slot keeps it")
	assert.True(t, table.Acquire("b", lifecycle.ModeFunction), "tasks and functions share the slots")
	assert.False(t, table.Acquire("c", lifecycle.ModeTask), "no third Run on two slots")
	assert.Equal(t, 2, table.Used())

	table.Hold("adopted", lifecycle.ModeFunction)
	assert.Equal(t, 3, table.Used(), "adopted work is counted even past capacity")
	assert.True(t, table.Holds("adopted"))

	table.Release("unknown")
	assert.Zero(t, released.Load(), "releasing what is not held tells nobody")
	table.Release("a")
	table.Release("adopted")
	assert.Equal(t, int32(2), released.Load())
	assert.True(t, table.Acquire("c", lifecycle.ModeTask), "a released slot is free again")
}

func TestTableNeverExceedsCapacityUnderContention(t *testing.T) {
	table, err := New(3)
	require.NoError(t, err)
	var holding, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			uid := types.UID(fmt.Sprint(i))
			for range 100 {
				if !table.Acquire(uid, lifecycle.ModeTask) {
					continue
				}
				n := holding.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				holding.Add(-1)
				table.Release(uid)
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int32(3))
	assert.Zero(t, table.Used())
}

// TestClosedTableClaimsNothing: once the Pod shuts down, no new Run gets a
// slot, free or not; what holds one keeps it until released.
func TestClosedTableClaimsNothing(t *testing.T) {
	table, err := New(2)
	require.NoError(t, err)
	require.True(t, table.Acquire("a", lifecycle.ModeFunction))
	table.Close()
	assert.True(t, table.Closed())
	assert.False(t, table.Acquire("b", lifecycle.ModeTask), "a free slot is not given out after Close")
	assert.True(t, table.Acquire("a", lifecycle.ModeFunction), "a Run that holds a slot keeps it")
	table.Release("a")
	assert.Zero(t, table.Used())
}
