package app

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTarDirectoryRoundTrip: a directory tarred by krt cp -r and extracted
// again is the same tree: files with their bytes, modes and modification
// times, empty directories, and links stored as links.
func TestTarDirectoryRoundTrip(t *testing.T) {
	src := t.TempDir()
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, os.MkdirAll(filepath.Join(src, "a/b"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(src, "empty"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(src, "a/b/data.bin"), bytes.Repeat([]byte{7}, 300<<10), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.Chtimes(filepath.Join(src, "run.sh"), mtime, mtime))
	require.NoError(t, os.Symlink("a/b/data.bin", filepath.Join(src, "link")))

	var archive bytes.Buffer
	require.NoError(t, tarDirectory(src, &archive))
	dst := filepath.Join(t.TempDir(), "made")
	out, err := extractTar(&archive, dst)
	require.NoError(t, err)
	assert.Empty(t, out.skipped)
	assert.EqualValues(t, 2, out.files)
	assert.EqualValues(t, 300<<10+10, out.bytes)

	data, err := os.ReadFile(filepath.Join(dst, "a/b/data.bin"))
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{7}, 300<<10), data)
	fi, err := os.Stat(filepath.Join(dst, "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), fi.Mode().Perm())
	assert.True(t, fi.ModTime().Equal(mtime), "modification time kept: %s", fi.ModTime())
	fi, err = os.Stat(filepath.Join(dst, "empty"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Equal(t, fs.FileMode(0o750), fi.Mode().Perm())
	target, err := os.Readlink(filepath.Join(dst, "link"))
	require.NoError(t, err)
	assert.Equal(t, "a/b/data.bin", target, "a link is stored as a link")
}

// TestTarDirectoryRefusesWhatIsNoFile: a FIFO stops the copy, naming it.
func TestTarDirectoryRefusesWhatIsNoFile(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644))
	err := tarDirectory(src, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pipe")
}

// TestExtractTarStaysInItsDirectory: an archive from a sandbox is its
// tenant's: nothing it holds is written outside the directory it goes to,
// and no link it leaves there leads out, not even a chain of links each
// of which stays inside by itself.
func TestExtractTarStaysInItsDirectory(t *testing.T) {
	base := t.TempDir()
	dst := filepath.Join(base, "dst")
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.Mkdir(outside, 0o755))
	require.NoError(t, os.MkdirAll(dst, 0o755))
	// A link the user had in the directory: a file of the archive of the
	// same name replaces it, never writes through it.
	require.NoError(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dst, "replaced")))

	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	entry := func(hdr *tar.Header, body string) {
		hdr.Size = int64(len(body))
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		require.NoError(t, tw.WriteHeader(hdr))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	entry(&tar.Header{Name: "../escaped", Typeflag: tar.TypeReg}, "x")
	entry(&tar.Header{Name: "/abs", Typeflag: tar.TypeReg}, "x")
	entry(&tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, "")
	entry(&tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../outside"}, "")
	// Each link stays inside by itself; through sub/d, sub/e leads out.
	entry(&tar.Header{Name: "sub/e", Typeflag: tar.TypeSymlink, Linkname: "d/.."}, "")
	entry(&tar.Header{Name: "sub/d", Typeflag: tar.TypeSymlink, Linkname: ".."}, "")
	entry(&tar.Header{Name: "replaced", Typeflag: tar.TypeReg}, "mine")
	entry(&tar.Header{Name: "dev", Typeflag: tar.TypeChar}, "")
	entry(&tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg}, "fine")
	require.NoError(t, tw.Close())

	out, err := extractTar(&archive, dst)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"../escaped", "/abs", "etc -> /etc", "up -> ../outside", "dev", "sub/e -> d/.."}, out.skipped)
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing was written outside")
	_, err = os.Lstat(filepath.Join(base, "escaped"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Lstat(filepath.Join(dst, "sub/e"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "the link that leads out through another was removed")
	data, err := os.ReadFile(filepath.Join(dst, "replaced"))
	require.NoError(t, err)
	assert.Equal(t, "mine", string(data))
	fi, err := os.Lstat(filepath.Join(dst, "replaced"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the link was replaced by the file")
	data, err = os.ReadFile(filepath.Join(dst, "ok.txt"))
	require.NoError(t, err)
	assert.Equal(t, "fine", string(data))
}
