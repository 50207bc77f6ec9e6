package dedup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func size(v string, err error) int64 {
	n := int64(len(v))
	if err != nil {
		n += int64(len(err.Error()))
	}
	return n
}

func newTable(window time.Duration, entries int, bytes int64) (*Table[string], *clocktesting.FakePassiveClock) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	return New(Config{Window: window, MaxEntries: entries, MaxBytes: bytes, Clock: clk}, size), clk
}

// do runs fn under id unless it is replayed, recording every outcome.
func do(t *testing.T, tab *Table[string], id string, fn func() (string, error)) (string, error, bool) {
	t.Helper()
	l, err := tab.Begin(context.Background(), "", id)
	if err != nil {
		t.Fatalf("Begin(%q): %v", id, err)
	}
	if l.Replayed {
		return l.Value, l.Err, true
	}
	v, ferr := fn()
	l.Run.Finish(v, ferr, true)
	return v, ferr, false
}

func TestReplaysRecordedOutcome(t *testing.T) {
	tab, _ := newTable(time.Minute, 10, 1<<20)
	runs := 0
	fn := func() (string, error) { runs++; return fmt.Sprintf("out-%d", runs), nil }
	v1, _, r1 := do(t, tab, "a", fn)
	v2, _, r2 := do(t, tab, "a", fn)
	if runs != 1 || r1 || !r2 || v1 != v2 {
		t.Fatalf("runs=%d first replayed=%v second replayed=%v %q vs %q; want one run and an equal replay", runs, r1, r2, v1, v2)
	}
	if _, _, r := do(t, tab, "b", fn); r || runs != 2 {
		t.Fatalf("another ID: replayed=%v runs=%d; want a second run", r, runs)
	}
}

func TestReplaysRecordedError(t *testing.T) {
	tab, _ := newTable(time.Minute, 10, 1<<20)
	boom := errors.New("boom")
	_, err1, _ := do(t, tab, "a", func() (string, error) { return "", boom })
	_, err2, replayed := do(t, tab, "a", func() (string, error) { t.Fatal("ran again"); return "", nil })
	if !replayed || err1 != boom || err2 != boom {
		t.Fatalf("replayed=%v errors %v, %v; want the recorded error replayed", replayed, err1, err2)
	}
}

func TestUnrecordedOutcomeLetsARepeatRun(t *testing.T) {
	tab, _ := newTable(time.Minute, 10, 1<<20)
	l, _ := tab.Begin(context.Background(), "", "a")
	l.Run.Finish("", errors.New("not started"), false)
	if tab.Len() != 0 {
		t.Fatalf("Len = %d after an unrecorded outcome; want 0", tab.Len())
	}
	l, _ = tab.Begin(context.Background(), "", "a")
	if l.Replayed || l.Run == nil {
		t.Fatalf("repeat after an unrecorded outcome: %+v; want a turn to run", l)
	}
	l.Run.Finish("ok", nil, true)
}

func TestExpiresAfterWindow(t *testing.T) {
	tab, clk := newTable(time.Minute, 10, 1<<20)
	runs := 0
	fn := func() (string, error) { runs++; return "x", nil }
	do(t, tab, "a", fn)
	clk.SetTime(clk.Now().Add(time.Minute - time.Nanosecond))
	if _, _, r := do(t, tab, "a", fn); !r {
		t.Fatal("not replayed just inside the window")
	}
	clk.SetTime(clk.Now().Add(time.Nanosecond))
	if _, _, r := do(t, tab, "a", fn); r || runs != 2 {
		t.Fatalf("at the window's end: replayed=%v runs=%d; want a second run", r, runs)
	}
	if tab.Len() != 1 {
		t.Fatalf("Len = %d; want only the new outcome", tab.Len())
	}
}

func TestEvictsOldestByEntries(t *testing.T) {
	tab, clk := newTable(time.Hour, 3, 1<<20)
	for i := range 4 {
		do(t, tab, fmt.Sprint(i), func() (string, error) { return "v", nil })
		clk.SetTime(clk.Now().Add(time.Second))
	}
	if tab.Len() != 3 {
		t.Fatalf("Len = %d; want 3", tab.Len())
	}
	if _, _, r := do(t, tab, "0", func() (string, error) { return "again", nil }); r {
		t.Fatal("the oldest outcome was replayed; want it evicted")
	}
	// Recording 0 again evicted 1, the oldest left.
	if _, _, r := do(t, tab, "1", func() (string, error) { return "again", nil }); r {
		t.Fatal("1 was replayed; want it evicted")
	}
	if _, _, r := do(t, tab, "0", func() (string, error) { return "", nil }); !r {
		t.Fatal("0 was not replayed; want the newest kept")
	}
}

