package runlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"kruntimes.io/kruntimes/apis/kruntimes"
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

// LimitMarker is the marker line of a log the server cut, by the limit
// by names (kruntimes.RunLogDroppedBy*): it says why bytes are missing.
func LimitMarker(by string) func(dropped int64) string {
	var why string
	switch by {
	case kruntimes.RunLogDroppedByNamespaceLimit:
		why = "its namespace held its limit of kept-log bytes"
	case kruntimes.RunLogDroppedByRecordLimit:
		why = "the storage backend keeps logs of a bounded size"
	default:
		return Marker
	}
	return func(dropped int64) string {
		return fmt.Sprintf("[kruntimes: %d bytes of this log were dropped here (%s); the first and the last bytes are kept]\n", dropped, why)
	}
}

// FunctionMarker is the line that stands for bytes of a function's log a
// follower skipped: it fell behind the bounded tail the Runtime Server
// keeps, or followed again after they left it.
func FunctionMarker(skipped int64) string {
	return fmt.Sprintf("[kruntimes: %d bytes of this function's log were skipped here; this follow fell behind]\n", skipped)
}

// Render returns the kept log as runs/log serves it: the bytes exactly as
// the program wrote them, plus the marker line where bytes were dropped.
func Render(l Log, opts RenderOptions) []byte {
	var out bytes.Buffer
	_ = RenderTo(&out, l, opts)
	return out.Bytes()
}

// RenderTo writes what Render returns to w as it renders it, holding no
// more than a chunk of it: a kept log with timestamps is far larger than
// the log. TailLines costs a first pass that counts the lines.
func RenderTo(w io.Writer, l Log, opts RenderOptions) error {
	limit := &LimitWriter{W: w, Left: -1}
	if opts.LimitBytes != nil {
		limit.Left = max(*opts.LimitBytes, 0)
		if limit.Left == 0 {
			return nil
		}
	}
	out := io.Writer(limit)
	if opts.TailLines != nil {
		var count lineCounter
		_ = render(&count, l, opts)
		out = &lineSkipper{w: limit, skip: max(count.lines()-max(*opts.TailLines, 0), 0)}
		if *opts.TailLines <= 0 {
			return nil
		}
	}
	if err := render(out, l, opts); err != nil && !errors.Is(err, ErrLimit) {
		return err
	}
	return nil
}

// render writes l as LiveWriter writes it live: the marker where bytes
// were dropped, stamped with the time of the first tail chunk.
func render(w io.Writer, l Log, opts RenderOptions) error {
	lw := NewLiveWriter(w, RenderOptions{Stream: opts.Stream, Timestamps: opts.Timestamps})
	lw.marker = LimitMarker(l.DroppedBy)
	marker := func() error {
		var t time.Time
		if l.DroppedAfter < len(l.Chunks) {
			t = l.Chunks[l.DroppedAfter].Time
		} else if n := len(l.Chunks); n > 0 {
			t = l.Chunks[n-1].Time
		}
		return lw.Skipped(l.DroppedBytes, t)
	}
	for i, c := range l.Chunks {
		if i == l.DroppedAfter {
			if err := marker(); err != nil {
				return err
			}
		}
		if err := lw.Chunk(c); err != nil {
			return err
		}
	}
	if l.DroppedAfter >= len(l.Chunks) {
		return marker()
	}
	return nil
}
