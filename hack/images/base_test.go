package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeBuild is a buildInfo whose binaries are small files, for the tests
// that assemble images but run nothing.
func fakeBuild(t *testing.T) buildInfo {
	t.Helper()
	dir := t.TempDir()
	for _, bin := range findSpec(runtimeImage).binaries() {
		require.NoError(t, os.WriteFile(filepath.Join(dir, bin), []byte("binary "+bin), 0o755))
	}
	return buildInfo{
		Revision: revision{Commit: "0123456789abcdef0123456789abcdef01234567", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		Version:  "v1.2.3",
		Source:   "https://example.com/kruntimes",
		Arch:     "amd64",
		BinDir:   dir,
	}
}

// rootFSTar is a root file system: a passwd without user 65532 and a fake
// python3, as mmdebstrap writes one (./ prefixed names).
func rootFSTar(t *testing.T, passwd string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name, data string
		typ        byte
	}{
		{"./", "", tar.TypeDir},
		{"./etc/", "", tar.TypeDir},
		{"./etc/passwd", passwd, tar.TypeReg},
		{"./etc/group", "root:x:0:\n", tar.TypeReg},
		{"./usr/", "", tar.TypeDir},
		{"./usr/bin/", "", tar.TypeDir},
		{"./usr/bin/python3", "#!fake python", tar.TypeReg},
	} {
		mode := int64(0o755)
		if f.typ == tar.TypeReg {
			mode = 0o644
		}
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: f.typ, Mode: mode, Size: int64(len(f.data))}))
		_, err := tw.Write([]byte(f.data))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// baseImageWith is an image of the root file system with a config of its
// own: the environment, labels and working directory a python image has.
func baseImageWith(t *testing.T, passwd, arch string) v1.Image {
	t.Helper()
	data := rootFSTar(t, passwd)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, tarball.WithMediaType(types.OCILayer))
	require.NoError(t, err)
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	require.NoError(t, err)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8"}
	cfg.Config.Labels = map[string]string{"org.example.base": "python", "org.opencontainers.image.version": "3.11"}
	cfg.Config.WorkingDir = "/srv"
	cfg.Config.Cmd = []string{"python3"}
	img, err = mutate.ConfigFile(img, cfg)
	require.NoError(t, err)
	return img
}

// throughLayout writes img to an OCI layout and reads it back.
func throughLayout(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	l, err := layout.Write(t.TempDir(), empty.Index)
	require.NoError(t, err)
	require.NoError(t, l.AppendImage(img))
	digest, err := img.Digest()
	require.NoError(t, err)
	read, err := l.Image(digest)
	require.NoError(t, err)
	return read
}

const debianPasswd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"

