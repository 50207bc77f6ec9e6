package runlog

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTailBufferKeepsTheLastLines: written in pieces of any size, a
// TailBuffer holds what Render's TailLines keeps of the whole.
func TestTailBufferKeepsTheLastLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var whole bytes.Buffer
		for range rng.IntN(40) {
			whole.WriteString(strings.Repeat("x", rng.IntN(5)))
			if rng.IntN(3) > 0 {
				whole.WriteByte('\n')
			}
		}
		n := int64(rng.IntN(6))
		tb := NewTailBuffer(n, 1<<20)
		for b := whole.Bytes(); len(b) > 0; {
			k := min(len(b), 1+rng.IntN(7))
			_, _ = tb.Write(b[:k])
			b = b[k:]
		}
		want := Render(Log{Chunks: []Chunk{{Stream: StreamStdout, Data: whole.Bytes()}}}, RenderOptions{TailLines: &n})
		require.Equal(t, string(want), string(tb.Bytes()), "last %d lines of %q", n, whole.String())
	}
}

// TestTailBufferIsBounded: a program that prints faster than a follow
// catches up writes far more than the bound; the buffer holds the last
// lines and never more than maxBytes of them.
func TestTailBufferIsBounded(t *testing.T) {
	const maxBytes = 64 << 10
	line := []byte(strings.Repeat("y\n", 4096))
	one := NewTailBuffer(1, maxBytes)
	many := NewTailBuffer(1<<30, maxBytes)
	for range (64 << 20) / len(line) {
		_, _ = one.Write(line)
		_, _ = many.Write(line)
	}
	assert.Equal(t, "y\n", string(one.Bytes()))
	assert.LessOrEqual(t, one.Retained(), 2*len(line), "tailLines=1 holds about a line")
	assert.LessOrEqual(t, len(many.Bytes()), maxBytes)
	assert.LessOrEqual(t, many.Retained(), 2*maxBytes+len(line), "bytes held past 64 MiB written")
	assert.True(t, bytes.HasPrefix(many.Bytes(), []byte("y\n")), "the oldest kept line is whole")

	// One line longer than the bound keeps its last maxBytes.
	long := NewTailBuffer(3, 8)
	_, _ = long.Write([]byte("0123456789abcdef"))
	assert.Equal(t, "89abcdef", string(long.Bytes()))
}

// maxWriter records the largest write it saw.
type maxWriter struct{ largest, total int }

func (m *maxWriter) Write(p []byte) (int, error) {
	m.largest = max(m.largest, len(p))
	m.total += len(p)
	return len(p), nil
}

// TestRenderToStreams: a kept log with timestamps is written as it is
// rendered, a chunk at a time, never whole.
func TestRenderToStreams(t *testing.T) {
	var l Log
	for range 3 << 10 {
		l.Chunks = append(l.Chunks, Chunk{Stream: StreamStdout, Data: bytes.Repeat([]byte("y\n"), 512)})
	}
	tail := int64(1 << 20)
	for _, opts := range []RenderOptions{{Timestamps: true}, {Timestamps: true, TailLines: &tail}} {
		var w maxWriter
		require.NoError(t, RenderTo(&w, l, opts))
		assert.Greater(t, w.total, 20<<20, "3 MiB of y with timestamps: 8 times as much")
		assert.LessOrEqual(t, w.largest, 64<<10, "bytes in one write: the render is streamed, not held")
	}
}
