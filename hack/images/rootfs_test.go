package main

import (
	"archive/tar"
	"bytes"
	"context"
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
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	kruntimestestserver "kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

// requireRoot skips a test that must chroot, mount /proc and switch to
// uid 65532; CI runs as root (hack/allowed-skips.txt lists these tests).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running a binary from an image's root file system as uid 65532 needs root (chroot, mount, setuid)")
	}
}

// imageRoot is an image's file system unpacked into a directory, with what
// a container runtime adds: /proc, and /dev/null, /dev/zero, /dev/random
// and /dev/urandom.
type imageRoot struct {
	Dir    string
	Config v1.Config
}

// unpack extracts img's flattened layers into a new directory with their
// owners and modes, and mounts /proc there until the test ends.
func unpack(t *testing.T, img v1.Image) *imageRoot {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rootfs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, extract(img, dir))

	root, err := os.OpenRoot(dir)
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
		p := filepath.Join(dir, "dev", dev.name)
		_ = os.Remove(p)
		require.NoError(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(dev.major, dev.minor))))
		require.NoError(t, os.Chmod(p, 0o666))
	}
	proc := filepath.Join(dir, "proc")
	require.NoError(t, unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""))
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(func() { assert.NoError(t, unix.Unmount(proc, unix.MNT_DETACH)) })

	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	return &imageRoot{Dir: dir, Config: cfg.Config}
}

// extract writes img's flattened file system under dir, never outside it:
// an entry that would go through a symbolic link out of dir fails.
// Devices and FIFOs are left out (a container runtime mounts /dev).
func extract(img v1.Image, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	rc := mutate.Extract(img)
	defer rc.Close()
	// mutate.Extract yields the top layer first, so a file can come before
	// its directory's entry and a hard link before its target.
	var links []*tar.Header
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		mode := hdr.FileInfo().Mode()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			if err := root.Chmod(name, mode&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := root.Chmod(name, mode&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			h := *hdr
			h.Name = name
			links = append(links, &h)
			continue
		default:
			continue
		}
		if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	for _, l := range links {
		if err := root.Link(strings.TrimPrefix(path.Clean("/"+l.Linkname), "/"), l.Name); err != nil {
			return err
		}
	}
	return nil
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
			r := unpack(t, sharedImage(t, spec.Name).Image)
			entry := r.Config.Entrypoint[0]

			code, out := r.run(t, entry, "--help")
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, "Usage:")

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
	r := unpack(t, sharedImage(t, "kruntimes-apiserver").Image)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	ctx, cancel := context.WithCancel(context.Background())
	// Everything it writes goes to the image's /tmp, as nonroot.
	cmd := r.command(ctx, r.Config.Entrypoint[0], "--standalone", "--standalone-kubeconfig=/tmp/kubeconfig",
		"--storage-path=/tmp/data", "--cert-dir=/tmp/certs",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port), "-v=0")
	var serverLog bytes.Buffer
	cmd.Stdout, cmd.Stderr = &serverLog, &serverLog
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
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
	require.NoError(t, err, "kruntimes-apiserver from its image did not become ready:\n%s", serverLog.String())

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
