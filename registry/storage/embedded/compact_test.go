package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
)

func TestCompactionTarget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	samples := []revisionSample{{at: t0, rev: 10}, {at: t0.Add(time.Minute), rev: 20}, {at: t0.Add(2 * time.Minute), rev: 30}}
	tests := []struct {
		name       string
		now        time.Time
		cur        uint64
		maxHistory int64
		want       uint64
		wantKept   int
	}{
		{name: "nothing is old enough: no compaction", now: t0.Add(4 * time.Minute), cur: 40, maxHistory: -1, want: 0, wantKept: 4},
		{name: "compacts to the newest revision older than the window", now: t0.Add(6 * time.Minute), cur: 40, maxHistory: -1, want: 20, wantKept: 2},
		{name: "revision cap compacts further than the window", now: t0.Add(6 * time.Minute), cur: 1000, maxHistory: 100, want: 900, wantKept: 2},
		{name: "revision cap below the window changes nothing", now: t0.Add(6 * time.Minute), cur: 40, maxHistory: 100, want: 20, wantKept: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]revisionSample(nil), samples...)
			got, kept := compactionTarget(in, tc.now, tc.cur, 5*time.Minute, tc.maxHistory)
			assert.Equal(t, tc.want, got)
			assert.Len(t, kept, tc.wantKept)
		})
	}
}

// TestCompactRemovesOnlyUnreachableHistory checks what compaction leaves
// in the file: the newest revision of every live key at or below the
// compacted revision, and everything after it.
func TestCompactRemovesOnlyUnreachableHistory(t *testing.T) {
	ctx := context.Background()
	b := openTestBackend(t, Options{NoSync: true})
	s := podStore(t, b)
	for i := range 5 {
		createPod(ctx, t, s, "ns", fmt.Sprintf("p%d", i), "Pending")
		setPhase(ctx, t, s, "ns", fmt.Sprintf("p%d", i), "Running")
	}
	require.NoError(t, s.Delete(ctx, "/pods/ns/p0", &example.Pod{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}))
	compactAt := b.CurrentRevision()
	setPhase(ctx, t, s, "ns", "p1", "Succeeded")
	require.NoError(t, b.Compact(ctx, compactAt))

	var logEntries, indexEntries int
	require.NoError(t, b.view(func(tx *bolt.Tx) error {
		logEntries = tx.Bucket(bucketLog).Stats().KeyN
		indexEntries = tx.Bucket(bucketKeyRev).Stats().KeyN
		return nil
	}))
	// p1..p4 at compactAt, plus the update after it.
	assert.Equal(t, 5, logEntries)
	assert.Equal(t, 5, indexEntries)

	list := &example.PodList{}
	require.NoError(t, s.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: fmt.Sprint(compactAt), ResourceVersionMatch: metav1.ResourceVersionMatchExact, Predicate: storage.Everything, Recursive: true}, list))
	assert.Len(t, list.Items, 4, "the state at the compacted revision stays readable")
	assert.Error(t, b.Compact(ctx, b.CurrentRevision()+1), "compacting the future is refused")
}

func TestTTLSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err)
	s := podStore(t, b)
	require.NoError(t, s.Create(ctx, "/pods/ns/ttl", &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ttl"}}, &example.Pod{}, 1))
	require.NoError(t, b.Close())

	b, err = Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	s = podStore(t, b)
	w, err := s.Watch(ctx, "/pods/ns/ttl", storage.ListOptions{ResourceVersion: "1", Predicate: storage.Everything})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	assert.Equal(t, "ADDED", string(nextEvent(t, w).Type))
	assert.Equal(t, "DELETED", string(nextEvent(t, w).Type), "the TTL is enforced after a restart")
}

// TestReopenAfterCompactingTrailingDeletions: compaction at the committed
// revision removes the history entries of the deletions just before it, so
// the newest history entry is older than the committed revision. That file
// is sound and must open (it once was refused as corrupt after an idle
// period following a DeleteCollection).
func TestReopenAfterCompactingTrailingDeletions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err)
	s := podStore(t, b)
	createPod(ctx, t, s, "ns", "kept", "Running")
	for i := range 3 {
		name := fmt.Sprintf("gone%d", i)
		createPod(ctx, t, s, "ns", name, "Pending")
		require.NoError(t, s.Delete(ctx, "/pods/ns/"+name, &example.Pod{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}))
	}
	rev := b.CurrentRevision()
	require.NoError(t, b.Compact(ctx, rev))
	require.NoError(t, b.Close())

	b, err = Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err, "a compacted file is not corrupt")
	t.Cleanup(func() { _ = b.Close() })
	assert.Equal(t, rev, b.CurrentRevision(), "the revision survives the compaction of its history entry")
	s = podStore(t, b)
	list := &example.PodList{}
	require.NoError(t, s.GetList(ctx, "/pods/", storage.ListOptions{Predicate: storage.Everything, Recursive: true}, list))
	require.Len(t, list.Items, 1)
	assert.Equal(t, "kept", list.Items[0].Name)

	w, err := s.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: fmt.Sprint(rev), Predicate: storage.Everything, Recursive: true})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	createPod(ctx, t, s, "ns", "next", "Pending")
	ev := nextEvent(t, w)
	assert.Equal(t, "ADDED", string(ev.Type))
	assert.Equal(t, fmt.Sprint(rev+1), ev.Object.(*example.Pod).ResourceVersion, "revisions continue after the compacted one")
}

// TestTruncatedHistoryIsRefused: history entries missing above the
// compacted revision mean a damaged file.
func TestTruncatedHistoryIsRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.NoError(t, err)
	s := podStore(t, b)
	createPod(ctx, t, s, "ns", "a", "Pending")
	setPhase(ctx, t, s, "ns", "a", "Running")
	rev := b.CurrentRevision()
	require.NoError(t, b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketLog).Delete(encodeUint(rev)) }))
	require.NoError(t, b.Close())

	_, err = Open(dir, Options{CompactionInterval: -1, NoSync: true})
	require.ErrorContains(t, err, "kruntimes.db")
	assert.ErrorContains(t, err, "history")
}
