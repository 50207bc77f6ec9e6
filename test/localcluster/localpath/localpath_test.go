package localpath

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWithinRefusesPathsOutsideTheRoot(t *testing.T) {
	root := t.TempDir()
	p, err := New(nil, root)
	assert.NoError(t, err)
	for _, ok := range []string{filepath.Join(root, "ns_claim_uid"), filepath.Join(root, "a", "b") + "/"} {
		got, err := p.within(ok)
		assert.NoError(t, err, ok)
		assert.Equal(t, filepath.Clean(ok), got)
	}
	for _, bad := range []string{root, root + "/", "/", filepath.Dir(root), filepath.Join(root, ".."), filepath.Join(root, "..", "x"), root + "x/y", "relative/dir", ""} {
		_, err := p.within(bad)
		assert.Error(t, err, "%q must not be removed", bad)
	}
}
