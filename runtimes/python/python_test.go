package python

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

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
		{name: "JSON input comes back as JSON", input: `{"a":"é"}`, contentType: language.ContentTypeJSON, want: `{"a":"\u00e9"}`, wantType: language.ContentTypeJSON},
		{name: "non-JSON input arrives as bytes", input: "\x00\xff", contentType: "application/octet-stream", want: "\x00\xff", wantType: "application/octet-stream"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := fn.Invoke(context.Background(), language.Invocation{ID: "i", Input: []byte(tc.input), ContentType: tc.contentType})
			require.NoError(t, err)
			require.Nil(t, res.Error)
			assert.Equal(t, tc.wantType, res.ContentType)
			if tc.contentType == language.ContentTypeJSON {
				assert.JSONEq(t, tc.want, string(res.Output))
			} else {
				assert.Equal(t, tc.want, string(res.Output))
			}
		})
	}
}

func TestCloseInterruptsAnInvocation(t *testing.T) {
	// The handler creates started once it runs: Close must then interrupt
	// it, not refuse an invocation that had not begun.
	started := filepath.Join(t.TempDir(), "started")
	fn := load(t, fmt.Sprintf("import time\ndef sleep(event, context):\n    open(%q, 'w').close()\n    time.sleep(60)\n", started), "mod.sleep")
	done := make(chan error, 1)
	go func() {
		_, err := fn.Invoke(context.Background(), language.Invocation{ID: "i", Input: []byte(`{}`), ContentType: language.ContentTypeJSON})
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
	_, err = fn.Invoke(context.Background(), language.Invocation{ID: "j", Input: []byte(`{}`), ContentType: language.ContentTypeJSON})
	assert.ErrorIs(t, err, errClosed)
}

func TestInterpreterIsResolvedToItsBinary(t *testing.T) {
	l := New("")
	assert.True(t, filepath.IsAbs(l.Interpreter), "python3 resolved to %q", l.Interpreter)
	assert.Equal(t, l.Interpreter, New("python3").Interpreter, "resolved once per name")
	assert.Equal(t, "no-such-python", New("no-such-python").Interpreter, "a name that does not run is kept for the start to report")
}
