package python

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apis/runlog"
)

func TestDecodeEvent(t *testing.T) {
	tests := []struct {
		name, head, body string
		wantType         string
		wantStream       runlog.Stream
		wantErr          bool
	}{
		{name: "a start", head: `{"type":"start","id":"1"}`, wantType: "start"},
		{name: "output keeps its bytes as they are", head: `{"type":"output","id":"1","stream":"stderr"}`, body: "\xff\x00raw", wantType: "output", wantStream: runlog.StreamStderr},
		{name: "an end with its exit code", head: `{"type":"end","id":"1","exit_code":3}`, wantType: "end"},
		{name: "output with no stream is unreadable", head: `{"type":"output","id":"1"}`, wantErr: true},
		{name: "an event with no command is unreadable", head: `{"type":"start"}`, wantErr: true},
		{name: "an unknown type is unreadable", head: `{"type":"restart","id":"1"}`, wantErr: true},
		{name: "a head that is not JSON is unreadable", head: `{`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, stream, data, err := decodeEvent(headed([]byte(tc.head), []byte(tc.body)))
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantType, ev.Type)
			assert.Equal(t, "1", ev.ID)
			assert.Equal(t, tc.wantStream, stream)
			assert.Equal(t, tc.body, string(data))
		})
	}
}

// FuzzDecodeEvent feeds arbitrary event frames to the decoder: it must
// never panic, and output it accepts names its stream.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"type":"output","id":"1","stream":"stdout"}`), []byte("x"))
	f.Add([]byte(`{"type":"end","id":"2","exit_code":null}`), []byte(nil))
	f.Fuzz(func(t *testing.T, head, body []byte) {
		ev, stream, _, err := decodeEvent(headed(head, body))
		if err == nil && ev.Type == "output" && stream != runlog.StreamStdout && stream != runlog.StreamStderr {
			t.Fatalf("output of %q accepted with stream %q", ev.ID, stream)
		}
	})
}
