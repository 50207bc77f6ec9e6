package runlog

import (
	"bytes"
	"fmt"
	"time"
)

// RenderOptions choose what Render writes; they mirror runs/log's query.
type RenderOptions struct {
	// Stream selects one stream; both, interleaved in write order, when
	// empty or StreamAll.
	Stream Stream
	// Timestamps prefixes every line with the time of the write that began
	// it (RFC 3339 with nanoseconds, then a space), as kubectl logs does.
	Timestamps bool
	// TailLines, when set, keeps only the last lines.
	TailLines *int64
	// LimitBytes, when set, cuts the result after that many bytes.
	LimitBytes *int64
}

// Marker is the line that stands for dropped bytes between a log's head and
// its tail.
func Marker(dropped int64) string {
	return fmt.Sprintf("[kruntimes: %d bytes of this log were dropped here; the first and the last bytes are kept]\n", dropped)
}

// FunctionMarker is the line that stands for bytes of a function's log a
// follower skipped: it fell behind the bounded tail the Runtime Server
// keeps, or followed again after they left it.
func FunctionMarker(skipped int64) string {
	return fmt.Sprintf("[kruntimes: %d bytes of this function's log were skipped here; this follow fell behind]\n", skipped)
}

// Render writes the kept log as runs/log serves it: the bytes exactly as the
// program wrote them, plus the marker line where bytes were dropped.
func Render(l Log, opts RenderOptions) []byte {
	var out bytes.Buffer
	lineStart := true
	write := func(t time.Time, data []byte) {
		if !opts.Timestamps {
			out.Write(data)
			if len(data) > 0 {
				lineStart = data[len(data)-1] == '\n'
			}
			return
		}
		stamp := t.UTC().Format(time.RFC3339Nano) + " "
		for len(data) > 0 {
			if lineStart {
				out.WriteString(stamp)
			}
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				out.Write(data)
				lineStart = false
				return
			}
			out.Write(data[:i+1])
			data = data[i+1:]
			lineStart = true
		}
	}
	for i, c := range l.Chunks {
		if i == l.DroppedAfter && l.DroppedBytes > 0 {
			writeMarker(&out, &lineStart, l, write)
		}
		if opts.Stream == "" || opts.Stream == StreamAll || opts.Stream == c.Stream {
			write(c.Time, c.Data)
		}
	}
	if l.DroppedAfter >= len(l.Chunks) && l.DroppedBytes > 0 {
		writeMarker(&out, &lineStart, l, write)
	}
	b := out.Bytes()
	if opts.TailLines != nil {
		b = lastLines(b, *opts.TailLines)
	}
	if opts.LimitBytes != nil && int64(len(b)) > *opts.LimitBytes {
		b = b[:max(*opts.LimitBytes, 0)]
	}
	return b
}

func writeMarker(out *bytes.Buffer, lineStart *bool, l Log, write func(time.Time, []byte)) {
	if !*lineStart {
		out.WriteByte('\n')
		*lineStart = true
	}
	var t time.Time
	if l.DroppedAfter < len(l.Chunks) {
		t = l.Chunks[l.DroppedAfter].Time
	} else if n := len(l.Chunks); n > 0 {
		t = l.Chunks[n-1].Time
	}
	write(t, []byte(Marker(l.DroppedBytes)))
}

// lastLines returns the last n lines of b; a last line without a newline
// counts as a line.
func lastLines(b []byte, n int64) []byte {
	if n <= 0 {
		return b[:0]
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
