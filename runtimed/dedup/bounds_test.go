package dedup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestMaxWaitersRefusesOneMore(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	tab := New(Config{Window: time.Minute, MaxEntries: 10, MaxBytes: 1 << 20, Clock: clk, MaxWaiters: 2}, size)
	first, err := tab.Find("", "a")
	if err != nil || first.Run == nil {
		t.Fatalf("Find: %+v, %v; want a turn", first, err)
	}
	var waiting []*Waiter[string]
	for range 2 {
		l, err := tab.Find("", "a")
		if err != nil || l.Wait == nil {
			t.Fatalf("Find: %+v, %v; want a place among the waiters", l, err)
		}
		waiting = append(waiting, l.Wait)
	}
	if _, err := tab.Find("", "a"); !errors.Is(err, ErrTooManyWaiters) {
		t.Fatalf("a third waiter: %v; want ErrTooManyWaiters", err)
	}
	// One that gives up makes room for another.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := waiting[0].Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: %v; want the context's error", err)
	}
	l, err := tab.Find("", "a")
	if err != nil || l.Wait == nil {
		t.Fatalf("after a waiter left: %+v, %v; want a place", l, err)
	}
	waiting[0] = l.Wait
	first.Run.Finish("done", nil, true)
	for _, w := range waiting {
		if out, err := w.Wait(context.Background()); err != nil || !out.Recorded || out.Value != "done" {
			t.Fatalf("a waiter got %+v, %v; want the recorded outcome", out, err)
		}
	}
}

func TestWaiterIsToldOfAnUnrecordedRefusal(t *testing.T) {
	tab, _ := newTable(time.Minute, 10, 1<<20)
	first, _ := tab.Find("", "a")
	l, _ := tab.Find("", "a")
	refused := errors.New("busy")
	first.Run.Finish("", refused, false)
	out, err := l.Wait.Wait(context.Background())
	if err != nil || out.Recorded || out.Err != refused {
		t.Fatalf("the waiter got %+v, %v; want the refusal, not recorded", out, err)
	}
}

func tombstoned(tab *Table[string], id string) bool {
	_, err := tab.Find("", id)
	return errors.Is(err, ErrEvicted)
}

func TestEvictedOutcomeLeavesATombstone(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ts := NewTombstones(10)
	tab := New(Config{Window: time.Minute, MaxEntries: 1, MaxBytes: 1 << 20, Clock: clk, Tombstones: ts}, size)
	record(t, tab, "a", "1")
	record(t, tab, "b", "2")
	if !tombstoned(tab, "a") {
		t.Fatal("a, evicted for b within its window, is not answered ErrEvicted")
	}
	if !replays(tab, "b") {
		t.Fatal("b is not replayed")
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if tombstoned(tab, "a") {
		t.Fatal("a's tombstone outlived the window its outcome had")
	}
	// b expired rather than being evicted: it runs again, as before.
	record(t, tab, "b", "3")
	if ts.Len() != 1 {
		t.Fatalf("%d tombstones; want only a's, none for an outcome that expired", ts.Len())
	}
	tab.Drop()
	if tombstoned(tab, "b") || ts.Len() != 1 {
		t.Fatal("a dropped Table left tombstones; its registration's guarantee ended with it")
	}
}

func TestBudgetEvictionLeavesATombstoneInItsOwnTable(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	b, ts := NewBudget(15), NewTombstones(10)
	var tabs [2]*Table[string]
	for i := range tabs {
		tabs[i] = New(Config{Window: time.Minute, MaxEntries: 100, MaxBytes: 1 << 20, Clock: clk, Budget: b, Tombstones: ts}, size)
	}
	record(t, tabs[0], "x", strings.Repeat("x", 10))
	record(t, tabs[1], "y", strings.Repeat("y", 10))
	if !tombstoned(tabs[0], "x") {
		t.Fatal("x, evicted by another Table's outcome, is not answered ErrEvicted")
	}
	if tombstoned(tabs[1], "x") {
		t.Fatal("another Table's tombstone matched the same ID")
	}
}

func TestTombstonesAreBounded(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	ts := NewTombstones(2)
	tab := New(Config{Window: time.Minute, MaxEntries: 1, MaxBytes: 1 << 20, Clock: clk, Tombstones: ts}, size)
	for _, id := range []string{"a", "b", "c", "d"} {
		record(t, tab, id, "v")
	}
	if ts.Len() != 2 {
		t.Fatalf("%d tombstones; want at most 2", ts.Len())
	}
	if tombstoned(tab, "a") || !tombstoned(tab, "b") || !tombstoned(tab, "c") {
		t.Fatal("want the oldest tombstone gone and the two newest kept")
	}
}

// recordAs runs and records id for caller, with value as its outcome.
func recordAs(t *testing.T, tab *Table[string], caller, id, value string) {
	t.Helper()
	l, err := tab.Find(caller, id)
	if err != nil || l.Run == nil {
		t.Fatalf("Find(%q, %q): %+v, %v; want a turn", caller, id, l, err)
	}
	l.Run.Finish(value, nil, true)
}

func TestAFloodingCallerEvictsItsOwnOutcomes(t *testing.T) {
	t.Run("over MaxEntries", func(t *testing.T) {
		tab, _ := newTable(time.Minute, 10, 1<<20)
		recordAs(t, tab, "alice", "a1", "x")
		recordAs(t, tab, "alice", "a2", "x")
		for i := range 100 {
			recordAs(t, tab, "mallory", "m"+strings.Repeat("x", i), "x")
		}
		for _, id := range []string{"a1", "a2"} {
			if l, err := tab.Find("alice", id); err != nil || !l.Replayed {
				t.Errorf("alice's %s after mallory's flood: %+v, %v; want it replayed", id, l, err)
			}
		}
		if n := tab.Len(); n != 10 {
			t.Errorf("Len = %d; want the bound, 10", n)
		}
		if l, err := tab.Find("mallory", "m"); err != nil || l.Run == nil {
			t.Errorf("mallory's oldest: %+v, %v; want it evicted (a new turn, without tombstones)", l, err)
		}
	})
	t.Run("over MaxBytes", func(t *testing.T) {
		tab, _ := newTable(time.Minute, 1000, 100)
		recordAs(t, tab, "alice", "a", strings.Repeat("a", 20))
		for i := range 50 {
			recordAs(t, tab, "mallory", "m"+strings.Repeat("x", i), strings.Repeat("m", 30))
		}
		if l, err := tab.Find("alice", "a"); err != nil || !l.Replayed {
			t.Errorf("alice's outcome after mallory's flood: %+v, %v; want it replayed", l, err)
		}
		if b := tab.Bytes(); b > 100 {
			t.Errorf("Bytes = %d; want at most 100", b)
		}
	})
	t.Run("the same ID of two callers is two invocations", func(t *testing.T) {
		tab, _ := newTable(time.Minute, 10, 1<<20)
		recordAs(t, tab, "alice", "same", "alice's")
		l, err := tab.Find("bob", "same")
		if err != nil || l.Run == nil {
			t.Fatalf("bob's %q: %+v, %v; want his own turn", "same", l, err)
		}
		l.Run.Finish("bob's", nil, true)
	})
}
