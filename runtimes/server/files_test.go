package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/sandboxfile"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimes/python"
	"kruntimes.io/kruntimes/runtimes/server"
)

// newSandboxHarness is a Python Runtime Server that serves the sandbox's
// files, with a sandbox registered.
func newSandboxHarness(t *testing.T) (*harness, *runtimev1.RegistrationStatus) {
	t.Helper()
	h := newHarnessWith(t, "python", nil, 64<<10, func(o *server.Options) { o.FileHandlers = []string{python.SandboxHandler} })
	return h, h.registerReady(t, "sb-uid", python.SandboxHandler)
}

// upload writes data to path in messages of msgBytes, and closes.
func (h *harness) upload(ctx context.Context, reg *runtimev1.RegistrationStatus, path string, data []byte, msgBytes int) (*runtimev1.WriteFileResponse, error) {
	stream, err := h.functions.WriteFile(ctx)
	if err != nil {
		return nil, err
	}
	msg := &runtimev1.WriteFileRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Path: path}
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

// download reads path whole, and checks each chunk's bound.
func (h *harness) download(ctx context.Context, t *testing.T, reg *runtimev1.RegistrationStatus, path string) ([]byte, error) {
	stream, err := h.functions.ReadFile(ctx, &runtimev1.ReadFileRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Path: path})
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
			return nil, err
		}
		assert.LessOrEqual(t, len(chunk.GetData()), sandboxfile.ChunkBytes)
		out.Write(chunk.GetData())
	}
}

