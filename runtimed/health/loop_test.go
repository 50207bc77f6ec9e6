package health

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	testingclock "k8s.io/utils/clock/testing"
)

func TestLoopFailsOnlyWhenWorkWaitsWithoutProgress(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Now())
	pending := 0
	loop := NewLoop("workers", time.Minute, func() int { return pending }, clk)
	check := loop.Check().Check

	pending = 1
	clk.SetTime(clk.Now().Add(time.Hour))
	assert.NoError(t, check(context.Background()), "a loop that has not started (its informer syncs) is not judged")
	loop.Start()
	pending = 0
	clk.SetTime(clk.Now().Add(time.Hour))
	assert.NoError(t, check(context.Background()), "an idle loop with nothing queued is alive")

	pending = 3
	assert.Error(t, check(context.Background()), "work waited an hour without progress: wedged")

	loop.Progress()
	assert.NoError(t, check(context.Background()), "progress makes it alive again")
	clk.SetTime(clk.Now().Add(59 * time.Second))
	assert.NoError(t, check(context.Background()), "within the bound")
	clk.SetTime(clk.Now().Add(2 * time.Second))
	assert.ErrorContains(t, check(context.Background()), "3 items have waited")
}

func TestTickerLoopAlwaysHasWork(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Now())
	loop := NewLoop("watch", 10*time.Second, nil, clk)
	loop.Start()
	assert.NoError(t, loop.Check().Check(context.Background()))
	clk.SetTime(clk.Now().Add(11 * time.Second))
	assert.Error(t, loop.Check().Check(context.Background()), "a ticker that stopped ticking is wedged")
}
