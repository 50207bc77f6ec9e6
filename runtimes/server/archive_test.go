package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/server"
)

// downloadArchive reads dir as an archive whole, and checks each chunk's
// bound.
func (h *harness) downloadArchive(ctx context.Context, t *testing.T, reg *runtimev1.RegistrationStatus, dir string, archive runtimev1.Archive) ([]byte, error) {
	stream, err := h.functions.ReadFile(ctx, &runtimev1.ReadFileRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Path: dir, Archive: archive})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
		assert.LessOrEqual(t, len(chunk.GetData()), sandboxfile.ChunkBytes, "a chunk is bounded")
		out.Write(chunk.GetData())
	}
}

// archiveEntries is the headers of a tar archive, in order, and the
// contents of its regular files.
func archiveEntries(t *testing.T, data []byte) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	var headers []*tar.Header
	contents := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers, contents
		}
		require.NoError(t, err)
		headers = append(headers, hdr)
		if hdr.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			contents[hdr.Name] = b
		}
	}
}

func names(headers []*tar.Header) []string {
	var out []string
	for _, h := range headers {
		out = append(out, h.Name)
	}
	return out
}

// TestReadArchiveRoundTrip: a tree archived by ReadFile and extracted by
// WriteFile's extract is the tree, modes and times included, whether the
// archive is gzip-compressed or not; entries come depth first, sorted.
func TestReadArchiveRoundTrip(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	src := filepath.Join(h.workDir, "src")
	big := make([]byte, 3*sandboxfile.ChunkBytes+11)
	_, _ = rand.Read(big)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for name, content := range map[string]string{
		"b/z.txt": "z", "b/a.txt": "a", "a.sh": "#!/bin/sh\necho hi\n", "c/d/e/deep.txt": "deep", "empty.txt": "",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(content), 0o644))
		require.NoError(t, os.Chtimes(filepath.Join(src, name), mtime, mtime))
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "big.bin"), big, 0o600))
	require.NoError(t, os.Chmod(filepath.Join(src, "a.sh"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(src, "emptydir"), 0o750))
	require.NoError(t, os.Symlink("b/a.txt", filepath.Join(src, "link")))
	require.NoError(t, os.Symlink("c", filepath.Join(src, "linkdir")))
	want := tree(t, src)
	require.NoError(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))

	for _, archive := range []runtimev1.Archive{runtimev1.Archive_ARCHIVE_TAR, runtimev1.Archive_ARCHIVE_TAR_GZIP} {
		t.Run(archive.String(), func(t *testing.T) {
			data, err := h.downloadArchive(ctx, t, reg, "src", archive)
			require.NoError(t, err)
			plain := data
			if archive == runtimev1.Archive_ARCHIVE_TAR_GZIP {
				gz, err := gzip.NewReader(bytes.NewReader(data))
				require.NoError(t, err)
				plain, err = io.ReadAll(gz)
				require.NoError(t, err)
			}
			headers, contents := archiveEntries(t, plain)
			assert.Equal(t, []string{"a.sh", "b/", "b/a.txt", "b/z.txt", "big.bin", "c/", "c/d/", "c/d/e/", "c/d/e/deep.txt",
				"empty.txt", "emptydir/", "link", "linkdir"}, names(headers), "depth first, sorted; the FIFO left out, links not followed")
			assert.Equal(t, big, contents["big.bin"])
			modes := map[string]int64{}
			for _, hdr := range headers {
				modes[hdr.Name] = hdr.Mode
				assert.Zero(t, hdr.Uid, "no owner is kept")
			}
			assert.Equal(t, int64(0o755), modes["a.sh"])
			assert.Equal(t, int64(0o600), modes["big.bin"])
			assert.Equal(t, int64(0o750), modes["emptydir/"])

			dst := "dst-" + archive.String()
			_, err = h.extract(ctx, reg, dst, data, sandboxfile.ChunkBytes)
			require.NoError(t, err)
			assert.Equal(t, want, tree(t, filepath.Join(h.workDir, dst)), "the tree extracted is the tree archived, but for the FIFO")
			for _, name := range []string{"a.sh", "big.bin", "emptydir"} {
				fw, err := os.Stat(filepath.Join(src, name))
				require.NoError(t, err)
				fg, err := os.Stat(filepath.Join(h.workDir, dst, name))
				require.NoError(t, err)
				assert.Equal(t, fw.Mode(), fg.Mode(), name)
			}
			fg, err := os.Stat(filepath.Join(h.workDir, dst, "b/a.txt"))
			require.NoError(t, err)
			assert.True(t, mtime.Equal(fg.ModTime()), "the modification time is kept: %v", fg.ModTime())
		})
	}
}

