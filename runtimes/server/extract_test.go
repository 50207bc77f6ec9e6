package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// entry is one entry of a test archive.
type entry struct {
	name, link string
	typ        byte
	mode       int64
	data       string
	size       int64 // the header's size when not len(data)
}

func file(name, data string) entry {
	return entry{name: name, typ: tar.TypeReg, mode: 0o644, data: data}
}
func dir(name string) entry             { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) entry { return entry{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeLink, link: target}
}

var archiveTime = time.Date(2023, 3, 4, 5, 6, 7, 0, time.UTC)

// archive is a tar archive of entries; a header's size may lie, so the
// bytes are written past the tar writer's checks.
func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		size := int64(len(e.data))
		if e.size != 0 {
			size = e.size
		}
		if e.typ != tar.TypeReg {
			size = 0
		}
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: size, ModTime: archiveTime, Format: tar.FormatPAX}))
		if e.size != 0 {
			// A header that claims more than the archive holds: the
			// stream ends first.
			_, _ = tw.Write([]byte(e.data))
			return buf.Bytes()
		}
		_, err := tw.Write([]byte(e.data))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// extract sends data to be extracted into dir, in messages of msgBytes.
func (h *harness) extract(ctx context.Context, reg *runtimev1.RegistrationStatus, dir string, data []byte, msgBytes int) (*runtimev1.WriteFileResponse, error) {
	stream, err := h.functions.WriteFile(ctx)
	if err != nil {
		return nil, err
	}
	msg := &runtimev1.WriteFileRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Path: dir, Extract: runtimev1.Extract_EXTRACT_TAR}
	for first := true; first || len(data) > 0; first = false {
		n := min(msgBytes, len(data))
		msg.Data, data = data[:n], data[n:]
		if err := stream.Send(msg); err != nil {
			break // the error comes with CloseAndRecv
		}
		msg = &runtimev1.WriteFileRequest{}
	}
	return stream.CloseAndRecv()
}

// tree is what dir holds: each path (slash-separated, relative) with its
// kind and its content or link target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			require.NoError(t, err)
			out[rel] = "-> " + target
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			out[rel] = "file " + string(b)
		}
		return nil
	}))
	return out
}

