package framing

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderSize is the size of the length prefix in bytes.
const HeaderSize = 4

// ErrFrameTooLarge is returned when a frame's declared length exceeds the
// reader's or writer's limit.
var ErrFrameTooLarge = errors.New("frame exceeds the size limit")

// Writer writes frames to an underlying stream.
type Writer struct {
	w        io.Writer
	maxFrame int
	buf      []byte
}

// NewWriter returns a Writer that refuses payloads larger than maxFrame bytes.
func NewWriter(w io.Writer, maxFrame int) *Writer {
	return &Writer{w: w, maxFrame: maxFrame}
}

// WriteFrame writes one frame whose payload is parts one after the other,
// with a single Write call, so a frame is never interleaved with a partial
// one on a pipe. Each part is copied once, into the frame.
func (fw *Writer) WriteFrame(parts ...[]byte) error {
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if size > fw.maxFrame {
		return fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, size, fw.maxFrame)
	}
	need := HeaderSize + size
	if cap(fw.buf) < need {
		fw.buf = make([]byte, 0, need)
	}
	buf := binary.BigEndian.AppendUint32(fw.buf[:0], uint32(size))
	for _, p := range parts {
		buf = append(buf, p...)
	}
	_, err := fw.w.Write(buf)
	// Large one-off buffers are dropped so one big invocation does not pin
	// memory for the life of the worker.
	if cap(fw.buf) > 64<<10 {
		fw.buf = nil
	}
	return err
}

// readBufferSize holds a small frame and its header whole: one read from
// the pipe, not one for the header and one for the payload. A larger
// payload is read straight into its own buffer.
const readBufferSize = 4 << 10

// Reader reads frames from an underlying stream.
type Reader struct {
	r        *bufio.Reader
	maxFrame int
	header   [HeaderSize]byte
}

// NewReader returns a Reader that rejects frames larger than maxFrame bytes.
// It may read ahead of the frame it returns, so r must be read through it
// alone.
func NewReader(r io.Reader, maxFrame int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, readBufferSize), maxFrame: maxFrame}
}

// ReadFrame reads one frame and returns its payload. It returns io.EOF only
// when the stream ended cleanly between frames, and io.ErrUnexpectedEOF when
// it ended inside one.
func (fr *Reader) ReadFrame() ([]byte, error) {
	if _, err := io.ReadFull(fr.r, fr.header[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(fr.header[:])
	if uint64(n) > uint64(fr.maxFrame) {
		return nil, fmt.Errorf("%w: declared %d > %d bytes", ErrFrameTooLarge, n, fr.maxFrame)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return payload, nil
}
