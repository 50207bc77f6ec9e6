package layering

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "kruntimes.io/kruntimes"

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Name         string
	Dir          string
	GoFiles      []string
}

// packages lists every package of the module, with the imports of its code
// and of its tests, as the go command sees them.
func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", "fieldsv1string", "-e", "-json", module+"/...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		require.NoError(t, dec.Decode(&p))
		pkgs = append(pkgs, p)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

func under(path string, folders ...string) bool {
	for _, f := range folders {
		prefix := module + "/" + f
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

func TestImportGraph(t *testing.T) {
	pkgs := packages(t)
	for _, p := range pkgs {
		code := p.Imports
		all := append(append(append([]string(nil), p.Imports...), p.TestImports...), p.XTestImports...)
		for _, imp := range code {
			if under(p.ImportPath, "registry", "controllers", "apiserver") {
				assert.False(t, under(imp, "runtimed"), "%s imports %s: the API server and the controllers share contracts with runtimed through apis/ and proto/, never runtimed's own packages", p.ImportPath, imp)
			}
			if under(p.ImportPath, "registry") {
				// Tests may still drive the real runtimed client over a
				// fake gRPC stub, which pins the mapping of runtimed's
				// codes to HTTP answers end to end; what the registry
				// runs speaks HTTP and API objects alone.
				assert.False(t, imp == "google.golang.org/grpc" || strings.HasPrefix(imp, "google.golang.org/grpc/") || under(imp, "proto/runtimedv1", "proto/runtimev1"),
					"%s imports %s: the registry speaks HTTP and API objects; runtimed's protocol lives in apiserver/runtimedclient", p.ImportPath, imp)
			}
			if under(p.ImportPath, "apis/invocation", "proto/pki") {
				assert.True(t, !strings.HasPrefix(imp, module+"/") || under(imp, "apis/invocation"), "%s imports %s: the invoke contract and the PKI sit below every side and import none of them", p.ImportPath, imp)
			}
		}
		for _, imp := range all {
			if !under(p.ImportPath, "hack") {
				assert.False(t, under(imp, "hack"), "%s imports %s: hack/ holds scripts and build tools; test infrastructure lives under test/", p.ImportPath, imp)
			}
		}
	}
}
