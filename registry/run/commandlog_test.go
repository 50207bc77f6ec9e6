package run

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/runlog"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

func TestValidateLogOptionsCommand(t *testing.T) {
	for _, id := range []string{"1", "build-7", "a.b_c"} {
		assert.Empty(t, ValidateLogOptions(&kruntimes.RunLogOptions{Command: id}), id)
	}
	for _, id := range []string{"../x", "a/b", "a b", string(make([]byte, 65))} {
		errs := ValidateLogOptions(&kruntimes.RunLogOptions{Command: id})
		require.Len(t, errs, 1, "%q", id)
		assert.Equal(t, "command", errs[0].Field)
	}
}

// runningCommand is a command that wrote two lines and goes on: its
// stream has nothing more to say yet.
type runningCommand struct{ sent int }

func (s *runningCommand) Recv() (*runtimedclient.LogResponse, error) {
	if s.sent > 0 {
		return nil, io.ErrUnexpectedEOF // would block: a test failure if read
	}
	s.sent++
	return &runtimedclient.LogResponse{Offset: 6, Written: 12, Chunks: []runlog.Chunk{{Stream: runlog.StreamStdout, Data: []byte("second\n")[:6]}}}, nil
}

// TestCommandLogWithoutFollowEndsCaughtUp: runs/log?command=ID without
// follow answers what the running command wrote so far and ends, never
// waiting for more.
func TestCommandLogWithoutFollowEndsCaughtUp(t *testing.T) {
	w := httptest.NewRecorder()
	f := startFollow(w, &kruntimes.RunLogOptions{})
	first := &runtimedclient.LogResponse{Offset: 0, Written: 12, Chunks: []runlog.Chunk{{Stream: runlog.StreamStdout, Data: []byte("first\n")}}}
	done, err := f.relay(&runningCommand{}, first, true)
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, "first\nsecond", w.Body.String())
	assert.EqualValues(t, 12, f.offset)

	// An ended command's stream ends, with or without follow.
	w = httptest.NewRecorder()
	f = startFollow(w, &kruntimes.RunLogOptions{Follow: true})
	done, err = f.relay(nil, nil, false)
	require.NoError(t, err)
	assert.True(t, done)
	assert.Empty(t, w.Body.String())
}
