package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	kruntimestestserver "kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// requireRoot stops a test that must chroot, mount /proc and switch to
// uid 65532, which needs root (as CI has): it skips, and fails under
// KRUNTIMES_E2E_REQUIRE=1 (make test), as TestDiskFull does.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	msg := "running a binary from an image's root file system as uid 65532 needs root (chroot, mount /proc, setuid)"
	if os.Getenv("KRUNTIMES_E2E_REQUIRE") == "1" {
		t.Fatalf("%s; KRUNTIMES_E2E_REQUIRE=1 requires this test to run", msg)
	}
	t.Skip(msg)
}

// imageRoot is an image's file system unpacked into a directory, layer by
// layer, and the entries its layers hold.
type imageRoot struct {
	Dir    string
	Config v1.Config
	// Files are the entries of every layer, keyed as flatten keys them, a
	// later layer's replacing an earlier one's.
	Files map[string]imageFile
}

var (
	unpackMu sync.Mutex
	unpacked = map[string]*imageRoot{}
)

// unpackShared unpacks the shared build's image key once per test binary.
func unpackShared(t *testing.T, key string) *imageRoot {
	t.Helper()
	img := sharedImage(t, key)
	unpackMu.Lock()
	defer unpackMu.Unlock()
	if r, ok := unpacked[key]; ok {
		return r
	}
	r := unpack(t, img.Image, filepath.Join(sharedDir, "rootfs", key))
	unpacked[key] = r
	return r
}

// unpack extracts img's layers in order into dir, never outside it (an
// entry that would go through a symbolic link out of dir fails), with their
// modes, and their owners when running as root. Each layer must match its
// diff ID. Devices and FIFOs are left out: a container runtime mounts /dev.
func unpack(t *testing.T, img v1.Image, dir string) *imageRoot {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, cfg.RootFS.DiffIDs, len(layers))
	r := &imageRoot{Dir: dir, Config: cfg.Config, Files: map[string]imageFile{}}
	for i, layer := range layers {
		rc, err := uncompressed(layer)
		require.NoError(t, err)
		digest := sha256.New()
		stream := io.TeeReader(rc, digest)
		require.NoError(t, r.extractLayer(root, tar.NewReader(stream)), "layer %d", i)
		_, err = io.Copy(io.Discard, stream)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		assert.Equal(t, cfg.RootFS.DiffIDs[i].Hex, hex.EncodeToString(digest.Sum(nil)), "layer %d matches its diff ID", i)
	}
	return r
}

// uncompressed returns layer's tar stream, gunzipped by the system's gzip
// when there is one: in a race-built test binary compress/gzip is about 13
// times slower (over 20 s for kruntimes-apiserver's binary).
func uncompressed(layer v1.Layer) (io.ReadCloser, error) {
	mt, err := layer.MediaType()
	if err != nil {
		return nil, err
	}
	gzip, err := exec.LookPath("gzip")
	if err != nil || mt != types.OCILayer && mt != types.DockerLayer {
		return layer.Uncompressed()
	}
	compressed, err := layer.Compressed()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(gzip, "-dc")
	cmd.Stdin = compressed
	out, err := cmd.StdoutPipe()
	if err != nil {
		compressed.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		compressed.Close()
		return nil, err
	}
	return gunzipped{ReadCloser: out, wait: func() error {
		err := cmd.Wait()
		compressed.Close()
		return err
	}}, nil
}

type gunzipped struct {
	io.ReadCloser
	wait func() error
}

func (g gunzipped) Close() error { return g.wait() }

