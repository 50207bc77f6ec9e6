package workspace

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

func TestMaterialize(t *testing.T) {
	cases := []struct {
		name       string
		inline     string
		inlinePath string
		wantFile   string
		wantErr    bool
	}{
		{name: "inline source goes to the default file", inline: "echo hi", wantFile: DefaultSourceFile},
		{name: "inlinePath names the file", inline: "echo hi", inlinePath: "bin/main.sh", wantFile: "bin/main.sh"},
		{name: "no inline source writes no file", inline: ""},
		{name: "an escaping inlinePath is refused", inline: "x", inlinePath: "../x", wantErr: true},
		{name: "an absolute inlinePath is refused", inline: "x", inlinePath: "/etc/x", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := Root(t.TempDir())
			dir, source, err := root.Materialize("uid-1", tc.inline, tc.inlinePath)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(string(root), "uid-1"), dir)
			if tc.wantFile == "" {
				assert.Empty(t, source)
				return
			}
			assert.Equal(t, filepath.Join(dir, tc.wantFile), source)
			got, err := os.ReadFile(source)
			require.NoError(t, err)
			assert.Equal(t, tc.inline, string(got))
		})
	}
}

func TestMaterializeTwiceAndRemove(t *testing.T) {
	root := Root(t.TempDir())
	_, _, err := root.Materialize("uid-1", "one", "")
	require.NoError(t, err)
	_, source, err := root.Materialize("uid-1", "two", "")
	require.NoError(t, err, "materializing again is idempotent")
	got, _ := os.ReadFile(source)
	assert.Equal(t, "two", string(got))

	require.NoError(t, root.Remove("uid-1"))
	_, err = os.Stat(root.RunDir("uid-1"))
	assert.True(t, os.IsNotExist(err))
	assert.NoError(t, root.Remove("uid-1"), "removing an absent workspace succeeds")
	assert.Error(t, root.Remove("../x"), "a UID never escapes the root")
}

func TestSweepRemovesOnlyWhatRuntimedCreated(t *testing.T) {
	root := Root(t.TempDir())
	for _, uid := range []types.UID{"live", "gone"} {
		_, _, err := root.Materialize(uid, "echo", "")
		require.NoError(t, err)
	}
	// A workspace volume may be the user's: a directory runtimed did not
	// create, even one named like a UID, is theirs.
	userDir := filepath.Join(string(root), "d6f7c1c4-1b1e-4a53-9f0e-6a2d3f9c1a10")
	require.NoError(t, os.Mkdir(userDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(string(root), "a-file"), nil, 0o644))
	removed, err := root.Sweep(func(uid types.UID) bool { return uid == "live" })
	require.NoError(t, err)
	assert.Equal(t, []types.UID{"gone"}, removed)
	assert.DirExists(t, root.RunDir("live"))
	assert.NoDirExists(t, root.RunDir("gone"))
	assert.DirExists(t, userDir, "a directory runtimed did not create is never swept")
	assert.FileExists(t, filepath.Join(string(root), "a-file"))

	removed, err = root.Sweep(func(types.UID) bool { return false })
	require.NoError(t, err)
	assert.Equal(t, []types.UID{"live"}, removed, "a removed workspace leaves no marker behind")
}

func TestRemoveRepairsPermissions(t *testing.T) {
	root := Root(t.TempDir())
	dir, _, err := root.Materialize("uid-1", "echo", "")
	require.NoError(t, err)
	locked := filepath.Join(dir, "locked", "deeper")
	require.NoError(t, os.MkdirAll(locked, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(locked, "f"), nil, 0o644))
	require.NoError(t, os.Chmod(locked, 0))
	require.NoError(t, os.Chmod(filepath.Dir(locked), 0o500))
	require.NoError(t, root.Remove("uid-1"), "directories a program made read-only are removed")
	assert.NoDirExists(t, dir)
}

// An entry nobody can remove (here an immutable file; in a Pod also a busy
// mount point) makes Remove fail but keeps the marker, so the sweep retries.
func TestUnremovableWorkspaceIsSweptLater(t *testing.T) {
	root := Root(t.TempDir())
	dir, _, err := root.Materialize("uid-1", "echo", "")
	require.NoError(t, err)
	stuck := filepath.Join(dir, "stuck")
	require.NoError(t, os.WriteFile(stuck, nil, 0o644))
	if out, err := exec.Command("chattr", "+i", stuck).CombinedOutput(); err != nil {
		t.Skipf("cannot make a file immutable here (needs CAP_LINUX_IMMUTABLE and a filesystem with attributes): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", stuck).Run() })

	require.Error(t, root.Remove("uid-1"))
	removed, err := root.Sweep(func(types.UID) bool { return false })
	require.Error(t, err)
	assert.Empty(t, removed)

	require.NoError(t, exec.Command("chattr", "-i", stuck).Run())
	removed, err = root.Sweep(func(types.UID) bool { return false })
	require.NoError(t, err)
	assert.Equal(t, []types.UID{"uid-1"}, removed)
	assert.NoDirExists(t, dir)
}
