package runlog

import (
	"io"
	"sync"
	"time"
)

// Stream says which of a program's output streams a chunk was written to.
type Stream string

// Streams, as runs/log's `stream` option names them.
const (
	StreamAll    Stream = "All"
	StreamStdout Stream = "Stdout"
	StreamStderr Stream = "Stderr"
)

// DefaultMaxBytes bounds the kept log of one attempt unless configured.
const DefaultMaxBytes = 1 << 20

// chunkOverhead is what a chunk costs beyond its bytes (stream, time, the
// encoding's framing). Counting it keeps a program that writes one byte at
// a time within the bound too.
const chunkOverhead = 16

// Chunk is one write of a program.
type Chunk struct {
	Stream Stream
	Time   time.Time
	Data   []byte
	// Invocation is the ID of the invocation that wrote Data, in a
	// function's log; empty in a task's.
	Invocation string
}

// Log is what was kept of one attempt: Chunks in write order; when more was
// written than the bound, DroppedBytes bytes were dropped between
// Chunks[:DroppedAfter] (the head) and Chunks[DroppedAfter:] (the tail).
type Log struct {
	Chunks       []Chunk
	DroppedBytes int64
	DroppedAfter int
	// DroppedBy names the server's limit that dropped bytes
	// (kruntimes.RunLogDroppedBy*); the Runtime Server's bound when empty.
	DroppedBy string
}

// Recorder keeps a bounded log of both streams of one program. It is safe
// for concurrent use; writes never fail and never block on a reader, so a
// chatty program is never stalled by it.
type Recorder struct {
	mu        sync.Mutex
	now       func() time.Time
	headLimit int
	tailLimit int

	head      []Chunk
	headBytes int
	// tail[tailStart:] are the kept tail chunks, oldest first.
	tail      []Chunk
	tailStart int
	tailBytes int
	dropped   int64

	// written counts every byte written; headData the bytes in head.
	written  int64
	headData int
	// changed, when set, is closed by the next write: Changed hands it to
	// followers waiting for more.
	changed chan struct{}
}

// NewRecorder keeps at most maxBytes (DefaultMaxBytes when not positive):
// the first half and the last half of what is written. now tells the time
// of each write; time.Now when nil.
func NewRecorder(maxBytes int, now func() time.Time) *Recorder {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if now == nil {
		now = time.Now
	}
	head := maxBytes / 2
	return &Recorder{now: now, headLimit: head, tailLimit: maxBytes - head}
}

// NewTailRecorder keeps only the last maxBytes (DefaultMaxBytes when not
// positive) of what is written: a log with no end, such as a function's,
// whose first bytes matter no more than any others.
func NewTailRecorder(maxBytes int, now func() time.Time) *Recorder {
	r := NewRecorder(maxBytes, now)
	r.tailLimit += r.headLimit
	r.headLimit = 0
	return r
}

// WriteInvocation records p, written to stream s by the invocation
// invocation, as one chunk.
func (r *Recorder) WriteInvocation(s Stream, invocation string, p []byte) {
	r.write(s, invocation, p)
}

// Writer returns the io.Writer of one stream (StreamStdout or StreamStderr).
func (r *Recorder) Writer(s Stream) io.Writer { return streamWriter{r: r, stream: s} }

type streamWriter struct {
	r      *Recorder
	stream Stream
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.r.write(w.stream, "", p)
	return len(p), nil
}

func (r *Recorder) write(s Stream, invocation string, p []byte) {
	if len(p) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written += int64(len(p))
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	t := r.now()
	if r.tailBytes == 0 && r.dropped == 0 {
		room := r.headLimit - r.headBytes - chunkOverhead
		if room > 0 {
			n := min(room, len(p))
			r.head = append(r.head, Chunk{Stream: s, Time: t, Data: append([]byte(nil), p[:n]...), Invocation: invocation})
			r.headBytes += n + chunkOverhead
			r.headData += n
			p = p[n:]
			if len(p) == 0 {
				return
			}
		}
	}
	r.appendTail(Chunk{Stream: s, Time: t, Data: p, Invocation: invocation})
}

// appendTail keeps c's last bytes in the tail and evicts the oldest tail
// bytes beyond the limit, counting them as dropped.
func (r *Recorder) appendTail(c Chunk) {
	if room := r.tailLimit - chunkOverhead; len(c.Data) > room {
		drop := len(c.Data) - max(room, 0)
		r.dropped += int64(drop)
		c.Data = c.Data[drop:]
		// Everything kept before is older than these bytes.
		for _, old := range r.tail[r.tailStart:] {
			r.dropped += int64(len(old.Data))
		}
		r.tail, r.tailStart, r.tailBytes = r.tail[:0], 0, 0
		if len(c.Data) == 0 {
			return
		}
	}
	c.Data = append([]byte(nil), c.Data...)
	r.tail = append(r.tail, c)
	r.tailBytes += len(c.Data) + chunkOverhead
	for r.tailBytes > r.tailLimit {
		oldest := &r.tail[r.tailStart]
		over := r.tailBytes - r.tailLimit
		if over < len(oldest.Data) {
			// Trim the oldest chunk's front; its cost stays counted.
			oldest.Data = oldest.Data[over:]
			r.tailBytes -= over
			r.dropped += int64(over)
			break
		}
		r.dropped += int64(len(oldest.Data))
		r.tailBytes -= len(oldest.Data) + chunkOverhead
		*oldest = Chunk{}
		r.tailStart++
	}
	// Compact once half the slice is evicted, so appends stay amortized O(1).
	if r.tailStart > len(r.tail)/2 {
		n := copy(r.tail, r.tail[r.tailStart:])
		clear(r.tail[n:])
		r.tail, r.tailStart = r.tail[:n], 0
	}
}

