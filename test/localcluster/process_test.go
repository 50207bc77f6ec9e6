package localcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMainGoroutine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "component.log")
	before := "goroutine 1 [running]:\nnot this one\n\n"
	dump := "I1202 log line\nSIGQUIT: quit\n\ngoroutine 7 [select]:\nother()\n\ngoroutine 1 [chan receive, 2 minutes]:\nk8s.io/apiserver/pkg/server.preparedGenericAPIServer.RunWithContext(...)\n\tserver.go:600\nmain.main()\n\tmain.go:10 +0x1\n\ngoroutine 9 [IO wait]:\n"
	require.NoError(t, os.WriteFile(path, []byte(before+dump), 0o644))

	got := mainGoroutine(path, int64(len(before)))
	assert.Equal(t, "goroutine 1 [chan receive, 2 minutes]:\nk8s.io/apiserver/pkg/server.preparedGenericAPIServer.RunWithContext(...)\n\tserver.go:600\nmain.main()\n\tmain.go:10 +0x1", got,
		"goroutine 1 of the dump written after the offset, up to its blank line")
	assert.Empty(t, mainGoroutine(path, int64(len(before)+len(dump))), "no dump after the offset")
	assert.Empty(t, mainGoroutine(filepath.Join(t.TempDir(), "missing.log"), 0))
}
