package repobin

import (
	"context"
	"debug/buildinfo"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRepo writes a module named like this repository with one command that
// builds and one that does not.
func fakeRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"go.mod":             "module kruntimes.io/kruntimes\n\ngo 1.26\n",
		"cmd/good/main.go":   "package main\n\nfunc main() {}\n",
		"cmd/broken/main.go": "package main\n\nfunc main() { undefinedFunction() }\n",
	}
	for name, content := range files {
		path := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return root
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return info.Sys().(*syscall.Stat_t).Ino
}

func TestBuild(t *testing.T) {
	root := fakeRepo(t)
	good := Command{Name: "good", Package: "./cmd/good"}
	ctx := context.Background()

	err := Build(ctx, root, good, Command{Name: "broken", Package: "./cmd/broken"}, Command{Name: "missing", Package: "./cmd/missing"})
	require.Error(t, err, "a command that does not build fails the build")
	assert.Contains(t, err.Error(), "building bin/broken", "every failure is named")
	assert.Contains(t, err.Error(), "undefinedFunction", "with the compiler's words")
	assert.Contains(t, err.Error(), "building bin/missing", "a package that does not exist is a failure, not a skip")
	assert.NotContains(t, err.Error(), "bin/good")

	built := Path(root, "good")
	info, err := buildinfo.ReadFile(built)
	require.NoError(t, err, "the command that builds is built despite the others")
	race, tags := settingsOf(info)
	assert.Equal(t, RaceEnabled, race, "race-built exactly when this test binary is")
	assert.Equal(t, "fieldsv1string", tags, "built with the tags of every kruntimes binary: managedFields interned")

	require.NoError(t, Build(ctx, root, Command{Name: "quick", Package: "./cmd/good", NoRace: true}))
	race, _ = buildSettings(t, Path(root, "quick"))
	assert.False(t, race, "NoRace: built without -race whatever this test binary is")

	before := inode(t, built)
	require.NoError(t, Build(ctx, root, good))
	assert.Equal(t, before, inode(t, built), "an up-to-date binary is left alone, not linked again")
}

func TestRepoRoot(t *testing.T) {
	root := fakeRepo(t)
	got, err := RepoRoot(filepath.Join(root, "cmd", "good"))
	require.NoError(t, err)
	assert.Equal(t, root, got)

	_, err = RepoRoot(t.TempDir())
	assert.ErrorContains(t, err, "no kruntimes.io/kruntimes go.mod")
}

// buildSettings returns whether the binary at path was race-built, and its
// build tags.
func buildSettings(t *testing.T, path string) (race bool, tags string) {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	require.NoError(t, err)
	return settingsOf(info)
}

func settingsOf(info *debug.BuildInfo) (race bool, tags string) {
	for _, s := range info.Settings {
		if s.Key == "-race" && s.Value == "true" {
			race = true
		}
		if s.Key == "-tags" {
			tags = s.Value
		}
	}
	return race, tags
}
