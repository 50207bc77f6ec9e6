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
}

// NewLiveWriter writes to w what opts select (opts.TailLines and
// opts.LimitBytes aside).
func NewLiveWriter(w io.Writer, opts RenderOptions) *LiveWriter {
	return &LiveWriter{w: w, stream: opts.Stream, timestamps: opts.Timestamps, lineStart: true}
}

// SetWriter sends what follows to w.
func (l *LiveWriter) SetWriter(w io.Writer) { l.w = w }

// Chunk writes one chunk, if its stream is selected.
func (l *LiveWriter) Chunk(c Chunk) error {
	if l.stream != "" && l.stream != StreamAll && l.stream != c.Stream {
		return nil
	}
	return l.write(c.Time, c.Data)
}

// Skipped writes the marker line of n bytes that were dropped, on a line
// of its own.
func (l *LiveWriter) Skipped(n int64, t time.Time) error {
	if n <= 0 {
		return nil
	}
	if !l.lineStart {
		if _, err := l.w.Write([]byte{'\n'}); err != nil {
			return err
		}
		l.lineStart = true
	}
	return l.write(t, []byte(Marker(n)))
}

func (l *LiveWriter) write(t time.Time, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if !l.timestamps {
		l.lineStart = data[len(data)-1] == '\n'
		_, err := l.w.Write(data)
		return err
	}
	var out bytes.Buffer
	stamp := t.UTC().Format(time.RFC3339Nano) + " "
	for len(data) > 0 {
		if l.lineStart {
			out.WriteString(stamp)
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

// LastLines returns the last n lines of b, a last line without a newline
// counting as a line, as Render's TailLines keeps them.
func LastLines(b []byte, n int64) []byte { return lastLines(b, n) }
