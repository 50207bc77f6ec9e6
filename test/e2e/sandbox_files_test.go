package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster/nodeagent"
)

// sandboxFileBytes is the size of the file TestSandboxFilesThroughAggregation
// moves each way: more than any hop may hold (sandboxFileHeldBytes), and
// moved well within kube-apiserver's 60 s request timeout on a loaded
// machine (race-built hops move 9-19 MiB/s). $KRUNTIMES_E2E_SANDBOX_FILE_MIB
// makes it another size, for docs/benchmarks.md's measurement.
func sandboxFileBytes(t *testing.T) int64 {
	mib := int64(128)
	if v := os.Getenv("KRUNTIMES_E2E_SANDBOX_FILE_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "KRUNTIMES_E2E_SANDBOX_FILE_MIB")
		mib = n
	}
	return mib << 20
}

// sandboxFileHeldBytes bounds how much a hop's peak RSS may grow while
// the file moves: a fraction of the file, room for a race-built binary's
// buffers and GC.
const sandboxFileHeldBytes = 96 << 20

// TestSandboxFilesThroughAggregation: a 128 MiB file goes into a sandbox
// with PUT runs/files and comes back with GET, through kube-apiserver's
// aggregation, streamed: generated and hashed on the fly by the test, and
// held by none of kruntimes-apiserver, runtimed and the Runtime Server
// (their peak RSS grows by a fraction of it). A path that leaves the
// workspace is 400, a missing file 404; kruntimes-view may not read a
// sandbox's files (403) and kruntimes-edit may; a sandbox not Ready yet is
// 503 with Retry-After, one that ended is 409.
func TestSandboxFilesThroughAggregation(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sandbox-files")
	ctx := framework.Context(t, 10*time.Minute)
	_, err := client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	createRun(ctx, t, client, ns, functionRun("box", "python", "", "", "kruntimes.sandbox"))
	run := waitForRun(ctx, t, client, ns, "box", functionTimeout, "Ready", inPhase(lifecycle.Ready))
	pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, run.Status.AssignedPod, metav1.GetOptions{})
	require.NoError(t, err)
	podDir := nodeagent.PodDir(filepath.Join(f.Cluster.Config().StateDir, "pods"), pod.UID)
	hops := map[string]int{"kruntimes-apiserver": f.Cluster.KruntimesReplicaPIDs()[0]}
	for _, exe := range []string{"runtimed", "kruntimes-runtime"} {
		hops[exe] = podProcess(exe, podDir)
		require.NotZero(t, hops[exe], "the %s of Pod %s", exe, pod.Name)
	}

	admin := newFileClient(t, f.AdminConfig, ns, "box")
	size := sandboxFileBytes(t)
	t.Run("a large file up and down, streamed by every hop", func(t *testing.T) {
		peakBefore := map[string]int64{}
		for name, pid := range hops {
			peakBefore[name] = vmHWM(pid)
		}
		rss := newRSSSampler(hops)

		started := time.Now()
		sent := sha256.New()
		code, body := admin.put(ctx, t, "data/big.bin", io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), sent))
		require.Equal(t, http.StatusOK, code, "%s", body)
		up := time.Since(started)
		var written struct {
			Path string `json:"path"`
			Size int64  `json:"size"`
		}
		require.NoError(t, json.Unmarshal(body, &written), "%s", body)
		assert.Equal(t, "data/big.bin", written.Path)
		assert.Equal(t, size, written.Size)

		started = time.Now()
		resp := admin.get(ctx, t, "data/big.bin")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
		received := sha256.New()
		n, err := io.Copy(received, resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err)
		down := time.Since(started)
		assert.Equal(t, size, n)
		assert.Equal(t, fmt.Sprintf("%x", sent.Sum(nil)), fmt.Sprintf("%x", received.Sum(nil)), "the file read back is the file written")

		t.Logf("%d MiB up in %s (%.0f MiB/s), down in %s (%.0f MiB/s)", size>>20,
			up.Round(time.Millisecond), mib(size)/up.Seconds(), down.Round(time.Millisecond), mib(size)/down.Seconds())
		for name, r := range rss.stop() {
			peak := vmHWM(r.pid)
			t.Logf("%s (pid %d): RSS %.1f MiB before, at most %.1f MiB sampled, %.1f MiB after; VmHWM %.1f → %.1f MiB",
				name, r.pid, mib(r.before), mib(r.max), mib(r.after), mib(peakBefore[name]), mib(peak))
			assert.Less(t, r.max-r.before, int64(sandboxFileHeldBytes), "%s held a share of the file", name)
			assert.Less(t, peak-peakBefore[name], int64(sandboxFileHeldBytes), "%s's peak grew with the file", name)
		}
	})

	t.Run("a path that leaves the workspace is 400, a missing file 404", func(t *testing.T) {
		code, body := admin.put(ctx, t, "../escape", strings.NewReader("x"))
		assert.Equal(t, http.StatusBadRequest, code, "%s", body)
		assert.Contains(t, string(body), "leaves the sandbox's workspace")
		resp := admin.get(ctx, t, "/etc/passwd")
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
		resp = admin.get(ctx, t, "no/such/file")
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", body)
	})

	t.Run("kruntimes-view may not read a sandbox's files; kruntimes-edit may", func(t *testing.T) {
		viewerConfig, _ := serviceAccountConfig(ctx, t, f, ns, "viewer", "kruntimes-view")
		editorConfig, _ := serviceAccountConfig(ctx, t, f, ns, "editor", "kruntimes-edit")
		editor := newFileClient(t, editorConfig, ns, "box")
		// RoleBindings take a moment to be seen: wait for the editor's.
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, _ *framework.Observed) (bool, error) {
			code, _ := editor.put(ctx, t, "small.txt", strings.NewReader("hello"))
			return code == http.StatusOK, nil
		}), "kruntimes-edit may update runs/files")
		resp := editor.get(ctx, t, "small.txt")
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, "hello", string(body))

		viewer := newFileClient(t, viewerConfig, ns, "box")
		_, err := client.KruntimesV1alpha1().Runs(ns).Get(ctx, "box", metav1.GetOptions{})
		require.NoError(t, err)
		resp = viewer.get(ctx, t, "small.txt")
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", body)
		code, body := viewer.put(ctx, t, "small.txt", strings.NewReader("overwritten"))
		assert.Equal(t, http.StatusForbidden, code, "%s", body)
	})

	t.Run("a sandbox not Ready yet is 503 with Retry-After", func(t *testing.T) {
		createRun(ctx, t, client, ns, functionRun("nowhere", "no-such-runtime", "", "", "kruntimes.sandbox"))
		var code int
		var body []byte
		var retryAfter string
		// The Run is in kruntimes-apiserver's watch cache once created;
		// poll only past a NotFound from a replica that has not seen it.
		err := framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, _ *framework.Observed) (bool, error) {
			resp := newFileClient(t, f.AdminConfig, ns, "nowhere").get(ctx, t, "small.txt")
			body, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			code, retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
			return code != http.StatusNotFound, nil
		})
		require.NoError(t, err, "the last answer: %d %s", code, body)
		assert.Equal(t, http.StatusServiceUnavailable, code, "%s", body)
		assert.Equal(t, "1", retryAfter, "a client is told when to ask again")
		assert.Contains(t, string(body), "not Ready")
	})

	t.Run("a sandbox that ended is 409", func(t *testing.T) {
		out, err := f.Kubectl(ctx, "-n", ns, "patch", "run", "box", "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		require.NoError(t, err, out)
		waitForRun(ctx, t, client, ns, "box", functionTimeout, "Cancelled", inPhase(lifecycle.Cancelled))
		// kruntimes-apiserver's watch cache follows the Run's storage:
		// poll until it saw the end.
		var code int
		var body []byte
		err = framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, _ *framework.Observed) (bool, error) {
			resp := admin.get(ctx, t, "small.txt")
			body, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			code = resp.StatusCode
			return code == http.StatusConflict, nil
		})
		require.NoError(t, err, "the last answer: %d %s", code, body)
		assert.Contains(t, string(body), "Cancelled")
	})
}

