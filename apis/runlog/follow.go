package runlog

import (
	"bytes"
	"io"
	"time"
)

// LiveWriter renders a followed log chunk by chunk as Render renders a
// kept one: the selected stream, each line's timestamp, a marker line where
// bytes were skipped. TailLines and LimitBytes are the caller's: they cut
// what LiveWriter writes.
type LiveWriter struct {
	w          io.Writer
	stream     Stream
	timestamps bool
	lineStart  bool

	// invocations, set by ForFunction, prefixes lines with invocation IDs;
	// last is the invocation and stream of the previous chunk written.
	invocations bool
	marker      func(int64) string
	last        Chunk
}

// NewLiveWriter writes to w what opts select (opts.TailLines and
// opts.LimitBytes aside).
func NewLiveWriter(w io.Writer, opts RenderOptions) *LiveWriter {
	return &LiveWriter{w: w, stream: opts.Stream, timestamps: opts.Timestamps, lineStart: true, marker: Marker}
}

// InvocationPrefix is what begins each line an invocation wrote in a
// function's log, as kubectl logs --prefix begins each line with its
// source: "[invocation/ID] ".
func InvocationPrefix(invocation string) string {
	return "[invocation/" + invocation + "] "
}

// ForFunction makes l render a function's log: each line begins with
// InvocationPrefix of the invocation that wrote it (before its timestamp,
// as kubectl logs --prefix --timestamps writes them); a line left unended
// is ended before another invocation's, or another stream's, bytes, so
// every line has one source; and skipped bytes are told with marker.
func (l *LiveWriter) ForFunction(marker func(int64) string) {
	l.invocations, l.marker = true, marker
}

// SetWriter sends what follows to w.
func (l *LiveWriter) SetWriter(w io.Writer) { l.w = w }

// Rewritten says that what l wrote was replaced by b (the last lines of
// it, as tailLines keeps them): the next byte starts a line when b is
// empty or ends with one.
func (l *LiveWriter) Rewritten(b []byte) {
	l.lineStart = len(b) == 0 || b[len(b)-1] == '\n'
}

// Chunk writes one chunk, if its stream is selected.
func (l *LiveWriter) Chunk(c Chunk) error {
	if l.stream != "" && l.stream != StreamAll && l.stream != c.Stream {
		return nil
	}
	prefix := ""
	if l.invocations {
		if !l.lineStart && (c.Invocation != l.last.Invocation || c.Stream != l.last.Stream) {
			if err := l.endLine(); err != nil {
				return err
			}
		}
		l.last = Chunk{Invocation: c.Invocation, Stream: c.Stream}
		if c.Invocation != "" {
			prefix = InvocationPrefix(c.Invocation)
		}
	}
	return l.write(c.Time, prefix, c.Data)
}

// Skipped writes the marker line of n bytes that were dropped, on a line
// of its own.
func (l *LiveWriter) Skipped(n int64, t time.Time) error {
	if n <= 0 {
		return nil
	}
	if !l.lineStart {
		if err := l.endLine(); err != nil {
			return err
		}
	}
	return l.write(t, "", []byte(l.marker(n)))
}

func (l *LiveWriter) endLine() error {
	_, err := l.w.Write([]byte{'\n'})
	l.lineStart = true
	return err
}

func (l *LiveWriter) write(t time.Time, prefix string, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if !l.timestamps && prefix == "" {
		l.lineStart = data[len(data)-1] == '\n'
		_, err := l.w.Write(data)
		return err
	}
	var out bytes.Buffer
	if l.timestamps {
		prefix += t.UTC().Format(time.RFC3339Nano) + " "
	}
	for len(data) > 0 {
		if l.lineStart {
			out.WriteString(prefix)
		}
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			out.Write(data)
			l.lineStart = false
			break
		}
		out.Write(data[:i+1])
		data = data[i+1:]
		l.lineStart = true
	}
	_, err := l.w.Write(out.Bytes())
	return err
}
