package dedup

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkReplayFromFullTable looks IDs up in a table holding 1,000
// recorded outcomes (runtimed's default bound): the cost a repeat pays
// before its answer.
func BenchmarkReplayFromFullTable(b *testing.B) {
	tab, _ := newTable(time.Hour, 1000, 4<<20)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i)
		l, _ := tab.Begin(context.Background(), "", ids[i])
		l.Run.Finish(fmt.Sprintf(`{"n":%d}`, i), nil, true)
	}
	ctx := context.Background()
	// Each lookup timed on its own too, for p50 and p99 (the clock reads
	// add their own ~50 ns to those).
	// The first 64 Ki of them; the slice is written once before the loop
	// so that no page fault lands in it.
	took := make([]time.Duration, 1<<16)
	for i := range took {
		took[i] = -1
	}
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		l, _ := tab.Begin(ctx, "", ids[i%1000])
		if i < len(took) {
			took[i] = time.Since(start)
			n++
		}
		if !l.Replayed {
			b.Fatal("not replayed")
		}
	}
	took = took[:n]
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/1000, "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds())/1000, "p99-µs")
}

// BenchmarkRunAndRecordInFullTable is a new ID in a full table: a lookup
// that misses, then recording the outcome and evicting the oldest.
func BenchmarkRunAndRecordInFullTable(b *testing.B) {
	tab, _ := newTable(time.Hour, 1000, 4<<20)
	benchmarkRunAndRecord(b, tab)
}

// BenchmarkRunAndRecordOverPodBudget is the same with the Pod's Budget
// full too: each record also evicts the oldest outcome of all four Tables.
func BenchmarkRunAndRecordOverPodBudget(b *testing.B) {
	tabs, _, _ := budgeted(4, 1000*11)
	for i, tab := range tabs[1:] {
		for n := range 1000 {
			l, _ := tab.Begin(context.Background(), "", fmt.Sprintf("other-%d-%d", i, n))
			l.Run.Finish(`{"ok":true}`, nil, true)
		}
	}
	benchmarkRunAndRecord(b, tabs[0])
}

func benchmarkRunAndRecord(b *testing.B, tab *Table[string]) {
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l, _ := tab.Begin(ctx, "", ids[i%2000])
		if l.Run == nil {
			b.Fatal("replayed")
		}
		l.Run.Finish(`{"ok":true}`, nil, true)
	}
}
