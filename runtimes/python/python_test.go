package python

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/runtimes/language"
)

func load(t *testing.T, source, handler string) language.Function {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mod.py"), []byte(source), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fn, err := New("").LoadFunction(ctx, language.FunctionSpec{RunUID: "u", WorkingDir: dir, Handler: handler, Env: []string{"PATH=" + os.Getenv("PATH")}})
	require.NoError(t, err)
	t.Cleanup(fn.Close)
	return fn
}

func TestInvokeWire(t *testing.T) {
	fn := load(t, `
def echo(event, context):
    return event
`, "mod.echo")
	tests := []struct {
		name        string
		input       string
		contentType string
		want        string
		wantType    string
	}{
		{name: "JSON input comes back as JSON", input: `{"a":"é"}`, contentType: invocation.ContentTypeJSON, want: `{"a":"\u00e9"}`, wantType: invocation.ContentTypeJSON},
		{name: "non-JSON input arrives as bytes", input: "\x00\xff", contentType: "application/octet-stream", want: "\x00\xff", wantType: "application/octet-stream"},
		{name: "quotes, escapes and a frame's worth of bytes pass unchanged", input: `{"a":"\"q\"\\\n","b":[` + strings.Repeat(`"x",`, 20000) + `1]}`, contentType: invocation.ContentTypeJSON,
			want: `{"a":"\"q\"\\\n","b":[` + strings.Repeat(`"x",`, 20000) + `1]}`, wantType: invocation.ContentTypeJSON},
		{name: "invalid UTF-8 in a JSON string arrives as U+FFFD", input: "\"a\xffb\"", contentType: invocation.ContentTypeJSON, want: `"a\ufffdb"`, wantType: invocation.ContentTypeJSON},
		{name: "an empty JSON input is None", input: "", contentType: invocation.ContentTypeJSON, want: `null`, wantType: invocation.ContentTypeJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := fn.Invoke(context.Background(), language.Invocation{ID: "i", Input: []byte(tc.input), ContentType: tc.contentType})
			require.NoError(t, err)
			require.Nil(t, res.Error)
			assert.True(t, res.WorkerWarm, "the worker started at registration was running")
			assert.Equal(t, tc.wantType, res.ContentType)
			if tc.contentType == invocation.ContentTypeJSON {
				assert.JSONEq(t, tc.want, string(res.Output))
			} else {
				assert.Equal(t, tc.want, string(res.Output))
			}
		})
	}
}

func TestSplitHeaded(t *testing.T) {
	head, body, err := splitHeaded(headed([]byte(`{"a":1}`), []byte("body")))
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`, string(head))
	assert.Equal(t, "body", string(body))

	for name, payload := range map[string][]byte{
		"no head length":               {0, 0},
		"a head longer than the frame": {0, 0, 0, 9, '{', '}'},
	} {
		_, _, err := splitHeaded(payload)
		assert.Error(t, err, name)
	}
}

// FuzzSplitHeaded feeds arbitrary worker answers to the head/body split: it
// must never panic, and what it accepts must be rebuilt exactly.
func FuzzSplitHeaded(f *testing.F) {
	f.Add(headed([]byte(`{}`), []byte("null")))
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Fuzz(func(t *testing.T, payload []byte) {
		head, body, err := splitHeaded(payload)
		if err != nil {
			return
		}
		if got := headed(head, body); !bytes.Equal(got, payload) {
			t.Fatalf("head %q and body %q rebuild %q, not %q", head, body, got, payload)
		}
	})
}

func TestCloseInterruptsAnInvocation(t *testing.T) {
	// The handler creates started once it runs: Close must then interrupt
	// it, not refuse an invocation that had not begun.
	started := filepath.Join(t.TempDir(), "started")
	fn := load(t, fmt.Sprintf("import time\ndef sleep(event, context):\n    open(%q, 'w').close()\n    time.sleep(60)\n", started), "mod.sleep")
	done := make(chan error, 1)
	go func() {
		_, err := fn.Invoke(context.Background(), language.Invocation{ID: "i", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
		done <- err
	}()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(started)
		return err == nil, nil
	})
	require.NoError(t, err, "the handler did not start")
	fn.Close()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, errClosed)
	case <-time.After(20 * time.Second):
		t.Fatal("Invoke did not return after Close")
	}
	_, err = fn.Invoke(context.Background(), language.Invocation{ID: "j", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
	assert.ErrorIs(t, err, errClosed)
}

func TestInterpreterIsResolvedToItsBinary(t *testing.T) {
	l := New("")
	assert.True(t, filepath.IsAbs(l.Interpreter), "python3 resolved to %q", l.Interpreter)
	assert.Equal(t, l.Interpreter, New("python3").Interpreter, "resolved once per name")
	assert.Equal(t, "no-such-python", New("no-such-python").Interpreter, "a name that does not run is kept for the start to report")
}
