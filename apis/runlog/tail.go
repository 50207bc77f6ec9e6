package runlog

import (
	"bytes"
	"errors"
	"io"
)

// MaxTailBytes bounds what a follow with tailLines holds while it
// gathers the last lines: a follow that never catches up (a program that
// prints faster than two hops deliver) holds no more than this.
const MaxTailBytes = 4 << 20

// TailBuffer keeps the last lines written to it, and at most maxBytes of
// them: what tailLines shows of a log that is still arriving. Its memory
// is bounded by maxBytes, however much is written.
type TailBuffer struct {
	lines    int64
	maxBytes int
	buf      []byte
	// start is where the kept bytes begin in buf; newlines counts the
	// line ends in buf[start:].
	start    int
	newlines int64
}

// NewTailBuffer keeps the last lines lines (none when not positive), as
// Render's TailLines does, within maxBytes: past it, the oldest bytes go,
// to the next line start when one is kept.
func NewTailBuffer(lines int64, maxBytes int) *TailBuffer {
	return &TailBuffer{lines: lines, maxBytes: max(maxBytes, 1)}
}

// Write keeps p's bytes that are among the last lines; it never fails.
func (t *TailBuffer) Write(p []byte) (int, error) {
	if t.lines <= 0 || len(p) == 0 {
		return len(p), nil
	}
	if len(p) > t.maxBytes {
		// Nothing kept so far survives p.
		t.buf, t.start, t.newlines = t.buf[:0], 0, 0
		p = p[len(p)-t.maxBytes:]
	}
	if t.start > 0 && len(t.buf)+len(p) > cap(t.buf) {
		n := copy(t.buf, t.buf[t.start:])
		t.buf, t.start = t.buf[:n], 0
	}
	t.buf = append(t.buf, p...)
	t.newlines += int64(bytes.Count(p, []byte{'\n'}))
	for t.kept() > t.lines {
		t.start += bytes.IndexByte(t.buf[t.start:], '\n') + 1
		t.newlines--
	}
	if over := len(t.buf) - t.start - t.maxBytes; over > 0 {
		cut := t.buf[t.start : t.start+over]
		t.newlines -= int64(bytes.Count(cut, []byte{'\n'}))
		t.start += over
		// Begin at a line start unless the kept bytes are one line.
		if i := bytes.IndexByte(t.buf[t.start:len(t.buf)-1], '\n'); i >= 0 {
			t.start += i + 1
			t.newlines--
		}
	}
	return len(p), nil
}

// kept counts the lines in the kept bytes; a last line without a newline
// counts as a line.
func (t *TailBuffer) kept() int64 {
	n := t.newlines
	if len(t.buf) > t.start && t.buf[len(t.buf)-1] != '\n' {
		n++
	}
	return n
}

// Bytes returns the kept bytes; they are valid until the next Write.
func (t *TailBuffer) Bytes() []byte { return t.buf[t.start:] }

// Retained is the memory the buffer holds, in bytes.
func (t *TailBuffer) Retained() int { return cap(t.buf) }

// ErrLimit ends a write that reached the LimitWriter's limit.
var ErrLimit = errors.New("limitBytes reached")

// LimitWriter writes at most Left bytes to W, then fails with ErrLimit;
// a negative Left is no limit.
type LimitWriter struct {
	W    io.Writer
	Left int64
}

func (l *LimitWriter) Write(p []byte) (int, error) {
	if l.Left < 0 {
		return l.W.Write(p)
	}
	cut := false
	if int64(len(p)) >= l.Left {
		p, cut = p[:l.Left], true
	}
	n, err := l.W.Write(p)
	l.Left -= int64(n)
	if err == nil && cut {
		err = ErrLimit
	}
	return n, err
}

// lineCounter counts the lines written to it; a last line without a
// newline counts as a line.
type lineCounter struct {
	newlines int64
	// open says the last byte written ends no line.
	open bool
}

func (c *lineCounter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		c.newlines += int64(bytes.Count(p, []byte{'\n'}))
		c.open = p[len(p)-1] != '\n'
	}
	return len(p), nil
}

func (c *lineCounter) lines() int64 {
	if c.open {
		return c.newlines + 1
	}
	return c.newlines
}

// lineSkipper drops the first skip lines written to it and writes the
// rest to w.
type lineSkipper struct {
	w    io.Writer
	skip int64
}

func (s *lineSkipper) Write(p []byte) (int, error) {
	n := len(p)
	for s.skip > 0 && len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return n, nil
		}
		p = p[i+1:]
		s.skip--
	}
	if len(p) == 0 {
		return n, nil
	}
	if _, err := s.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}
