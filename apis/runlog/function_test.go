package runlog

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLiveWriterForFunction pins how a function's log reads: every line
// prefixed with its invocation, before its timestamp; a line left unended
// ended before another source's bytes; skipped bytes told.
func TestLiveWriterForFunction(t *testing.T) {
	at := time.Date(2026, 12, 2, 4, 0, 0, 5, time.UTC)
	chunks := []Chunk{
		{Stream: StreamStdout, Invocation: "a", Time: at, Data: []byte("one\ntwo")},
		{Stream: StreamStdout, Invocation: "a", Time: at, Data: []byte(" more\n")},
		{Stream: StreamStderr, Invocation: "a", Time: at, Data: []byte("err")},
		{Stream: StreamStdout, Invocation: "b", Time: at, Data: []byte("\xff\x00\n")},
		{Stream: StreamStdout, Time: at, Data: []byte("between\n")},
	}
	for _, tc := range []struct {
		name string
		opts RenderOptions
		want string
	}{
		{name: "both streams", want: "[invocation/a] one\n[invocation/a] two more\n[invocation/a] err\n[invocation/b] \xff\x00\nbetween\n" + FunctionMarker(7)},
		{name: "stdout only", opts: RenderOptions{Stream: StreamStdout}, want: "[invocation/a] one\n[invocation/a] two more\n[invocation/b] \xff\x00\nbetween\n" + FunctionMarker(7)},
		{name: "timestamps after the prefix, as kubectl logs --prefix --timestamps", opts: RenderOptions{Stream: StreamStderr, Timestamps: true},
			want: "[invocation/a] 2026-12-02T04:00:00.000000005Z err\n2026-12-02T04:00:00.000000005Z " + FunctionMarker(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			l := NewLiveWriter(&out, tc.opts)
			l.ForFunction(FunctionMarker)
			for _, c := range chunks {
				require.NoError(t, l.Chunk(c))
			}
			require.NoError(t, l.Skipped(7, at))
			assert.Equal(t, tc.want, out.String())
		})
	}
}

// TestTailRecorder: a function's log keeps only its last bytes, with each
// chunk's invocation.
func TestTailRecorder(t *testing.T) {
	r := NewTailRecorder(64, nil)
	r.WriteInvocation(StreamStdout, "a", bytes.Repeat([]byte("x"), 40))
	r.WriteInvocation(StreamStderr, "b", []byte("tail"))
	chunks, start, skipped, written, ok := r.Read(0, 1<<10)
	require.True(t, ok)
	assert.Equal(t, int64(44), written)
	assert.Equal(t, skipped, start)
	var kept int
	for _, c := range chunks {
		kept += len(c.Data)
	}
	assert.LessOrEqual(t, kept, 64-2*chunkOverhead)
	assert.Equal(t, Chunk{Stream: StreamStderr, Invocation: "b", Time: chunks[len(chunks)-1].Time, Data: []byte("tail")}, chunks[len(chunks)-1])
	assert.Equal(t, "a", chunks[0].Invocation)
}
