package framing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadFrame(t *testing.T) {
	frame := func(declared uint32, payload string) []byte {
		b := make([]byte, HeaderSize, HeaderSize+len(payload))
		binary.BigEndian.PutUint32(b, declared)
		return append(b, payload...)
	}
	tests := []struct {
		name    string
		stream  []byte
		want    []string
		wantErr error
	}{
		{name: "frames round trip in order", stream: append(frame(2, "{}"), frame(4, "null")...), want: []string{"{}", "null"}, wantErr: io.EOF},
		{name: "empty payload is a valid frame", stream: frame(0, ""), want: []string{""}, wantErr: io.EOF},
		{name: "empty stream is a clean EOF", stream: nil, wantErr: io.EOF},
		{name: "truncated header is an unexpected EOF", stream: []byte{0, 0}, wantErr: io.ErrUnexpectedEOF},
		{name: "truncated payload is an unexpected EOF", stream: frame(10, "abc"), wantErr: io.ErrUnexpectedEOF},
		{name: "declared length over the limit is rejected before allocating", stream: frame(1<<31, ""), wantErr: ErrFrameTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tc.stream), 1024)
			var got []string
			var err error
			for {
				var p []byte
				p, err = r.ReadFrame()
				if err != nil {
					break
				}
				got = append(got, string(p))
			}
			assert.Equal(t, tc.want, got)
			assert.True(t, errors.Is(err, tc.wantErr), "got error %v, want %v", err, tc.wantErr)
		})
	}
}

// The reader reads ahead through a buffer: frames larger than it, and
// frames that arrive together or in pieces, come out whole and in order.
func TestReadFrameAcrossTheReadBuffer(t *testing.T) {
	large := bytes.Repeat([]byte("x"), 3*readBufferSize+1)
	payloads := [][]byte{[]byte("{}"), large, []byte("null"), large[:readBufferSize-HeaderSize], []byte("1")}
	var stream bytes.Buffer
	w := NewWriter(&stream, len(large))
	for _, p := range payloads {
		require.NoError(t, w.WriteFrame(p))
	}
	for name, source := range map[string]func() io.Reader{
		"all at once":  func() io.Reader { return bytes.NewReader(stream.Bytes()) },
		"byte by byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream.Bytes())) },
		"in halves":    func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream.Bytes())) },
	} {
		t.Run(name, func(t *testing.T) {
			r := NewReader(source(), len(large))
			for i, want := range payloads {
				got, err := r.ReadFrame()
				require.NoError(t, err, "frame %d", i)
				assert.Equal(t, want, got, "frame %d", i)
			}
			_, err := r.ReadFrame()
			assert.ErrorIs(t, err, io.EOF)
		})
	}
}

func TestWriteFrameRejectsOversizedPayload(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, 4)
	require.NoError(t, w.WriteFrame([]byte("abcd")))
	err := w.WriteFrame([]byte("abcde"))
	require.ErrorIs(t, err, ErrFrameTooLarge)
	assert.Equal(t, HeaderSize+4, buf.Len(), "a rejected frame must not write anything")
}

// FuzzReadFrame feeds arbitrary worker output to the decoder: it must never
// panic, never return a payload over the limit, and re-encoding what it
// decoded must reproduce the consumed prefix of the stream.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 'x'})
	const limit = 64
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := NewReader(bytes.NewReader(stream), limit)
		var reencoded bytes.Buffer
		w := NewWriter(&reencoded, limit)
		for {
			p, err := r.ReadFrame()
			if err != nil {
				break
			}
			if len(p) > limit {
				t.Fatalf("payload of %d bytes exceeds limit %d", len(p), limit)
			}
			if err := w.WriteFrame(p); err != nil {
				t.Fatalf("re-encoding a decoded frame failed: %v", err)
			}
		}
		if !bytes.HasPrefix(stream, reencoded.Bytes()) {
			t.Fatalf("re-encoded frames are not a prefix of the input")
		}
	})
}
