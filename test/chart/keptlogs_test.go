package chart

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeptLogLimits: keptLogs passes the kept-log flags to kruntimes-apiserver,
// as integers however the values file writes them, and passes none by
// default (the server's defaults apply).
func TestKeptLogLimits(t *testing.T) {
	requireHelm(t)
	flags := []string{"--max-log-bytes-per-namespace", "--max-log-record-bytes", "--log-sweep-interval"}
	for _, arg := range containerArgs(t, render(t).deployment(t)) {
		for _, flag := range flags {
			assert.NotContains(t, arg, flag, "no kept-log flag by default")
		}
	}

	values := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(values, []byte("keptLogs:\n  maxBytesPerNamespace: 1073741824\n  maxRecordBytes: 524288\n  sweepInterval: 10m\n"), 0o600))
	args := containerArgs(t, render(t, "-f", values).deployment(t))
	assert.Contains(t, args, "--max-log-bytes-per-namespace=1073741824", "a large number is no float")
	assert.Contains(t, args, "--max-log-record-bytes=524288")
	assert.Contains(t, args, "--log-sweep-interval=10m")
}