func (r *imageRoot) extractLayer(root *os.Root, tr *tar.Reader) error {
	const modeBits = fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		if strings.HasPrefix(path.Base(name), ".wh.") {
			return fmt.Errorf("%s: whiteouts are not expected in these images", name)
		}
		key := name
		if hdr.Typeflag == tar.TypeDir {
			key += "/"
		}
		f := imageFile{Type: hdr.Typeflag, Mode: hdr.Mode, UID: hdr.Uid, MTime: hdr.ModTime.UTC()}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		if hdr.Typeflag != tar.TypeDir {
			// A later layer's entry replaces an earlier one's.
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		mode := hdr.FileInfo().Mode() & modeBits
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			out, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			var data bytes.Buffer
			var w io.Writer = out
			if hdr.Size < 1<<20 {
				w = io.MultiWriter(out, &data)
			}
			_, err = io.Copy(w, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
			if hdr.Size < 1<<20 {
				f.Data = data.Bytes()
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := root.Link(strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/"), name); err != nil {
				return err
			}
		default:
			continue
		}
		if os.Geteuid() == 0 {
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
		r.Files[key] = f
	}
}

// prepareRun adds to the root what a container runtime provides: /dev/null,
// /dev/zero, /dev/random and /dev/urandom, and /proc, mounted until the
// test ends. It needs root.
func (r *imageRoot) prepareRun(t *testing.T) {
	t.Helper()
	requireRoot(t)
	root, err := os.OpenRoot(r.Dir)
	require.NoError(t, err)
	defer root.Close()
	for _, d := range []string{"dev", "proc"} {
		require.NoError(t, root.MkdirAll(d, 0o755))
		info, err := root.Lstat(d)
		require.NoError(t, err)
		require.True(t, info.IsDir(), "/%s is a directory, not a link out of the root", d)
	}
	for _, dev := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}} {
		p := filepath.Join(r.Dir, "dev", dev.name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			require.NoError(t, err)
		}
		require.NoError(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(dev.major, dev.minor))))
		require.NoError(t, os.Chmod(p, 0o666))
	}
	proc := filepath.Join(r.Dir, "proc")
	require.NoError(t, unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""))
	t.Cleanup(func() { assert.NoError(t, unix.Unmount(proc, unix.MNT_DETACH)) })
}

// command runs argv in the root as its image would: chrooted, as the
// image's user, with its environment and working directory.
func (r *imageRoot) command(ctx context.Context, argv ...string) *exec.Cmd {
	uid, err := strconv.Atoi(r.Config.User)
	if err != nil {
		panic(fmt.Sprintf("image user %q is not numeric", r.Config.User))
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.Config.Env
	cmd.Dir = r.Config.WorkingDir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     r.Dir,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// run runs argv in the root and returns its exit code and output.
func (r *imageRoot) run(t *testing.T, argv ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := r.command(ctx, argv...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String()
	}
	require.NoError(t, err, "starting %s in the image", argv[0])
	return 0, out.String()
}

func TestBinariesRunFromTheirImageAsNonroot(t *testing.T) {
	requireRoot(t)
	rev := headRevision(t)
	for _, spec := range goImages {
		t.Run(spec.Name, func(t *testing.T) {
			r := unpackShared(t, spec.Name)
			r.prepareRun(t)
			entry := r.Config.Entrypoint[0]

			code, out := r.run(t, entry, "--help")
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, "Usage")

			code, out = r.run(t, entry, "--version")
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, spec.Name+" version "+testVersion+" (commit "+rev.Commit+",", "version and commit stamped by the linker")

			for _, companion := range spec.Companions {
				code, out := r.run(t, path.Join(binDir, companion))
				assert.Equal(t, 2, code, out)
				assert.Contains(t, out, "not for direct use", "%s runs, and says it is started by the Runtime Server", companion)
			}
		})
	}
}

func TestAPIServerServesFromItsImage(t *testing.T) {
	requireRoot(t)
	r := unpackShared(t, "kruntimes-apiserver")
	r.prepareRun(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	ctx, cancel := context.WithCancel(context.Background())
	// Everything it writes goes to the image's /tmp, as nonroot.
	cmd := r.command(ctx, r.Config.Entrypoint[0], "--standalone", "--standalone-kubeconfig=/tmp/kubeconfig",
		"--storage-path=/tmp/data", "--cert-dir=/tmp/certs",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port), "-v=0")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "apiserver.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("kruntimes-apiserver:\n%s", log)
		}
	})

	kubeconfig := filepath.Join(r.Dir, "tmp", "kubeconfig")
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("kruntimes-apiserver exited: %v", err)
		default:
		}
		_, ready, err := kruntimestestserver.Ready(kubeconfig)
		return ready, err
	})
	require.NoError(t, err, "kruntimes-apiserver from its image did not become ready")

	config, _, err := kruntimestestserver.Ready(kubeconfig)
	require.NoError(t, err)
	client, err := versioned.NewForConfig(config)
	require.NoError(t, err)
	body, err := client.Discovery().RESTClient().Get().AbsPath("/healthz").DoRaw(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "ok", string(body))
	resources, err := client.Discovery().ServerResourcesForGroupVersion("kruntimes.io/v1alpha1")
	require.NoError(t, err)
	var names []string
	for _, res := range resources.APIResources {
		names = append(names, res.Name)
	}
	assert.Contains(t, names, "runs")
	assert.Contains(t, names, "runtimes")

	for _, f := range []string{"tmp/data", "tmp/certs"} {
		info, err := os.Stat(filepath.Join(r.Dir, f))
		require.NoError(t, err)
		assert.Equal(t, uint32(nonrootUID), info.Sys().(*syscall.Stat_t).Uid, "/%s written as nonroot", f)
	}
}
