package workspace

import (
	"os"
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

func TestSweepKeepsWhatIsNamed(t *testing.T) {
	root := Root(t.TempDir())
	for _, uid := range []types.UID{"live", "gone"} {
		_, _, err := root.Materialize(uid, "echo", "")
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(string(root), "a-file"), nil, 0o644))
	removed, err := root.Sweep(func(uid types.UID) bool { return uid == "live" })
	require.NoError(t, err)
	assert.Equal(t, []types.UID{"gone"}, removed)
	assert.DirExists(t, root.RunDir("live"))
	assert.NoDirExists(t, root.RunDir("gone"))
	assert.FileExists(t, filepath.Join(string(root), "a-file"), "only Run directories are swept")
}
