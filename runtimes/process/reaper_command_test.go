//go:build linux

package process

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReaperCommand runs a program the way another process (the Python
// sandbox) does with what ReaperCommand returns: the exit code comes back.
func TestReaperCommand(t *testing.T) {
	exe, arg0, ok := ReaperCommand()
	require.True(t, ok, "Init enabled the reaper")
	assert.True(t, filepath.IsAbs(exe), "%q must name the binary to any process, not /proc/self/exe", exe)
	assert.NotEqual(t, "/proc/self/exe", exe)
	cmd := &exec.Cmd{Path: exe, Args: []string{arg0, "0", "/bin/sh", "sh", "-c", "echo hi; exit 7"}}
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr)
	assert.Equal(t, 7, exitErr.ExitCode())
	assert.Equal(t, "hi\n", string(out))
}