// Log returns a copy of what is kept so far.
func (r *Recorder) Log() Log {
	r.mu.Lock()
	defer r.mu.Unlock()
	chunks := make([]Chunk, 0, len(r.head)+len(r.tail)-r.tailStart)
	for _, c := range r.head {
		chunks = append(chunks, Chunk{Stream: c.Stream, Time: c.Time, Data: append([]byte(nil), c.Data...), Invocation: c.Invocation})
	}
	for _, c := range r.tail[r.tailStart:] {
		chunks = append(chunks, Chunk{Stream: c.Stream, Time: c.Time, Data: append([]byte(nil), c.Data...), Invocation: c.Invocation})
	}
	return Log{Chunks: chunks, DroppedBytes: r.dropped, DroppedAfter: len(r.head)}
}

// Changed returns a channel that the next write closes, so a follower that
// read everything waits for more without polling.
func (r *Recorder) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// Written is how many bytes were written so far, kept or not.
func (r *Recorder) Written() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

// Read returns what is kept of the bytes written from offset off on, at
// most maxBytes of them, as consecutive chunks starting at start. Offsets
// count the bytes of both streams together. When bytes from off on were
// dropped by the bound, skipped says how many: start is off+skipped. written
// is how many bytes were written so far; ok is false when off is past it.
// The chunks share the recorder's bytes, which are never modified, so a
// read costs no copy of the data and never blocks a write for long.
func (r *Recorder) Read(off int64, maxBytes int) (chunks []Chunk, start, skipped, written int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	written = r.written
	if off < 0 || off > written {
		return nil, off, 0, written, false
	}
	if maxBytes <= 0 {
		maxBytes = 1
	}
	if off < int64(r.headData) {
		chunks = readChunks(r.head, 0, off, maxBytes)
		return chunks, off, 0, written, true
	}
	// The tail ends at written; walk back to the chunk holding off, which
	// is usually the last one or two for a follower that keeps up.
	tail := r.tail[r.tailStart:]
	pos, i := written, len(tail)
	for i > 0 && pos > off {
		i--
		pos -= int64(len(tail[i].Data))
	}
	if off < pos {
		// off was dropped: skip to the first kept byte after it.
		skipped, off = pos-off, pos
	}
	return readChunks(tail[i:], pos, off, maxBytes), off, skipped, written, true
}

// readChunks returns at most maxBytes of chunks, whose first byte is at
// offset first, from offset off on.
func readChunks(chunks []Chunk, first, off int64, maxBytes int) []Chunk {
	var out []Chunk
	pos := first
	for _, c := range chunks {
		end := pos + int64(len(c.Data))
		if end <= off {
			pos = end
			continue
		}
		data := c.Data[max(off-pos, 0):]
		if len(data) > maxBytes {
			data = data[:maxBytes]
		}
		out = append(out, Chunk{Stream: c.Stream, Time: c.Time, Data: data, Invocation: c.Invocation})
		maxBytes -= len(data)
		pos = end
		if maxBytes == 0 {
			break
		}
	}
	return out
}

// From returns what l kept of the bytes written from offset off on, as
// Recorder.Read does of a live log: consecutive chunks starting at start,
// with skipped bytes dropped by the bound before them. The head holds the
// first bytes written, and the tail the last ones, after DroppedBytes.
func (l Log) From(off int64) (chunks []Chunk, start, skipped int64) {
	off = max(off, 0)
	var headEnd int64
	for _, c := range l.Chunks[:l.DroppedAfter] {
		headEnd += int64(len(c.Data))
	}
	if off < headEnd {
		chunks = readChunks(l.Chunks[:l.DroppedAfter], 0, off, int(headEnd-off))
		tail := l.Chunks[l.DroppedAfter:]
		if l.DroppedBytes == 0 {
			return append(chunks, tail...), off, 0
		}
		// The caller asks again from the end of the head for the rest.
		return chunks, off, 0
	}
	tailStart := headEnd + l.DroppedBytes
	if off < tailStart {
		skipped, off = tailStart-off, tailStart
	}
	var tailBytes int64
	for _, c := range l.Chunks[l.DroppedAfter:] {
		tailBytes += int64(len(c.Data))
	}
	return readChunks(l.Chunks[l.DroppedAfter:], tailStart, off, int(max(tailBytes, 1))), off, skipped
}

// Written is how many bytes the program wrote, kept or not.
func (l Log) Written() int64 {
	n := l.DroppedBytes
	for _, c := range l.Chunks {
		n += int64(len(c.Data))
	}
	return n
}