func TestFilesRoundTrip(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	data := make([]byte, 5*sandboxfile.ChunkBytes+123)
	_, _ = rand.Read(data)

	resp, err := h.upload(ctx, reg, "deep/er/data.bin", data, 100<<10)
	require.NoError(t, err)
	assert.Equal(t, "deep/er/data.bin", resp.GetPath())
	assert.Equal(t, int64(len(data)), resp.GetSize())

	got, err := h.download(ctx, t, reg, "deep/er/data.bin")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the file read back is the file written")

	// An absolute path inside the workspace names the same file.
	got, err = h.download(ctx, t, reg, filepath.Join(h.workDir, "deep/er/data.bin"))
	require.NoError(t, err)
	assert.Len(t, got, len(data))

	_, err = h.upload(ctx, reg, "empty", nil, 1)
	require.NoError(t, err)
	got, err = h.download(ctx, t, reg, "empty")
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestFilesWriteKeepsModeAndFollowsLinksInside(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	require.NoError(t, os.WriteFile(filepath.Join(h.workDir, "run.sh"), []byte("old"), 0o755))
	require.NoError(t, os.Symlink("run.sh", filepath.Join(h.workDir, "link")))

	_, err := h.upload(ctx, reg, "link", []byte("#!/bin/sh\n"), 1<<10)
	require.NoError(t, err)
	fi, err := os.Lstat(filepath.Join(h.workDir, "link"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link stays a link")
	content, err := os.ReadFile(filepath.Join(h.workDir, "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\n", string(content), "the file the link points to is replaced")
	fi, err = os.Stat(filepath.Join(h.workDir, "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "a script stays executable")
}

// TestFilesWriteIsAtomic: readers of a file being replaced see the old
// bytes or the new ones, never a mix or a file cut short, and an upload
// cancelled on the way leaves the old file and no temporary file.
func TestFilesWriteIsAtomic(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	size := 3 * sandboxfile.ChunkBytes
	old, new := bytes.Repeat([]byte("o"), size), bytes.Repeat([]byte("n"), size)
	_, err := h.upload(ctx, reg, "f", old, sandboxfile.ChunkBytes)
	require.NoError(t, err)

	t.Run("a concurrent reader sees the old or the new file", func(t *testing.T) {
		done := make(chan struct{})
		var wg sync.WaitGroup
		sawNew := make([]bool, 4)
		for i := range sawNew {
			wg.Go(func() {
				for {
					// One more read after the upload finished: it must see the new bytes.
					finished := isDone(done)
					got, err := h.download(ctx, t, reg, "f")
					if !assert.NoError(t, err) {
						return
					}
					switch {
					case bytes.Equal(got, new):
						sawNew[i] = true
					case !bytes.Equal(got, old):
						t.Errorf("a reader saw %d bytes that are neither the old file nor the new one", len(got))
						return
					}
					if finished {
						return
					}
				}
			})
		}
		_, err := h.upload(ctx, reg, "f", new, 16<<10)
		close(done)
		require.NoError(t, err)
		wg.Wait()
		assert.Equal(t, []bool{true, true, true, true}, sawNew)
	})

	t.Run("a cancelled upload leaves the old file and no temporary file", func(t *testing.T) {
		upCtx, cancel := context.WithCancel(ctx)
		stream, err := h.functions.WriteFile(upCtx)
		require.NoError(t, err)
		require.NoError(t, stream.Send(&runtimev1.WriteFileRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Path: "f", Data: old[:1000]}))
		// The temporary file exists once the server took the first message.
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return len(uploads(t, h.workDir)) == 1, nil
		}))
		require.NoError(t, stream.Send(&runtimev1.WriteFileRequest{Data: old[:1000]}))
		cancel()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return len(uploads(t, h.workDir)) == 0, nil
		}), "the temporary file of a cancelled upload is removed")
		got, err := os.ReadFile(filepath.Join(h.workDir, "f"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(new, got), "the file is still the one written last")
	})
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// uploads lists the temporary files of uploads in progress in dir.
func uploads(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".kruntimes-upload-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestFilesRefused(t *testing.T) {
	h, reg := newSandboxHarness(t)
	ctx := testContext(t)
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(h.workDir, "link-out")))
	require.NoError(t, os.Symlink(outside, filepath.Join(h.workDir, "dir-out")))
	require.NoError(t, os.Mkdir(filepath.Join(h.workDir, "dir"), 0o755))

	cases := []struct {
		name, path string
		read       codes.Code
		write      codes.Code
	}{
		{name: "a path up and out by ..", path: "../x", read: codes.InvalidArgument, write: codes.InvalidArgument},
		{name: "an absolute path elsewhere", path: "/etc/passwd", read: codes.InvalidArgument, write: codes.InvalidArgument},
		{name: "a symbolic link to a file outside", path: "link-out", read: codes.InvalidArgument, write: codes.InvalidArgument},
		{name: "a path through a symbolic link to a directory outside", path: "dir-out/secret", read: codes.InvalidArgument, write: codes.InvalidArgument},
		{name: "a directory", path: "dir", read: codes.InvalidArgument, write: codes.InvalidArgument},
		{name: "the workspace itself", path: ".", read: codes.InvalidArgument, write: codes.InvalidArgument},
		{name: "no path", path: "", read: codes.InvalidArgument, write: codes.InvalidArgument},
		{name: "a missing file is not found, and written anew", path: "missing", read: codes.NotFound, write: codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.download(ctx, t, reg, tc.path)
			requireCode(t, tc.read, err)
			_, err = h.upload(ctx, reg, tc.path, []byte("x"), 1<<10)
			requireCode(t, tc.write, err)
		})
	}
	secret, err := os.ReadFile(filepath.Join(outside, "secret"))
	require.NoError(t, err)
	assert.Equal(t, "s", string(secret), "nothing outside the workspace was written")
	assert.Empty(t, uploads(t, h.workDir))
}

func TestFilesOnlyForSandboxes(t *testing.T) {
	h := newHarnessWith(t, "python", nil, 64<<10, func(o *server.Options) { o.FileHandlers = []string{python.SandboxHandler} })
	h.writeFile(t, "handlers.py", "def noop(event, context):\n    return None\n")
	h.writeFile(t, "f", "data")
	ctx := testContext(t)
	reg := h.registerReady(t, "fn-uid", "handlers.noop")

	_, err := h.download(ctx, t, reg, "f")
	requireCode(t, codes.FailedPrecondition, err)
	_, err = h.upload(ctx, reg, "f", []byte("x"), 1<<10)
	requireCode(t, codes.FailedPrecondition, err)

	stale := &runtimev1.RegistrationStatus{RunUid: reg.GetRunUid(), RegistrationId: "reg-stale"}
	_, err = h.download(ctx, t, stale, "f")
	requireCode(t, codes.FailedPrecondition, err)
}
