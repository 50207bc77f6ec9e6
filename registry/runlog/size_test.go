package runlog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

func chunk(s string) kruntimes.RunLogChunk {
	return kruntimes.RunLogChunk{Stream: kruntimes.RunLogStreamStdout, Data: []byte(s)}
}

// text is the log's kept bytes, with "|" where the marker goes.
func text(l *kruntimes.RunLog) string {
	var b bytes.Buffer
	for i, c := range l.Chunks {
		if i == int(l.DroppedAfter) && l.DroppedBytes > 0 {
			b.WriteString("|")
		}
		b.Write(c.Data)
	}
	if int(l.DroppedAfter) >= len(l.Chunks) && l.DroppedBytes > 0 {
		b.WriteString("|")
	}
	return b.String()
}

func TestShrink(t *testing.T) {
	const o = ChunkOverhead
	for _, tc := range []struct {
		name        string
		log         *kruntimes.RunLog
		limit       int64
		want        string
		wantDropped int64
	}{
		{name: "a log within the limit is kept whole",
			log: &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{chunk("abc"), chunk("def")}}, limit: 2*o + 6, want: "abcdef"},
		{name: "one chunk keeps its first and last bytes",
			log: &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{chunk(strings.Repeat("a", 50) + strings.Repeat("b", 50))}}, limit: 2*o + 4, want: "aa|bb", wantDropped: 96},
		{name: "what the head does not need goes to the tail",
			log: &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{chunk("a"), chunk("0123456789")}, DroppedAfter: 1}, limit: 2*o + 6, want: "a|56789", wantDropped: 5},
		{name: "bytes the Runtime Server dropped stay counted",
			log: &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{chunk("head"), chunk("tail")}, DroppedAfter: 1, DroppedBytes: 100}, limit: 2*o + 4, want: "he|il", wantDropped: 104},
		{name: "whole chunks go before a chunk is cut",
			log: &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{chunk("aa"), chunk("bb"), chunk("cc"), chunk("dd")}}, limit: 2*o + 4, want: "aa|dd", wantDropped: 4},
		{name: "no room at all keeps the marker alone",
			log: &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{chunk("abc")}}, limit: 0, want: "|", wantDropped: 3},
		{name: "a limit below zero (a count past the limit) keeps the marker alone",
			log: &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{chunk("abc")}}, limit: -50, want: "|", wantDropped: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.log.DeepCopy()
			got := shrink(tc.log, tc.limit, kruntimes.RunLogDroppedByNamespaceLimit)
			assert.Equal(t, before, tc.log, "the log handed in is not changed")
			assert.Equal(t, tc.want, text(got))
			assert.LessOrEqual(t, Size(got), max(tc.limit, 0), "within the limit")
			assert.Equal(t, tc.wantDropped, got.DroppedBytes)
			if tc.wantDropped > tc.log.DroppedBytes {
				assert.Equal(t, kruntimes.RunLogDroppedByNamespaceLimit, got.DroppedBy)
			}
		})
	}
}