func TestRuntimeOnBase(t *testing.T) {
	b := fakeBuild(t)
	base := baseImageWith(t, debianPasswd, "amd64")
	baseLayers, err := base.Layers()
	require.NoError(t, err)
	dir := t.TempDir()

	write := map[string]func(t *testing.T) string{
		"OCI layout": func(t *testing.T) string {
			p := filepath.Join(dir, "layout")
			l, err := layout.Write(p, empty.Index)
			require.NoError(t, err)
			require.NoError(t, l.AppendImage(base))
			return p
		},
		"OCI layout of several platforms": func(t *testing.T) string {
			p := filepath.Join(dir, "multi")
			l, err := layout.Write(p, empty.Index)
			require.NoError(t, err)
			require.NoError(t, l.AppendImage(baseImageWith(t, debianPasswd, "arm64"), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"})))
			require.NoError(t, l.AppendImage(base, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})))
			return p
		},
		"docker save tarball": func(t *testing.T) string {
			p := filepath.Join(dir, "docker.tar")
			require.NoError(t, tarball.WriteToFile(p, name.MustParseReference("example.com/python:3").(name.Tag), base))
			return p
		},
		"root file system tarball": func(t *testing.T) string {
			p := filepath.Join(dir, "rootfs.tar")
			require.NoError(t, os.WriteFile(p, rootFSTar(t, debianPasswd), 0o644))
			return p
		},
		"gzipped root file system tarball": func(t *testing.T) string {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, err := zw.Write(rootFSTar(t, debianPasswd))
			require.NoError(t, err)
			require.NoError(t, zw.Close())
			p := filepath.Join(dir, "rootfs.tar.gz")
			require.NoError(t, os.WriteFile(p, buf.Bytes(), 0o644))
			return p
		},
	}
	for kind, writeBase := range write {
		t.Run(kind, func(t *testing.T) {
			loaded, err := loadBase(writeBase(t), b)
			require.NoError(t, err)
			img, err := runtimeOnBase(b, loaded, "python")
			require.NoError(t, err)
			require.NoError(t, validate.Image(throughLayout(t, img)), "digests and diff IDs agree with the content")

			layers, err := img.Layers()
			require.NoError(t, err)
			require.Len(t, layers, len(baseLayers)+2, "the base's layers, the nonroot user, the binaries")
			want, err := baseLayers[0].DiffID()
			require.NoError(t, err)
			got, err := layers[0].DiffID()
			require.NoError(t, err)
			assert.Equal(t, want, got, "the base's file system is kept as it is")

			cfg, err := img.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, "linux", cfg.OS)
			assert.Equal(t, "amd64", cfg.Architecture)
			assert.Equal(t, "65532", cfg.Config.User)
			assert.Equal(t, []string{"/usr/local/bin/kruntimes-runtime"}, cfg.Config.Entrypoint)
			assert.Empty(t, cfg.Config.Cmd, "the base's command is not kruntimes-runtime's arguments")
			assert.Equal(t, "v1.2.3", cfg.Config.Labels["org.opencontainers.image.version"], "our labels win")
			assert.Equal(t, b.Revision.Commit, cfg.Config.Labels["org.opencontainers.image.revision"])
			assert.Equal(t, b.Revision.Time, cfg.Created.UTC())
			if kind == "root file system tarball" || kind == "gzipped root file system tarball" {
				assert.Equal(t, []string{defaultPath}, cfg.Config.Env, "a root file system has no config: the default PATH")
			} else {
				assert.Equal(t, []string{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8"}, cfg.Config.Env, "the base's environment is kept")
				assert.Equal(t, "python", cfg.Config.Labels["org.example.base"], "the base's labels are kept")
				assert.Equal(t, "/srv", cfg.Config.WorkingDir)
			}

			files := flatten(t, img)
			assert.Equal(t, debianPasswd+"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n", string(files["etc/passwd"].Data))
			assert.Equal(t, "root:x:0:\nnonroot:x:65532:\n", string(files["etc/group"].Data))
			assert.Equal(t, 65532, files["home/nonroot/"].UID)
			assert.Equal(t, "#!fake python", string(files["usr/bin/python3"].Data))
			for _, bin := range []string{"kruntimes-runtime", "kruntimes-reaper"} {
				assert.Equal(t, "binary "+bin, string(files["usr/local/bin/"+bin].Data), "%s beside the Runtime Server", bin)
				assert.Equal(t, int64(0o755), files["usr/local/bin/"+bin].Mode)
			}
		})
	}
}

func TestRuntimeOnBaseWithNonrootKeepsItsUsers(t *testing.T) {
	b := fakeBuild(t)
	base := baseImageWith(t, debianPasswd+"app:x:65532:65532::/home/app:/bin/sh\n", "amd64")
	// The group file of rootFSTar has no 65532: the base needs that one.
	img, err := runtimeOnBase(b, base, "python")
	require.NoError(t, err)
	files := flatten(t, img)
	assert.Equal(t, debianPasswd+"app:x:65532:65532::/home/app:/bin/sh\n", string(files["etc/passwd"].Data), "user 65532 exists: passwd is untouched")
	assert.Equal(t, "root:x:0:\nnonroot:x:65532:\n", string(files["etc/group"].Data))
}

func TestRuntimeOnBaseRejectsAnotherPlatform(t *testing.T) {
	b := fakeBuild(t)
	_, err := runtimeOnBase(b, baseImageWith(t, debianPasswd, "arm64"), "python")
	assert.ErrorContains(t, err, "the base is for linux/arm64, the images for linux/amd64")
}

func TestLoadBaseRejects(t *testing.T) {
	b := fakeBuild(t)
	dir := t.TempDir()
	ociArchive := filepath.Join(dir, "oci.tar")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range []string{"oci-layout", "index.json"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}))
		_, err := tw.Write([]byte("{}"))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, os.WriteFile(ociArchive, buf.Bytes(), 0o644))
	notTar := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notTar, bytes.Repeat([]byte("not a tarball\n"), 100), 0o644))

	tests := []struct {
		name, path, wantErr string
	}{
		{"a missing path", filepath.Join(dir, "missing"), "no such file"},
		{"an OCI layout in a tarball, with how to unpack it", ociArchive, "unpack it"},
		{"a file that is no tarball", notTar, "not a tarball"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadBase(tt.path, b)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestNonrootEntriesForABaseWithoutUsers(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "app", Typeflag: tar.TypeReg, Mode: 0o755}))
	require.NoError(t, tw.Close())
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	require.NoError(t, err)

	entries, err := nonrootEntries(img)
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		got[e.Header.Name] = string(e.Data)
	}
	assert.Equal(t, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n", got["etc/passwd"])
	assert.Equal(t, "root:x:0:\nnonroot:x:65532:\n", got["etc/group"])
	assert.Contains(t, got, "home/nonroot/")
}
