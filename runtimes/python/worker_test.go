package python

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/runtimes/framing"
	"kruntimes.io/kruntimes/runtimes/language"
)

// headed is the payload of a frame carrying head and body, as worker.py
// writes it.
func headed(head, body []byte) []byte {
	payload := make([]byte, 0, framing.HeaderSize+len(head)+len(body))
	payload = binary.BigEndian.AppendUint32(payload, uint32(len(head)))
	return append(append(payload, head...), body...)
}

func TestDecodeAnswer(t *testing.T) {
	tests := []struct {
		name    string
		head    string
		body    string
		want    *language.Result
		wantErr bool
	}{
		{
			name: "an answer with everything: stdout, stderr and the output split the body in that order",
			head: `{"content_type":"application/json","outputs":{"k":"v"},"stdout_bytes":3,"stderr_bytes":2,"stdout_truncated":true,"stderr_truncated":true}`,
			body: `outer{"a":1}`,
			want: &language.Result{Output: []byte(`{"a":1}`), ContentType: "application/json", Outputs: map[string]string{"k": "v"},
				Stdout: []byte("out"), Stderr: []byte("er"), StdoutTruncated: true, StderrTruncated: true},
		},
		{
			name: "what is empty is left out and reads as empty",
			head: `{"content_type":"application/json"}`,
			body: `null`,
			want: &language.Result{Output: []byte(`null`), ContentType: "application/json", Stdout: []byte{}, Stderr: []byte{}},
		},
		{
			name: "a handler error carries no output",
			head: `{"error":{"type":"ValueError","message":"no","stack":"Traceback"},"stderr_bytes":4}`,
			body: `oops`,
			want: &language.Result{Error: &language.FunctionError{Type: "ValueError", Message: "no", Stack: "Traceback"}, Stdout: []byte{}, Stderr: []byte("oops")},
		},
		{name: "logs longer than the body are unreadable", head: `{"stdout_bytes":3,"stderr_bytes":2}`, body: `four`, wantErr: true},
		{name: "a negative log length is unreadable", head: `{"stdout_bytes":-1}`, body: `x`, wantErr: true},
		{name: "log lengths that overflow together are unreadable", head: `{"stdout_bytes":1,"stderr_bytes":9223372036854775807}`, body: `xx`, wantErr: true},
		{name: "a head that is not JSON is unreadable", head: `{`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := decodeAnswer(headed([]byte(tc.head), []byte(tc.body)))
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzDecodeAnswer feeds arbitrary worker answers to the decoder: it must
// never panic, and what it accepts must account for every byte of the body.
func FuzzDecodeAnswer(f *testing.F) {
	f.Add([]byte(`{"stdout_bytes":3,"stderr_bytes":2}`), []byte(`outer{}`))
	f.Add([]byte(`{"stdout_bytes":-3}`), []byte(`x`))
	f.Add([]byte(`{}`), []byte(nil))
	f.Fuzz(func(t *testing.T, head, body []byte) {
		res, _, err := decodeAnswer(headed(head, body))
		if err != nil {
			return
		}
		if got := len(res.Stdout) + len(res.Stderr) + len(res.Output); got != len(body) {
			t.Fatalf("stdout, stderr and output hold %d bytes of a body of %d", got, len(body))
		}
	})
}

// TestWorkerSurvivesAnInputTooDeepToParse: an input nested deeper than the
// interpreter's recursion limit (the apiserver refuses it; this is the
// worker's own guard) fails that invocation alone; the same worker, with
// its state, serves the next.
func TestWorkerSurvivesAnInputTooDeepToParse(t *testing.T) {
	l := New("")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mod.py"), []byte("calls = []\ndef handle(event, context):\n    calls.append(event)\n    return len(calls)\n"), 0o644))
	fn, err := l.LoadFunction(t.Context(), language.FunctionSpec{RunUID: "u", WorkingDir: dir, Handler: "mod.handle", Env: []string{"PATH=" + os.Getenv("PATH")}})
	require.NoError(t, err)
	t.Cleanup(fn.Close)
	invoke := func(input string) *language.Result {
		res, err := fn.Invoke(t.Context(), language.Invocation{ID: "1", Input: []byte(input), ContentType: invocation.ContentTypeJSON})
		require.NoError(t, err)
		return res
	}
	require.Nil(t, invoke(`1`).Error)
	deep := invoke(strings.Repeat("[", 100000) + strings.Repeat("]", 100000))
	require.NotNil(t, deep.Error)
	assert.Equal(t, "RecursionError", deep.Error.Type)
	last := invoke(`2`)
	require.Nil(t, last.Error, "the worker died of the deep input")
	assert.JSONEq(t, `2`, string(last.Output), "the worker lost its state")
}
