package layering

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMainsAreThin: every command's main is a few lines over a package
// that holds its options and wiring.
func TestMainsAreThin(t *testing.T) {
	const maxLines = 30
	for _, p := range packages(t) {
		if p.Name != "main" || !under(p.ImportPath, "cmd", "test/localcluster/cmd") {
			continue
		}
		for _, f := range p.GoFiles {
			if f != "main.go" {
				continue
			}
			assert.LessOrEqual(t, countLines(t, filepath.Join(p.Dir, f)), maxLines, "%s/main.go: move options and wiring into a package (AddFlags, Complete, Validate, Config, Run)", p.ImportPath)
		}
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		n++
	}
	return n
}