func TestExtractTar(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	require.NoError(t, os.WriteFile(filepath.Join(h.workDir, "keep.txt"), []byte("mine"), 0o644))

	a := archive(t,
		dir("src/"),
		entry{name: "src/run.sh", typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\necho hi\n"},
		file("./src/pkg/mod.py", "x = 1\n"), // a parent that is not an entry of its own
		symlink("src/latest", "run.sh"),
		symlink("up", "../keep.txt"), // out of proj, still in the workspace
		hardlink("src/run-again.sh", "src/run.sh"),
		file("README", strings.Repeat("r", 3*sandboxfile.ChunkBytes)),
	)
	resp, err := h.extract(ctx, reg, "proj", a, 100<<10)
	require.NoError(t, err)
	assert.Equal(t, "proj", resp.GetPath())
	assert.Equal(t, int64(4), resp.GetFiles(), "regular files and hard links")
	assert.Equal(t, int64(len("#!/bin/sh\necho hi\n")+len("x = 1\n")+3*sandboxfile.ChunkBytes), resp.GetSize())

	got := tree(t, filepath.Join(h.workDir, "proj"))
	assert.Equal(t, map[string]string{
		"src":              "dir",
		"src/run.sh":       "file #!/bin/sh\necho hi\n",
		"src/run-again.sh": "file #!/bin/sh\necho hi\n",
		"src/pkg":          "dir",
		"src/pkg/mod.py":   "file x = 1\n",
		"src/latest":       "-> run.sh",
		"up":               "-> ../keep.txt",
		"README":           "file " + strings.Repeat("r", 3*sandboxfile.ChunkBytes),
	}, got)
	fi, err := os.Stat(filepath.Join(h.workDir, "proj/src/run.sh"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o755), fi.Mode().Perm(), "modes come from the archive")
	assert.True(t, fi.ModTime().Equal(archiveTime), "so do modification times: %v", fi.ModTime())
	a1, err := os.Stat(filepath.Join(h.workDir, "proj/src/run-again.sh"))
	require.NoError(t, err)
	assert.True(t, os.SameFile(fi, a1), "a hard link is one")
	assert.Empty(t, extractions(t, h.workDir), "no temporary directory is left")

	t.Run("a second archive merges into the directory", func(t *testing.T) {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, err := zw.Write(archive(t, file("src/run.sh", "new"), file("src/pkg/new.py", "y = 2\n"), file("docs/a.md", "a")))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		resp, err := h.extract(ctx, reg, "proj", gz.Bytes(), 1<<10)
		require.NoError(t, err, "gzip is taken as well")
		assert.Equal(t, int64(3), resp.GetFiles())
		got := tree(t, filepath.Join(h.workDir, "proj"))
		assert.Equal(t, "file new", got["src/run.sh"], "a file is replaced")
		assert.Equal(t, "file #!/bin/sh\necho hi\n", got["src/run-again.sh"], "its old hard link keeps the old file")
		assert.Equal(t, "file x = 1\n", got["src/pkg/mod.py"], "what the archive does not hold stays")
		assert.Equal(t, "file y = 2\n", got["src/pkg/new.py"])
		assert.Equal(t, "file a", got["docs/a.md"])
		assert.Empty(t, extractions(t, filepath.Join(h.workDir, "proj")))
	})

	t.Run("into the workspace itself", func(t *testing.T) {
		_, err := h.extract(ctx, reg, ".", archive(t, file("top.txt", "top")), 1<<10)
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(h.workDir, "top.txt"))
		require.NoError(t, err)
		assert.Equal(t, "top", string(b))
		assert.Empty(t, extractions(t, h.workDir))
		_, err = h.extract(ctx, reg, filepath.Join(h.workDir, "abs"), archive(t, file("f", "f")), 1<<10)
		require.NoError(t, err, "an absolute path inside the workspace")
		assert.FileExists(t, filepath.Join(h.workDir, "abs", "f"))
	})

	t.Run("through a link to a directory inside", func(t *testing.T) {
		require.NoError(t, os.Symlink("proj/docs", filepath.Join(h.workDir, "docs-link")))
		_, err := h.extract(ctx, reg, "docs-link", archive(t, file("b.md", "b")), 1<<10)
		require.NoError(t, err)
		assert.FileExists(t, filepath.Join(h.workDir, "proj/docs/b.md"))
		fi, err := os.Lstat(filepath.Join(h.workDir, "docs-link"))
		require.NoError(t, err)
		assert.Equal(t, fs.ModeSymlink, fi.Mode().Type(), "the link stays a link")
	})

	t.Run("an empty archive makes the directory", func(t *testing.T) {
		resp, err := h.extract(ctx, reg, "a/b/empty", archive(t), 1<<10)
		require.NoError(t, err)
		assert.Equal(t, int64(0), resp.GetFiles())
		assert.DirExists(t, filepath.Join(h.workDir, "a/b/empty"))
	})
}