// TestReadArchiveNeverFollowsLinks: a link to a file or a directory
// outside the workspace is stored as a link, and what it points to is
// never read.
func TestReadArchiveNeverFollowsLinks(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cr3t-outside"), 0o644))
	src := filepath.Join(h.workDir, "src")
	require.NoError(t, os.MkdirAll(src, 0o755))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "to-secret")))
	require.NoError(t, os.Symlink(outside, filepath.Join(src, "to-outside")))
	require.NoError(t, os.Symlink("../../..", filepath.Join(src, "up")))

	data, err := h.downloadArchive(ctx, t, reg, "src", runtimev1.Archive_ARCHIVE_TAR)
	require.NoError(t, err)
	assert.NotContains(t, string(data), "s3cr3t-outside", "a link's target is never read")
	headers, _ := archiveEntries(t, data)
	require.Len(t, headers, 3)
	for i, want := range []struct{ name, link string }{
		{"to-outside", outside}, {"to-secret", filepath.Join(outside, "secret")}, {"up", "../../.."},
	} {
		assert.Equal(t, want.name, headers[i].Name)
		assert.Equal(t, byte(tar.TypeSymlink), headers[i].Typeflag, want.name)
		assert.Equal(t, want.link, headers[i].Linkname, want.name)
	}

	// A path that is itself a link out of the workspace is refused.
	_, err = h.downloadArchive(ctx, t, reg, "src/to-outside", runtimev1.Archive_ARCHIVE_TAR)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}

// TestReadArchiveRefusals: what is not a directory of the workspace is
// refused before anything is sent.
func TestReadArchiveRefusals(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	require.NoError(t, os.WriteFile(filepath.Join(h.workDir, "f.txt"), []byte("x"), 0o644))
	for name, c := range map[string]struct {
		path    string
		archive runtimev1.Archive
		code    codes.Code
	}{
		"a missing directory is not found":        {"nope", runtimev1.Archive_ARCHIVE_TAR, codes.NotFound},
		"a file is not a directory":               {"f.txt", runtimev1.Archive_ARCHIVE_TAR, codes.InvalidArgument},
		"a path out of the workspace is refused":  {"../", runtimev1.Archive_ARCHIVE_TAR, codes.InvalidArgument},
		"an absolute path outside is refused":     {"/etc", runtimev1.Archive_ARCHIVE_TAR_GZIP, codes.InvalidArgument},
		"an archive format it does not know":      {".", runtimev1.Archive(42), codes.InvalidArgument},
		"an empty path names no directory at all": {"", runtimev1.Archive_ARCHIVE_TAR, codes.InvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := h.downloadArchive(ctx, t, reg, c.path, c.archive)
			assert.Equal(t, c.code, status.Code(err), "%v", err)
			assert.Empty(t, data, "nothing is sent")
		})
	}

	// The workspace itself, as "." or absolute, is a directory.
	data, err := h.downloadArchive(ctx, t, reg, h.workDir, runtimev1.Archive_ARCHIVE_TAR)
	require.NoError(t, err)
	headers, contents := archiveEntries(t, data)
	assert.Contains(t, names(headers), "f.txt")
	assert.Equal(t, "x", string(contents["f.txt"]))
}

// hookWriter calls hook once, on the first write after the first after
// bytes.
type hookWriter struct {
	w       io.Writer
	after   int
	written int
	hook    func()
}

func (h *hookWriter) Write(p []byte) (int, error) {
	if h.hook != nil && h.written >= h.after {
		h.hook()
		h.hook = nil
	}
	h.written += len(p)
	return h.w.Write(p)
}

// TestWriteTarFileChangingMidRead: a file that grows while it is read is
// archived at the size it had when opened, and the archive is whole; one
// that shrinks fails the archive, never pads it with bytes it did not
// hold.
func TestWriteTarFileChangingMidRead(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	name := filepath.Join(dir, "tree", "log")
	require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })

	t.Run("grows", func(t *testing.T) {
		require.NoError(t, os.WriteFile(name, data, 0o644))
		var out bytes.Buffer
		w := &hookWriter{w: &out, after: 512, hook: func() {
			f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte("appended meanwhile"))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}}
		archived, err := server.WriteTar(context.Background(), root, "tree", w)
		require.NoError(t, err)
		assert.Equal(t, server.Archived{Entries: 1, Files: 1, Bytes: int64(len(data))}, archived)
		headers, contents := archiveEntries(t, out.Bytes())
		require.Len(t, headers, 1)
		assert.Equal(t, data, contents["log"], "the file as it was when it was opened")
	})
	t.Run("shrinks", func(t *testing.T) {
		require.NoError(t, os.WriteFile(name, data, 0o644))
		var out bytes.Buffer
		w := &hookWriter{w: &out, after: 512, hook: func() { require.NoError(t, os.Truncate(name, 100)) }}
		_, err := server.WriteTar(context.Background(), root, "tree", w)
		require.ErrorIs(t, err, server.ErrFileShrank)
		tr := tar.NewReader(bytes.NewReader(out.Bytes()))
		_, err = tr.Next()
		require.NoError(t, err)
		_, err = io.ReadAll(tr)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "what was written is an archive cut short, not a wrong one")
	})
	t.Run("a cancelled walk stops", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := server.WriteTar(ctx, root, "tree", io.Discard)
		assert.ErrorIs(t, err, context.Canceled)
	})
}
