package runlog

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAll reads r from off on as a follower does, batch by batch.
func readAll(t *testing.T, r *Recorder, off int64, batch int) (data []byte, skipped int64) {
	for {
		chunks, start, skip, written, ok := r.Read(off, batch)
		require.True(t, ok)
		require.Equal(t, off+skip, start)
		skipped += skip
		off = start
		for _, c := range chunks {
			data = append(data, c.Data...)
			off += int64(len(c.Data))
		}
		if off == written {
			return data, skipped
		}
		require.NotEmpty(t, chunks, "a read before the end returns bytes")
	}
}

// fromAll reads a kept log from off on as runs/log's fallback does.
func fromAll(l Log, off int64) (data []byte, skipped int64) {
	for off < l.Written() {
		chunks, start, skip := l.From(off)
		skipped += skip
		off = start
		for _, c := range chunks {
			data = append(data, c.Data...)
			off += int64(len(c.Data))
		}
	}
	return data, skipped
}

func TestReadFromAnOffset(t *testing.T) {
	for _, bound := range []int{1 << 20, 200} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			r := NewRecorder(bound, nil)
			var all []byte
			for i := 0; i < 60; i++ {
				p := []byte(fmt.Sprintf("write %d\n", i))
				s := StreamStdout
				if i%3 == 0 {
					s = StreamStderr
				}
				_, _ = r.Writer(s).Write(p)
				all = append(all, p...)
			}
			require.Equal(t, int64(len(all)), r.Written())
			l := r.Log()
			require.Equal(t, int64(len(all)), l.Written())
			for off := int64(0); off <= int64(len(all)); off++ {
				for _, batch := range []int{1, 7, 1 << 16} {
					data, skipped := readAll(t, r, off, batch)
					kept, keptSkipped := fromAll(l, off)
					require.Equal(t, string(kept), string(data), "offset %d batch %d", off, batch)
					require.Equal(t, keptSkipped, skipped)
					require.Equal(t, int64(len(all))-off, int64(len(data))+skipped, "every byte from the offset is read or counted as skipped")
					if bound == 1<<20 {
						require.Equal(t, string(all[off:]), string(data))
					}
				}
			}
			_, _, _, _, ok := r.Read(int64(len(all))+1, 10)
			assert.False(t, ok, "an offset past what was written")
		})
	}
}

func TestChangedIsClosedByTheNextWrite(t *testing.T) {
	r := NewRecorder(0, nil)
	c := r.Changed()
	assert.Equal(t, c, r.Changed(), "one channel until the next write")
	select {
	case <-c:
		t.Fatal("closed before any write")
	default:
	}
	_, _ = r.Writer(StreamStdout).Write([]byte("x"))
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("a write did not close Changed")
	}
}

func TestLiveWriterRendersAsRender(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	l := Log{Chunks: []Chunk{
		{Stream: StreamStdout, Time: t0, Data: []byte("a\nb")},
		{Stream: StreamStderr, Time: t0.Add(time.Second), Data: []byte("c\n")},
		{Stream: StreamStdout, Time: t0.Add(2 * time.Second), Data: []byte("d\n\xff\x00")},
	}, DroppedBytes: 42, DroppedAfter: 1}
	for _, opts := range []RenderOptions{{}, {Timestamps: true}, {Stream: StreamStdout, Timestamps: true}, {Stream: StreamStderr}} {
		var out bytes.Buffer
		w := NewLiveWriter(&out, opts)
		for i, c := range l.Chunks {
			if i == l.DroppedAfter {
				require.NoError(t, w.Skipped(l.DroppedBytes, c.Time))
			}
			require.NoError(t, w.Chunk(c))
		}
		assert.Equal(t, string(Render(l, opts)), out.String(), "%+v", opts)
	}
}
