package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRemotePath(t *testing.T) {
	for _, tc := range []struct {
		arg, sandbox, path string
		remote             bool
	}{
		{"box:data/in.csv", "box", "data/in.csv", true},
		{"box:/workspace/x", "box", "/workspace/x", true},
		{"box:", "box", "", true},
		{"in.csv", "", "", false},
		{"-", "", "", false},
		{"./odd:name", "", "", false},
		{"/tmp/odd:name", "", "", false},
		{"dir/odd:name", "", "", false},
		{":x", "", "", false},
	} {
		sandbox, path, remote := remotePath(tc.arg)
		assert.Equal(t, tc.remote, remote, tc.arg)
		assert.Equal(t, tc.sandbox, sandbox, tc.arg)
		assert.Equal(t, tc.path, path, tc.arg)
	}
}

func TestCpNeedsExactlyOneSandboxSide(t *testing.T) {
	o := &cpOptions{}
	assert.ErrorContains(t, o.Complete([]string{"a", "b"}), "exactly one side")
	assert.ErrorContains(t, o.Complete([]string{"box:a", "box:b"}), "exactly one side")
	assert.ErrorContains(t, o.Complete([]string{"a", "box:"}), "names no path")
	o = &cpOptions{}
	assert.NoError(t, o.Complete([]string{"a", "box:b"}))
	assert.Equal(t, cpOptions{sandbox: "box", remote: "b", local: "a", upload: true}, *o)
}
