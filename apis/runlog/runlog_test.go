package runlog

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func steppingClock() func() time.Time {
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

func TestRecorderKeepsBothStreamsInWriteOrder(t *testing.T) {
	r := NewRecorder(1<<20, steppingClock())
	fmt.Fprint(r.Writer(StreamStdout), "out 1\n")
	fmt.Fprint(r.Writer(StreamStderr), "err \xff\x00\x1b[31m\n")
	fmt.Fprint(r.Writer(StreamStdout), "out 2\n")
	l := r.Log()
	assert.Zero(t, l.DroppedBytes)
	require.Len(t, l.Chunks, 3)
	assert.Equal(t, []Stream{StreamStdout, StreamStderr, StreamStdout}, []Stream{l.Chunks[0].Stream, l.Chunks[1].Stream, l.Chunks[2].Stream})
	assert.True(t, l.Chunks[0].Time.Before(l.Chunks[1].Time))
	assert.Equal(t, "out 1\nerr \xff\x00\x1b[31m\nout 2\n", string(Render(l, RenderOptions{})))
	assert.Equal(t, "out 1\nout 2\n", string(Render(l, RenderOptions{Stream: StreamStdout})))
	assert.Equal(t, "err \xff\x00\x1b[31m\n", string(Render(l, RenderOptions{Stream: StreamStderr})))
}

func TestRecorderBoundsHeadAndTailAndCountsDroppedBytes(t *testing.T) {
	cases := []struct {
		name   string
		writes []int // sizes of successive stdout writes
	}{
		{"many small writes", repeat(1000, 100)},
		{"one huge write", []int{1 << 20}},
		{"huge write after small ones", append(repeat(50, 10), 500_000)},
		{"one-byte writes", repeat(20_000, 1)},
	}
	const limit = 8 << 10
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorder(limit, steppingClock())
			var all bytes.Buffer
			n := 0
			for _, size := range tc.writes {
				p := make([]byte, size)
				for i := range p {
					p[i] = byte('a' + n%26)
					n++
				}
				all.Write(p)
				_, err := r.Writer(StreamStdout).Write(p)
				require.NoError(t, err)
			}
			l := r.Log()
			kept := 0
			cost := 0
			for _, c := range l.Chunks {
				kept += len(c.Data)
				cost += len(c.Data) + chunkOverhead
			}
			assert.LessOrEqual(t, cost, limit, "the kept log stays within the bound, framing included")
			assert.Equal(t, int64(all.Len()), int64(kept)+l.DroppedBytes, "every byte is kept or counted as dropped")
			require.Positive(t, l.DroppedBytes)
			var head, tail []byte
			for i, c := range l.Chunks {
				if i < l.DroppedAfter {
					head = append(head, c.Data...)
				} else {
					tail = append(tail, c.Data...)
				}
			}
			assert.True(t, bytes.HasPrefix(all.Bytes(), head), "the head is what came first")
			assert.True(t, bytes.HasSuffix(all.Bytes(), tail), "the tail is what came last")
			out := string(Render(l, RenderOptions{}))
			assert.Contains(t, out, Marker(l.DroppedBytes))
		})
	}
}

func repeat(n, size int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = size
	}
	return s
}

func TestRecorderIsSafeForConcurrentWriters(t *testing.T) {
	r := NewRecorder(4<<10, nil)
	var wg sync.WaitGroup
	for _, s := range []Stream{StreamStdout, StreamStderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				fmt.Fprintln(r.Writer(s), "a line of output")
			}
		}()
	}
	wg.Wait()
	l := r.Log()
	kept := int64(0)
	for _, c := range l.Chunks {
		kept += int64(len(c.Data))
	}
	assert.Equal(t, int64(2*1000*len("a line of output\n")), kept+l.DroppedBytes)
}

func TestRenderOptions(t *testing.T) {
	r := NewRecorder(0, steppingClock())
	fmt.Fprint(r.Writer(StreamStdout), "one\ntw")
	fmt.Fprint(r.Writer(StreamStderr), "o\nthree\n")
	fmt.Fprint(r.Writer(StreamStdout), "four")
	l := r.Log()
	ptr := func(n int64) *int64 { return &n }
	cases := []struct {
		name string
		opts RenderOptions
		want string
	}{
		{"everything", RenderOptions{}, "one\ntwo\nthree\nfour"},
		{"last two lines, the last without a newline", RenderOptions{TailLines: ptr(2)}, "three\nfour"},
		{"more lines than there are", RenderOptions{TailLines: ptr(10)}, "one\ntwo\nthree\nfour"},
		{"no lines", RenderOptions{TailLines: ptr(0)}, ""},
		{"first bytes", RenderOptions{LimitBytes: ptr(5)}, "one\nt"},
		{"tail, then limit", RenderOptions{TailLines: ptr(2), LimitBytes: ptr(3)}, "thr"},
		{"timestamps at each line's first write", RenderOptions{Timestamps: true},
			"2026-01-02T03:04:05.001Z one\n2026-01-02T03:04:05.001Z two\n2026-01-02T03:04:05.002Z three\n2026-01-02T03:04:05.003Z four"},
		{"stderr only", RenderOptions{Stream: StreamStderr}, "o\nthree\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, string(Render(l, tc.opts)))
		})
	}
}

func TestRenderPutsTheMarkerOnItsOwnLine(t *testing.T) {
	r := NewRecorder(200, steppingClock())
	fmt.Fprint(r.Writer(StreamStdout), strings.Repeat("x", 1000))
	out := string(Render(r.Log(), RenderOptions{}))
	assert.Contains(t, out, "x\n"+Marker(r.Log().DroppedBytes)+"x")
}

func BenchmarkRecorderWrite80Bytes(b *testing.B) {
	r := NewRecorder(DefaultMaxBytes, nil)
	w := r.Writer(StreamStdout)
	line := []byte(strings.Repeat("l", 79) + "\n")
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		_, _ = w.Write(line)
	}
}

func BenchmarkRender1MiB(b *testing.B) {
	r := NewRecorder(DefaultMaxBytes, nil)
	line := []byte(strings.Repeat("l", 79) + "\n")
	for range 20_000 {
		_, _ = r.Writer(StreamStdout).Write(line)
	}
	l := r.Log()
	for b.Loop() {
		_ = Render(l, RenderOptions{Timestamps: true})
	}
}