func TestEvictsOldestByBytes(t *testing.T) {
	tab, _ := newTable(time.Hour, 100, 10)
	do(t, tab, "a", func() (string, error) { return "aaaa", nil })
	do(t, tab, "b", func() (string, error) { return "bbbb", nil })
	if tab.Bytes() != 8 || tab.Len() != 2 {
		t.Fatalf("bytes=%d len=%d; want 8 and 2", tab.Bytes(), tab.Len())
	}
	do(t, tab, "c", func() (string, error) { return "cccc", nil })
	if tab.Bytes() != 8 || tab.Len() != 2 {
		t.Fatalf("bytes=%d len=%d after a third; want 8 and 2", tab.Bytes(), tab.Len())
	}
	if _, _, r := do(t, tab, "b", func() (string, error) { return "", nil }); !r {
		t.Fatal("b not replayed")
	}
}

func TestKeepsOneOversizeOutcomeAlone(t *testing.T) {
	tab, _ := newTable(time.Hour, 100, 10)
	do(t, tab, "a", func() (string, error) { return "aaaa", nil })
	do(t, tab, "big", func() (string, error) { return "0123456789abcdef", nil })
	if tab.Len() != 1 || tab.Bytes() != 16 {
		t.Fatalf("len=%d bytes=%d; want the oversize outcome alone", tab.Len(), tab.Bytes())
	}
	if v, _, r := do(t, tab, "big", func() (string, error) { return "", nil }); !r || v != "0123456789abcdef" {
		t.Fatalf("oversize outcome: replayed=%v %q", r, v)
	}
	do(t, tab, "b", func() (string, error) { return "b", nil })
	if tab.Len() != 1 || tab.Bytes() != 1 {
		t.Fatalf("len=%d bytes=%d; want the oversize outcome evicted by the next", tab.Len(), tab.Bytes())
	}
}

func TestWaiterGetsTheOutcomeInFlight(t *testing.T) {
	tab, _ := newTable(time.Minute, 10, 1<<20)
	first, _ := tab.Begin(context.Background(), "", "a")
	got := make(chan Lookup[string], 1)
	go func() {
		l, err := tab.Begin(context.Background(), "", "a")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case l := <-got:
		t.Fatalf("the repeat did not wait for the invocation in flight: %+v", l)
	case <-time.After(50 * time.Millisecond):
	}
	first.Run.Finish("first", nil, true)
	l := <-got
	if !l.Replayed || l.Value != "first" {
		t.Fatalf("waiter got %+v; want the first outcome replayed", l)
	}
}

func TestWaiterRunsWhenTheFirstIsNotRecorded(t *testing.T) {
	tab, _ := newTable(time.Minute, 10, 1<<20)
	first, _ := tab.Begin(context.Background(), "", "a")
	got := make(chan Lookup[string], 1)
	go func() {
		l, _ := tab.Begin(context.Background(), "", "a")
		got <- l
	}()
	first.Run.Finish("", errors.New("refused"), false)
	l := <-got
	if l.Replayed || l.Run == nil {
		t.Fatalf("waiter got %+v; want its own turn", l)
	}
	l.Run.Finish("second", nil, true)
}

func TestWaiterGivesUp(t *testing.T) {
	tab, _ := newTable(time.Minute, 10, 1<<20)
	first, _ := tab.Begin(context.Background(), "", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if l, err := tab.Begin(ctx, "", "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Begin = %+v, %v; want the context's error", l, err)
	}
	first.Run.Finish("first", nil, true)
	if l, _ := tab.Begin(context.Background(), "", "a"); !l.Replayed || l.Value != "first" {
		t.Fatalf("after the waiter gave up: %+v; want the first outcome", l)
	}
}

func TestConcurrentRepeatsRunEachIDOnce(t *testing.T) {
	tab, _ := newTable(time.Minute, 1000, 1<<20)
	var runs [8]atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 8 {
				id := fmt.Sprint((i + g) % 8)
				l, err := tab.Begin(context.Background(), "", id)
				if err != nil {
					t.Error(err)
					return
				}
				if l.Replayed {
					if l.Value != "v"+id {
						t.Errorf("id %s replayed %q", id, l.Value)
					}
					continue
				}
				runs[(i+g)%8].Add(1)
				time.Sleep(time.Millisecond) // let repeats arrive while in flight
				l.Run.Finish("v"+id, nil, true)
			}
		})
	}
	wg.Wait()
	for i := range runs {
		if n := runs[i].Load(); n != 1 {
			t.Errorf("id %d ran %d times; want once", i, n)
		}
	}
}
