package dedup

import (
	"context"
	"fmt"
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
		l, _ := tab.Begin(context.Background(), ids[i])
		l.Run.Finish(fmt.Sprintf(`{"n":%d}`, i), nil, true)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if l, _ := tab.Begin(ctx, ids[i%1000]); !l.Replayed {
			b.Fatal("not replayed")
		}
	}
}

// BenchmarkRunAndRecordInFullTable is a new ID in a full table: a lookup
// that misses, then recording the outcome and evicting the oldest.
func BenchmarkRunAndRecordInFullTable(b *testing.B) {
	tab, _ := newTable(time.Hour, 1000, 4<<20)
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l, _ := tab.Begin(ctx, ids[i%2000])
		if l.Run == nil {
			b.Fatal("replayed")
		}
		l.Run.Finish(`{"ok":true}`, nil, true)
	}
}