// TestSandboxTarUploadThroughAggregation: a tar archive, made as it is
// sent, goes into a sandbox with PUT runs/files?extract=tar through
// kube-apiserver's aggregation and is extracted into a directory; the
// sandbox's stat and list_files (recursive, bounded) then see the tree. An
// archive with an entry that leaves the workspace is 400 and leaves
// nothing; extract on a GET, or an unknown format, is 400.
func TestSandboxTarUploadThroughAggregation(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "sandbox-tar")
	ctx := framework.Context(t, 6*time.Minute)
	_, err := client.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	createRun(ctx, t, client, ns, functionRun("box", "python", "", "", "kruntimes.sandbox"))
	waitForRun(ctx, t, client, ns, "box", functionTimeout, "Ready", inPhase(lifecycle.Ready))
	admin := newFileClient(t, f.AdminConfig, ns, "box")
	invoker := newInvoker(t, f.AdminConfig)
	call := func(t *testing.T, req map[string]any) (map[string]any, *v1alpha1.InvokeError) {
		t.Helper()
		body, err := json.Marshal(req)
		require.NoError(t, err)
		r := invoker.post(ctx, t, invokePath(ns, "box"), body, nil).result(t)
		if r.Error != nil {
			return nil, r.Error
		}
		var out map[string]any
		require.NoError(t, json.Unmarshal(r.Output.Raw, &out), "%s", r.Output.Raw)
		return out, nil
	}
	names := func(out map[string]any) []string {
		var ns []string
		for _, e := range out["entries"].([]any) {
			ns = append(ns, e.(map[string]any)["name"].(string))
		}
		return ns
	}

	const bigBytes = 24 << 20
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	t.Run("an archive streamed in is extracted; stat and a recursive list see it", func(t *testing.T) {
		archive, w := io.Pipe()
		go func() {
			tw := tar.NewWriter(w)
			write := func(h *tar.Header, body io.Reader) error {
				h.ModTime = mtime
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if body != nil {
					_, err := io.Copy(tw, body)
					return err
				}
				return nil
			}
			err := errors.Join(
				write(&tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755}, nil),
				write(&tar.Header{Name: "src/main.py", Typeflag: tar.TypeReg, Mode: 0o755, Size: 12}, strings.NewReader("print('hi')\n")),
				write(&tar.Header{Name: "src/data/big.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: bigBytes}, io.LimitReader(rand.NewChaCha8([32]byte{3}), bigBytes)),
				write(&tar.Header{Name: "latest", Typeflag: tar.TypeSymlink, Linkname: "src/main.py"}, nil),
				tw.Close(),
			)
			_ = w.CloseWithError(err)
		}()
		code, body := admin.putExtract(ctx, t, "work/proj", "tar", archive)
		require.Equal(t, http.StatusOK, code, "%s", body)
		var extracted struct {
			Path  string `json:"path"`
			Files int64  `json:"files"`
			Bytes int64  `json:"bytes"`
		}
		require.NoError(t, json.Unmarshal(body, &extracted), "%s", body)
		assert.Equal(t, "work/proj", extracted.Path)
		assert.Equal(t, int64(2), extracted.Files)
		assert.Equal(t, int64(12+bigBytes), extracted.Bytes)

		out, ferr := call(t, map[string]any{"op": "stat", "path": "work/proj/src/data/big.bin"})
		require.Nil(t, ferr)
		assert.Equal(t, "file", out["type"])
		assert.EqualValues(t, bigBytes, out["size"])
		assert.EqualValues(t, 0o644, out["mode"])
		assert.EqualValues(t, mtime.Unix(), out["mtime"], "modification times come from the archive")
		out, ferr = call(t, map[string]any{"op": "stat", "path": "work/proj/latest"})
		require.Nil(t, ferr)
		assert.Equal(t, "symlink", out["type"])
		assert.Equal(t, "src/main.py", out["target"])
		_, ferr = call(t, map[string]any{"op": "stat", "path": "work/proj/nope"})
		require.NotNil(t, ferr)
		assert.Equal(t, "FileNotFoundError", ferr.Type)

		out, ferr = call(t, map[string]any{"op": "list_files", "path": "work", "recursive": true})
		require.Nil(t, ferr)
		assert.Equal(t, []string{"proj", "proj/latest", "proj/src", "proj/src/data", "proj/src/data/big.bin", "proj/src/main.py"}, names(out))
		assert.NotContains(t, out, "truncated")
		out, ferr = call(t, map[string]any{"op": "list_files", "path": "work", "recursive": true, "max_entries": 3})
		require.Nil(t, ferr)
		assert.Equal(t, []string{"proj", "proj/latest", "proj/src"}, names(out))
		assert.Equal(t, true, out["truncated"])

		out, ferr = call(t, map[string]any{"op": "run_command", "cmd": "python3 work/proj/latest"})
		require.Nil(t, ferr)
		assert.Equal(t, "hi\n", out["stdout"], "the sandbox's code runs what was extracted")
	})

	t.Run("the directory read back as an archive is the tree extracted", func(t *testing.T) {
		for archive, contentType := range map[string]string{"tar": "application/x-tar", "tar.gz": "application/gzip"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin.base+url.QueryEscape("work/proj")+"&archive="+url.QueryEscape(archive), nil)
			require.NoError(t, err)
			resp, err := admin.client.Do(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, archive)
			assert.Equal(t, contentType, resp.Header.Get("Content-Type"), archive)
			var in io.Reader = resp.Body
			if archive == "tar.gz" {
				gz, err := gzip.NewReader(resp.Body)
				require.NoError(t, err, archive)
				in = gz
			}
			type seen struct {
				typ   byte
				mode  int64
				size  int64
				link  string
				mtime int64
			}
			got := map[string]seen{}
			var order []string
			tr := tar.NewReader(in)
			for {
				hdr, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err, archive)
				order = append(order, hdr.Name)
				got[hdr.Name] = seen{hdr.Typeflag, hdr.Mode, hdr.Size, hdr.Linkname, hdr.ModTime.Unix()}
				if hdr.Name == "src/data/big.bin" {
					// Compared as it streams: the test holds a copy buffer.
					want := io.LimitReader(rand.NewChaCha8([32]byte{3}), bigBytes)
					wantSum, gotSum := sha256.New(), sha256.New()
					_, err := io.Copy(wantSum, want)
					require.NoError(t, err)
					_, err = io.Copy(gotSum, tr)
					require.NoError(t, err, archive)
					assert.Equal(t, wantSum.Sum(nil), gotSum.Sum(nil), "%s: the big file's bytes", archive)
				}
			}
			_ = resp.Body.Close()
			assert.Equal(t, []string{"latest", "src/", "src/data/", "src/data/big.bin", "src/main.py"}, order, "%s: depth first, sorted", archive)
			assert.Equal(t, seen{tar.TypeSymlink, 0o777, 0, "src/main.py", got["latest"].mtime}, got["latest"], archive)
			assert.Equal(t, seen{tar.TypeReg, 0o755, 12, "", mtime.Unix()}, got["src/main.py"], archive)
			assert.Equal(t, seen{tar.TypeReg, 0o644, bigBytes, "", mtime.Unix()}, got["src/data/big.bin"], archive)
			assert.Equal(t, byte(tar.TypeDir), got["src/"].typ, archive)
		}
	})

	t.Run("archive on a file or a PUT, or an unknown archive, is 400", func(t *testing.T) {
		for _, c := range []struct{ method, path, archive, says string }{
			{http.MethodGet, "work/proj/src/main.py", "tar", "not a directory"},
			{http.MethodGet, "work/proj", "zip", "archive=tar"},
			{http.MethodPut, "work/proj", "tar", "GET only"},
		} {
			req, err := http.NewRequestWithContext(ctx, c.method, admin.base+url.QueryEscape(c.path)+"&archive="+c.archive, strings.NewReader("x"))
			require.NoError(t, err)
			resp, err := admin.client.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s: %s", c.method, c.archive, body)
			assert.Contains(t, string(body), c.says)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin.base+url.QueryEscape("work/nope")+"&archive=tar", nil)
		require.NoError(t, err)
		resp, err := admin.client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "a missing directory")
	})

	t.Run("an archive with an entry out of the workspace is 400 and leaves nothing", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, name := range []string{"fine.txt", "../../escape.txt"} {
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}))
			_, err := tw.Write([]byte("x"))
			require.NoError(t, err)
		}
		require.NoError(t, tw.Close())
		code, body := admin.putExtract(ctx, t, "in", "tar", &buf)
		assert.Equal(t, http.StatusBadRequest, code, "%s", body)
		assert.Contains(t, string(body), "leaves the directory it is extracted into")
		out, ferr := call(t, map[string]any{"op": "exists", "path": "in"})
		require.Nil(t, ferr)
		assert.Equal(t, false, out["exists"], "nothing of it was extracted")
	})

	t.Run("extract on a GET, or an unknown format, is 400", func(t *testing.T) {
		code, body := admin.putExtract(ctx, t, "in", "zip", strings.NewReader("PK"))
		assert.Equal(t, http.StatusBadRequest, code, "%s", body)
		assert.Contains(t, string(body), "extract=tar")
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin.base+url.QueryEscape("work/proj/src/main.py")+"&extract=tar", nil)
		require.NoError(t, err)
		resp, err := admin.client.Do(req)
		require.NoError(t, err)
		body, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
	})
}

// fileClient reads and writes the files of one sandbox through runs/files.
type fileClient struct {
	config *rest.Config
	client *http.Client
	base   string
}

func newFileClient(t *testing.T, config *rest.Config, ns, run string) *fileClient {
	t.Helper()
	client, err := rest.HTTPClientFor(config)
	require.NoError(t, err)
	return &fileClient{config: config, client: client, base: config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + ns + "/runs/" + run + "/files?path="}
}

// put sends body as the file path, streamed (chunked), and returns the
// answer's code and body.
func (c *fileClient) put(ctx context.Context, t *testing.T, path string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+url.QueryEscape(path), io.NopCloser(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// putExtract sends body, an archive of format extract, to be extracted
// into the directory dir, streamed; and returns the answer's code and body.
func (c *fileClient) putExtract(ctx context.Context, t *testing.T, dir, extract string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+url.QueryEscape(dir)+"&extract="+url.QueryEscape(extract), io.NopCloser(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// get asks for the file path; the caller reads and closes the body.
func (c *fileClient) get(ctx context.Context, t *testing.T, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+url.QueryEscape(path), nil)
	require.NoError(t, err)
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	return resp
}

// vmHWM is pid's peak resident set size in bytes, or 0.
func vmHWM(pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
