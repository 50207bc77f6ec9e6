package integration

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// ackedWrite is a write the server acknowledged before it was killed.
type ackedWrite struct {
	rv    uint64
	phase lifecycle.Phase
}

type seenEvent struct {
	typ  watch.EventType
	name string
	rv   uint64
}

// TestCrashDurability SIGKILLs the server in the middle of concurrent
// creates and status updates, restarts it on the same directory, and checks
// that every acknowledged write survived, nothing half-written appeared, and
// a watch resumed from a recorded resourceVersion replays every event in
// order with no gap and no duplicate.
func TestCrashDurability(t *testing.T) {
	dataDir := t.TempDir()
	p := startServerProcess(t, dataDir)
	ctx := context.Background()
	runs := p.client.KruntimesV1alpha1().Runs(namespace)

	start, err := runs.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	startRV := start.ResourceVersion

	w, err := runs.Watch(ctx, metav1.ListOptions{ResourceVersion: startRV})
	require.NoError(t, err)
	var beforeCrash []seenEvent
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			if run, ok := ev.Object.(*v1alpha1.Run); ok {
				beforeCrash = append(beforeCrash, seenEvent{ev.Type, run.Name, parseRV(t, run.ResourceVersion)})
			}
		}
	}()

	const writers = 16
	var (
		mu        sync.Mutex
		acked     = map[string]ackedWrite{}
		attempted = map[string]bool{}
		ackedRVs  []uint64
	)
	writeCtx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; writeCtx.Err() == nil; i++ {
				name := fmt.Sprintf("crash-%d-%d", g, i)
				mu.Lock()
				attempted[name] = true
				mu.Unlock()
				created, err := runs.Create(writeCtx, taskRun(name), metav1.CreateOptions{})
				if err != nil {
					return
				}
				mu.Lock()
				acked[name] = ackedWrite{parseRV(t, created.ResourceVersion), created.Status.Phase}
				ackedRVs = append(ackedRVs, acked[name].rv)
				mu.Unlock()
				scheduled(&created.Status)
				updated, err := runs.UpdateStatus(writeCtx, created, metav1.UpdateOptions{})
				if err != nil {
					return
				}
				mu.Lock()
				acked[name] = ackedWrite{parseRV(t, updated.ResourceVersion), updated.Status.Phase}
				ackedRVs = append(ackedRVs, acked[name].rv)
				mu.Unlock()
			}
		}()
	}
	// Kill once a few hundred writes are acknowledged, mid-stream.
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(ackedRVs) >= 400, nil
	})
	p.kill()
	stopWriters()
	wg.Wait()
	<-watchDone
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, acked, "no write was acknowledged before the kill")
	t.Logf("killed after %d acknowledged writes to %d Runs", len(ackedRVs), len(acked))

	p = startServerProcess(t, dataDir)
	runs = p.client.KruntimesV1alpha1().Runs(namespace)
	after, err := runs.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	stored := map[string]v1alpha1.Run{}
	var lastRV uint64
	for _, r := range after.Items {
		stored[r.Name] = r
		assert.True(t, attempted[r.Name], "%s was never written", r.Name)
		lastRV = max(lastRV, parseRV(t, r.ResourceVersion))
	}
	for name, ack := range acked {
		r, ok := stored[name]
		if !assert.True(t, ok, "acknowledged Run %s is lost", name) {
			continue
		}
		rv := parseRV(t, r.ResourceVersion)
		assert.GreaterOrEqual(t, rv, ack.rv, "%s went back in time", name)
		if rv == ack.rv {
			assert.Equal(t, ack.phase, r.Status.Phase, "%s at its acknowledged resourceVersion", name)
		} else {
			// The one write that may have committed without its
			// acknowledgement is the status update that followed.
			assert.Equal(t, lifecycle.Scheduled, r.Status.Phase, "%s", name)
		}
	}

	// Resume the watch from the recorded resourceVersion.
	resumeCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	w, err = runs.Watch(resumeCtx, metav1.ListOptions{ResourceVersion: startRV})
	require.NoError(t, err)
	defer w.Stop()
	var resumed []seenEvent
	for lastRV > 0 && (len(resumed) == 0 || resumed[len(resumed)-1].rv < lastRV) {
		select {
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "resumed watch closed after %d events", len(resumed))
			run, isRun := ev.Object.(*v1alpha1.Run)
			require.True(t, isRun, "unexpected watch event %v: %#v", ev.Type, ev.Object)
			resumed = append(resumed, seenEvent{ev.Type, run.Name, parseRV(t, run.ResourceVersion)})
		case <-resumeCtx.Done():
			t.Fatalf("resumed watch stopped at %d events, want up to resourceVersion %d", len(resumed), lastRV)
		}
	}
	seen := map[uint64]bool{}
	for i, ev := range resumed {
		if i > 0 {
			require.Greater(t, ev.rv, resumed[i-1].rv, "events out of order or duplicated at %d", i)
		}
		seen[ev.rv] = true
	}
	for _, rv := range ackedRVs {
		assert.True(t, seen[rv], "the watch skipped the acknowledged write at resourceVersion %d", rv)
	}
	require.LessOrEqual(t, len(beforeCrash), len(resumed))
	assert.Equal(t, beforeCrash, resumed[:len(beforeCrash)], "the resumed watch replays what was seen before the crash")
}

func parseRV(t *testing.T, rv string) uint64 {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Errorf("resourceVersion %q is not a revision: %v", rv, err)
	}
	return v
}
