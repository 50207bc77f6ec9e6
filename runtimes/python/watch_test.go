package python

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/runtimes/language"
)

// TestWorkerDeathWhileIdleFailsTheRegistration kills the warm worker from
// outside between invocations: its imported state is gone, so the
// registration reports why instead of quietly starting a fresh worker.
func TestWorkerDeathWhileIdleFailsTheRegistration(t *testing.T) {
	fn := load(t, "counter = 0\ndef count(event, context):\n    global counter\n    counter += 1\n    return counter\n", "mod.count")
	res, err := fn.Invoke(context.Background(), language.Invocation{ID: "1", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
	require.NoError(t, err)
	require.Equal(t, "1", string(res.Output))

	f := fn.(*function)
	f.mu.Lock()
	pid := f.worker.group.Pid()
	f.mu.Unlock()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	err = wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return fn.Failure() != nil, nil
	})
	require.NoError(t, err, "the registration fails once its idle worker is gone")
	assert.Contains(t, fn.Failure().Error(), "died while idle")
	_, err = fn.Invoke(context.Background(), language.Invocation{ID: "2", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
	assert.Error(t, err, "a failed registration serves nothing")
}

// TestWorkerDeathDuringAnInvocationIsThatInvocationsFailure: a handler that
// takes its worker down fails its own invocation; the registration stays
// usable with a fresh worker.
func TestWorkerDeathDuringAnInvocationIsThatInvocationsFailure(t *testing.T) {
	fn := load(t, "import os\ndef run(event, context):\n    if event.get('die'):\n        os._exit(3)\n    return 'ok'\n", "mod.run")
	res, err := fn.Invoke(context.Background(), language.Invocation{ID: "1", Input: []byte(`{"die":true}`), ContentType: invocation.ContentTypeJSON})
	require.NoError(t, err)
	require.NotNil(t, res.Error)
	assert.Equal(t, "WorkerExited", res.Error.Type)

	res, err = fn.Invoke(context.Background(), language.Invocation{ID: "2", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
	require.NoError(t, err)
	require.Nil(t, res.Error)
	assert.Equal(t, `"ok"`, string(res.Output))
	assert.NoError(t, fn.Failure())
}
