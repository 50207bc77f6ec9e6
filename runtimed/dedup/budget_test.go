package dedup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// budgeted returns n Tables sharing a Budget of max bytes, each bounded
// far above it on its own.
func budgeted(n int, max int64) ([]*Table[string], *Budget, *clocktesting.FakePassiveClock) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	b := NewBudget(max)
	tabs := make([]*Table[string], n)
	for i := range tabs {
		tabs[i] = New(Config{Window: time.Minute, MaxEntries: 1000, MaxBytes: 1 << 20, Clock: clk, Budget: b}, size)
	}
	return tabs, b, clk
}

func record(t *testing.T, tab *Table[string], id, value string) {
	t.Helper()
	if _, _, replayed := do(t, tab, id, func() (string, error) { return value, nil }); replayed {
		t.Fatalf("%s was replayed; want a first run", id)
	}
}

func replays(tab *Table[string], id string) bool {
	l, err := tab.Begin(context.Background(), "", id)
	if err != nil {
		return false
	}
	if l.Run != nil {
		l.Run.Finish("", nil, false)
	}
	return l.Replayed
}

func TestBudgetEvictsTheOldestOfAllTables(t *testing.T) {
	tabs, b, _ := budgeted(2, 30)
	a, c := tabs[0], tabs[1]
	record(t, a, "a1", strings.Repeat("x", 10))
	record(t, c, "c1", strings.Repeat("x", 10))
	record(t, a, "a2", strings.Repeat("x", 10))
	if got := b.Bytes(); got != 30 {
		t.Fatalf("budget holds %d bytes; want 30", got)
	}
	record(t, c, "c2", strings.Repeat("x", 10))
	if got := b.Bytes(); got != 30 {
		t.Fatalf("budget holds %d bytes after a fourth outcome; want 30", got)
	}
	if replays(a, "a1") {
		t.Fatal("a1, the oldest outcome of all, is still replayed; want it evicted for c2")
	}
	for _, kept := range []struct {
		tab *Table[string]
		id  string
	}{{c, "c1"}, {a, "a2"}, {c, "c2"}} {
		if !replays(kept.tab, kept.id) {
			t.Fatalf("%s was evicted; want only the oldest gone", kept.id)
		}
	}
}

func TestBudgetKeepsOneOversizeOutcome(t *testing.T) {
	tabs, b, _ := budgeted(2, 30)
	record(t, tabs[0], "small", strings.Repeat("x", 10))
	record(t, tabs[1], "huge", strings.Repeat("x", 100))
	if got := b.Bytes(); got != 100 {
		t.Fatalf("budget holds %d bytes; want the oversize outcome alone (100)", got)
	}
	if !replays(tabs[1], "huge") || replays(tabs[0], "small") {
		t.Fatal("want the newest, oversize outcome kept alone")
	}
}

func TestBudgetGivesBackWhatExpiresOrIsDropped(t *testing.T) {
	tabs, b, clk := budgeted(2, 1000)
	record(t, tabs[0], "a", "0123456789")
	record(t, tabs[1], "b", "0123456789")
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	if tabs[0].Len() != 0 {
		t.Fatal("a outlived its window")
	}
	if got := b.Bytes(); got != 10 {
		t.Fatalf("budget holds %d bytes after a expired; want 10", got)
	}
	tabs[1].Drop()
	if got := b.Bytes(); got != 0 {
		t.Fatalf("budget holds %d bytes after the last Table was dropped; want 0", got)
	}
}

func TestDroppedTableStillAnswersItsWaiters(t *testing.T) {
	tabs, b, _ := budgeted(1, 1000)
	tab := tabs[0]
	first, err := tab.Begin(context.Background(), "", "a")
	if err != nil || first.Run == nil {
		t.Fatalf("Begin: %+v, %v; want a turn", first, err)
	}
	waited := make(chan Lookup[string], 1)
	go func() {
		l, _ := tab.Begin(context.Background(), "", "a")
		waited <- l
	}()
	// The waiter is in Begin once the entry exists; Drop may come before
	// or after it starts waiting: either way it gets the outcome.
	tab.Drop()
	first.Run.Finish("done", nil, true)
	if l := <-waited; !l.Replayed || l.Value != "done" {
		t.Fatalf("the waiter got %+v; want the outcome replayed", l)
	}
	if got := b.Bytes(); got != 0 {
		t.Fatalf("a dropped Table's outcome holds %d bytes of the budget; want 0", got)
	}
}

func TestBudgetHoldsUnderConcurrentTables(t *testing.T) {
	const max = 500
	tabs, b, _ := budgeted(4, max)
	var wg sync.WaitGroup
	for i, tab := range tabs {
		for g := range 4 {
			wg.Go(func() {
				for n := range 200 {
					id := fmt.Sprintf("t%d-g%d-%d", i, g, n)
					l, err := tab.Begin(context.Background(), "", id)
					if err != nil || l.Run == nil {
						t.Errorf("Begin(%s): %+v, %v", id, l, err)
						return
					}
					l.Run.Finish(strings.Repeat("x", 10+n%20), nil, true)
				}
			})
		}
	}
	wg.Wait()
	if got := b.Bytes(); got > max {
		t.Fatalf("budget holds %d bytes after every record finished; want at most %d", got, max)
	}
	var sum int64
	for _, tab := range tabs {
		sum += tab.Bytes()
	}
	if sum != b.Bytes() {
		t.Fatalf("the Tables hold %d bytes and the budget counts %d; want them equal", sum, b.Bytes())
	}
}
