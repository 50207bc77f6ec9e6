package layering

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
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

// TestCommandPackagesStayWithTheirCommand: a package under cmd/<bin>/ is
// that command's wiring, imported (by code or tests) only from cmd/<bin>/;
// and MCP is krt mcp's alone: only cmd/krt/mcpserver's code imports the
// MCP SDK (tests anywhere may use its client).
func TestCommandPackagesStayWithTheirCommand(t *testing.T) {
	const mcpSDK = "github.com/modelcontextprotocol/go-sdk"
	binOf := func(path string) string {
		rest, ok := strings.CutPrefix(path, module+"/cmd/")
		if !ok {
			return ""
		}
		bin, _, _ := strings.Cut(rest, "/")
		return bin
	}
	for _, p := range packages(t) {
		all := append(append(append([]string(nil), p.Imports...), p.TestImports...), p.XTestImports...)
		for _, imp := range all {
			if bin := binOf(imp); bin != "" {
				assert.Equal(t, bin, binOf(p.ImportPath), "%s imports %s: a command's packages are its own wiring; share what both need through a package outside cmd/", p.ImportPath, imp)
			}
		}
		for _, imp := range p.Imports {
			if imp == mcpSDK || strings.HasPrefix(imp, mcpSDK+"/") {
				assert.Equal(t, module+"/cmd/krt/mcpserver", p.ImportPath, "%s imports %s: the MCP server lives in cmd/krt/mcpserver", p.ImportPath, imp)
			}
		}
	}
}