// TestExtractTarRefusesHostileArchives: an archive with any entry that
// would leave the workspace, or that is not a file, directory or link, is
// refused whole: nothing of it is extracted, inside or out.
func TestExtractTarRefusesHostileArchives(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(h.workDir, "dir-out")))
	require.NoError(t, os.MkdirAll(filepath.Join(h.workDir, "target", "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(h.workDir, "target", "file"), []byte("f"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(h.workDir, "plain"), []byte("p"), 0o644))
	ok := file("first-ok.txt", "extracted only if all is") // every archive starts with an entry that is fine

	cases := []struct {
		name string
		dir  string
		data []byte
		code codes.Code
	}{
		{"an entry up and out by ..", "target", archive(t, ok, file("../../evil", "x")), codes.InvalidArgument},
		{"an entry that climbs out in the middle", "target", archive(t, ok, file("a/../../../evil", "x")), codes.InvalidArgument},
		{"an absolute entry", "target", archive(t, ok, file(filepath.Join(outside, "evil"), "x")), codes.InvalidArgument},
		{"a symbolic link to an absolute path outside", "target", archive(t, ok, symlink("l", outside)), codes.InvalidArgument},
		{"a symbolic link that climbs out", "target", archive(t, ok, symlink("l", "../../..")), codes.InvalidArgument},
		{"a symbolic link out, then a write through it", "target", archive(t, ok, symlink("l", outside), file("l/pwned", "x")), codes.InvalidArgument},
		{"a link inside, then a write through it that climbs out", ".", archive(t, ok, symlink("l", "target"), file("l/../../evil", "x")), codes.InvalidArgument},
		{"a link in the archive that a later entry writes through, out of the extraction", "target", archive(t, ok, symlink("l", "../plain"), file("l/x", "x")), codes.InvalidArgument},
		{"a link to its own directory, then a link through it that climbs out", "target", archive(t, ok, symlink("sub2", "."), symlink("sub2/l", "../../x")), codes.InvalidArgument},
		{"a hard link to a file outside", "target", archive(t, ok, hardlink("h", "../../"+filepath.Base(outside)+"/secret")), codes.InvalidArgument},
		{"a hard link to an absolute path", "target", archive(t, ok, hardlink("h", filepath.Join(outside, "secret"))), codes.InvalidArgument},
		{"a hard link to a file of the workspace not in the archive", "target", archive(t, ok, hardlink("h", "file")), codes.InvalidArgument},
		{"a FIFO", "target", archive(t, ok, entry{name: "fifo", typ: tar.TypeFifo, mode: 0o644}), codes.InvalidArgument},
		{"a device", "target", archive(t, ok, entry{name: "null", typ: tar.TypeChar, mode: 0o666}), codes.InvalidArgument},
		{"a header that claims far more than the archive holds", "target", archive(t, ok, entry{name: "huge", typ: tar.TypeReg, mode: 0o644, data: "short", size: 1 << 40}), codes.InvalidArgument},
		{"bytes that are not an archive", "target", bytes.Repeat([]byte("not a tar "), 200), codes.InvalidArgument},
		{"an archive cut short", "target", cut(archive(t, ok, file("b", strings.Repeat("b", 4096))), 2000), codes.InvalidArgument},
		{"a file where the directory has a directory", "target", archive(t, ok, file("sub", "x")), codes.InvalidArgument},
		{"a directory where the directory has a file", "target", archive(t, ok, dir("file/"), file("file/x", "x")), codes.InvalidArgument},
		{"a target that is a file", "plain", archive(t, ok), codes.InvalidArgument},
		{"a target outside", "../elsewhere", archive(t, ok), codes.InvalidArgument},
		{"a target through a link outside", "dir-out/x", archive(t, ok), codes.InvalidArgument},
	}
	before := tree(t, h.workDir)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.extract(ctx, reg, tc.dir, tc.data, 4<<10)
			t.Log(err)
			requireCode(t, tc.code, err)
			assert.Equal(t, before, tree(t, h.workDir), "the workspace is as it was")
			assert.Empty(t, extractions(t, h.workDir))
			assert.Empty(t, extractions(t, filepath.Join(h.workDir, "target")))
		})
	}
	assert.Equal(t, map[string]string{"secret": "file s"}, tree(t, outside), "nothing was written outside")
	_, err := os.Lstat(filepath.Join(h.workDir, "..", "evil"))
	assert.True(t, os.IsNotExist(err))
}

// TestExtractTarCancelledLeavesNothing: an upload that breaks off in the
// middle of an archive leaves no entry and no temporary directory.
func TestExtractTarCancelledLeavesNothing(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	a := archive(t, file("a.txt", "a"), file("big", strings.Repeat("b", 2*sandboxfile.ChunkBytes)))

	upCtx, cancel := context.WithCancel(ctx)
	stream, err := h.functions.WriteFile(upCtx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&runtimev1.WriteFileRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Path: "proj", Extract: runtimev1.Extract_EXTRACT_TAR, Data: a[:sandboxfile.ChunkBytes]}))
	// The first entry is in the temporary directory once the server read it.
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(extractions(t, h.workDir)) == 1, nil
	}))
	cancel()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(extractions(t, h.workDir)) == 0, nil
	}), "the temporary directory of a cancelled extraction is removed")
	assert.NoDirExists(t, filepath.Join(h.workDir, "proj"))
}

// extractions lists the temporary directories of extractions in dir.
func extractions(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".kruntimes-extract-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// cut is data without its last n bytes.
func cut(data []byte, n int) []byte { return data[:len(data)-n] }
