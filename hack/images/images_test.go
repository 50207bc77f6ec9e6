package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGoImageConfig(t *testing.T) {
	rev := headRevision(t)
	for _, spec := range goImages {
		t.Run(spec.Name, func(t *testing.T) {
			img := sharedImage(t, spec.Name)
			assert.Equal(t, spec.Name, img.Name)
			assert.Equal(t, testVersion, img.Tag)
			mt, err := img.Image.MediaType()
			require.NoError(t, err)
			assert.Equal(t, types.OCIManifestSchema1, mt)

			cfg, err := img.Image.ConfigFile()
			require.NoError(t, err)
			assert.Equal(t, "linux", cfg.OS)
			assert.Equal(t, newOptions().arch, cfg.Architecture)
			assert.Equal(t, "65532", cfg.Config.User, "runs as nonroot")
			assert.Equal(t, []string{"/usr/local/bin/" + spec.Name}, cfg.Config.Entrypoint)
			assert.Empty(t, cfg.Config.Cmd)
			assert.Contains(t, cfg.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
			assert.Equal(t, "/home/nonroot", cfg.Config.WorkingDir)
			assert.Equal(t, rev.Time, cfg.Created.UTC(), "dated by the commit, not the build")
			for _, h := range cfg.History {
				assert.Equal(t, rev.Time, h.Created.UTC())
			}
			labels := cfg.Config.Labels
			assert.Equal(t, "https://kruntimes.io/kruntimes", labels["org.opencontainers.image.source"])
			assert.Equal(t, rev.Commit, labels["org.opencontainers.image.revision"])
			assert.Equal(t, testVersion, labels["org.opencontainers.image.version"])
			assert.Equal(t, spec.Name, labels["org.opencontainers.image.title"])
		})
	}
}

// imageFile is one entry of an image's flattened file system.
type imageFile struct {
	Type  byte
	Mode  int64
	UID   int
	MTime time.Time
	Data  []byte
}

// flatten reads img's flattened file system, keyed by path without a
// leading slash (directories end in /); the contents of files under 1 MiB
// (all but the binaries) are kept.
func flatten(t *testing.T, img v1.Image) map[string]imageFile {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		require.NoError(t, err)
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if hdr.Typeflag == tar.TypeDir {
			name += "/"
		}
		f := imageFile{Type: hdr.Typeflag, Mode: hdr.Mode, UID: hdr.Uid, MTime: hdr.ModTime.UTC()}
		if hdr.Typeflag == tar.TypeReg && hdr.Size < 1<<20 {
			f.Data, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
		files[name] = f
	}
}

func TestGoImageFiles(t *testing.T) {
	rev := headRevision(t)
	system := []string{
		"etc/", "etc/group", "etc/nsswitch.conf", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
		"home/", "home/nonroot/", "root/", "tmp/", "usr/", "usr/local/", "usr/local/bin/",
	}
	hostCA, err := os.ReadFile(newOptions().caCertificates)
	require.NoError(t, err)
	for _, spec := range goImages {
		t.Run(spec.Name, func(t *testing.T) {
			files := unpackShared(t, spec.Name).Files
			want := append([]string(nil), system...)
			for _, bin := range spec.binaries() {
				want = append(want, "usr/local/bin/"+bin)
			}
			sort.Strings(want)
			got := make([]string, 0, len(files))
			for name := range files {
				got = append(got, name)
			}
			sort.Strings(got)
			assert.Equal(t, want, got, "exactly the system files and the binaries: no shell, no package manager")
			for name := range files {
				base := path.Base(name)
				assert.NotContains(t, []string{"sh", "bash", "ash", "dash", "busybox"}, base, "no shell in a Go image")
			}

			assert.Equal(t, int64(0o1777), files["tmp/"].Mode, "/tmp is writable by every user and sticky")
			assert.Equal(t, 65532, files["home/nonroot/"].UID)
			assert.Contains(t, string(files["etc/passwd"].Data), "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
			assert.Contains(t, string(files["etc/group"].Data), "nonroot:x:65532:\n")
			assert.Equal(t, hostCA, files["etc/ssl/certs/ca-certificates.crt"].Data, "the build machine's CA bundle")
			for _, bin := range spec.binaries() {
				assert.Equal(t, int64(0o755), files["usr/local/bin/"+bin].Mode)
			}
			for name, f := range files {
				assert.Equal(t, rev.Time, f.MTime, "%s dated by the commit", name)
				if name != "home/nonroot/" {
					assert.Equal(t, 0, f.UID, "%s owned by root", name)
				}
			}
		})
	}
}

func TestGoImagesShareTheirBaseLayer(t *testing.T) {
	var first v1.Hash
	for i, spec := range goImages {
		layers, err := sharedImage(t, spec.Name).Image.Layers()
		require.NoError(t, err)
		require.Len(t, layers, 2, "the distroless-like layer, then the binaries")
		digest, err := layers[0].Digest()
		require.NoError(t, err)
		if i == 0 {
			first = digest
			continue
		}
		assert.Equal(t, first, digest, "%s: one base layer, stored once by a registry", spec.Name)
	}
}

func TestTwoBuildsOfOneCommitGiveTheSameDigests(t *testing.T) {
	sharedImages(t)
	first, err := os.ReadFile(filepath.Join(sharedDir, "first", "images.txt"))
	require.NoError(t, err)
	// Another output directory: every binary is linked again, and the
	// images are assembled from scratch.
	out := filepath.Join(t.TempDir(), "second")
	runTool(t, out)
	second, err := os.ReadFile(filepath.Join(out, "images.txt"))
	require.NoError(t, err)
	assert.Equal(t, string(first), string(second), "same commit, same references and digests")
}

func TestOutputs(t *testing.T) {
	out := filepath.Join(sharedDir, "first")
	for _, img := range sharedImages(t) {
		t.Run(img.Key, func(t *testing.T) {
			ref := img.Ref("kruntimes.io")
			digest, err := img.Image.Digest()
			require.NoError(t, err)

			// The layers' contents are checked against their diff IDs
			// where the tests unpack them, and against their digests below.
			require.NoError(t, validate.Image(img.Image, validate.Fast))
			idx, err := layout.ImageIndexFromPath(filepath.Join(out, img.Key))
			require.NoError(t, err)
			m, err := idx.IndexManifest()
			require.NoError(t, err)
			refs := img.Refs("kruntimes.io")
			require.Equal(t, []string{ref, "kruntimes.io/" + img.Name + ":latest"}, refs, "a Go image is tagged latest too")
			require.Len(t, m.Manifests, len(refs))
			for i, want := range refs {
				assert.Equal(t, digest, m.Manifests[i].Digest)
				assert.Equal(t, want, m.Manifests[i].Annotations[refNameAnnotation], "the OCI layout names the image by each reference")
			}

			entries := readTar(t, filepath.Join(out, img.Key+".tar"))
			var manifest []struct {
				Config   string
				RepoTags []string
				Layers   []string
			}
			require.Contains(t, entries, "manifest.json", "docker load reads manifest.json")
			require.NoError(t, json.Unmarshal(entries["manifest.json"], &manifest))
			require.Len(t, manifest, 1)
			assert.ElementsMatch(t, refs, manifest[0].RepoTags, "docker load tags the image with each reference")
			// docker save also writes the pre-1.10 repositories file, which
			// docker load reads only when manifest.json is missing.

			configName, err := img.Image.ConfigName()
			require.NoError(t, err)
			require.Contains(t, entries, manifest[0].Config)
			assert.Equal(t, configName.Hex, sha256Hex(entries[manifest[0].Config]), "the config file is the image's config")
			layers, err := img.Image.Layers()
			require.NoError(t, err)
			require.Len(t, manifest[0].Layers, len(layers))
			for i, l := range layers {
				d, err := l.Digest()
				require.NoError(t, err)
				require.Contains(t, entries, manifest[0].Layers[i])
				assert.Equal(t, d.Hex, sha256Hex(entries[manifest[0].Layers[i]]), "layer %d in manifest order", i)
			}
		})
	}
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// readTar returns every regular file of the tarball at p by name.
func readTar(t *testing.T, p string) map[string][]byte {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return entries
		}
		require.NoError(t, err)
		if hdr.Typeflag == tar.TypeReg {
			entries[hdr.Name], err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
}

func TestPushAndPullRoundTrip(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	require.True(t, strings.HasPrefix(host, "127.0.0.1:"), "a loopback registry, which go-containerregistry reaches over plain HTTP")

	images := sharedImages(t)
	pushed, err := push(context.Background(), host+"/team", images)
	require.NoError(t, err)
	require.Len(t, pushed, 2*len(images), "each image under its version and latest")
	for i, img := range images {
		want, err := img.Image.Digest()
		require.NoError(t, err)
		ref := host + "/team/" + img.Name + ":" + testVersion
		assert.Equal(t, ref+"@"+want.String(), pushed[2*i])
		assert.Equal(t, host+"/team/"+img.Name+":latest@"+want.String(), pushed[2*i+1])
		latest, err := name.ParseReference(host + "/team/" + img.Name + ":latest")
		require.NoError(t, err)
		latestDigest, err := remote.Head(latest)
		require.NoError(t, err)
		assert.Equal(t, want, latestDigest.Digest, "latest names the same manifest")

		parsed, err := name.ParseReference(ref)
		require.NoError(t, err)
		pulled, err := remote.Image(parsed)
		require.NoError(t, err)
		got, err := pulled.Digest()
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s pulls back as pushed", ref)
		require.NoError(t, validate.Image(pulled, validate.Fast), "%s: manifest and config pulled as pushed", ref)
		layers, err := pulled.Layers()
		require.NoError(t, err)
		for i, l := range layers {
			// A pulled layer's reader fails unless its bytes match its digest.
			rc, err := l.Compressed()
			require.NoError(t, err)
			_, err = io.Copy(io.Discard, rc)
			require.NoError(t, err, "%s layer %d pulls whole", ref, i)
			require.NoError(t, rc.Close())
		}
	}
}

func TestPushRejectsABadRegistry(t *testing.T) {
	_, err := push(context.Background(), "Not A Registry", []builtImage{{Key: "krt", Name: "krt", Tag: testVersion}})
	assert.ErrorContains(t, err, "--push Not A Registry")
}
