package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository, two levels above this package.
const repoRoot = "../.."

// testVersion is the release the shared build is stamped with.
const testVersion = "v0.0.0-test"

var (
	// sharedDir holds the tool and the shared build; removed when the tests
	// end.
	sharedDir string
	buildOnce sync.Once
	shared    []builtImage
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kruntimes-images-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sharedDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testOptions are the flags of a build of every Go image into out.
func testOptions(out string) *options {
	o := newOptions()
	o.repoRoot, o.output, o.version = repoRoot, out, testVersion
	return o
}

var (
	toolOnce sync.Once
	toolPath string
	toolErr  error
)

// runTool runs the images command, built without the race detector like
// `make images` builds it, with --output out and the test version, and
// returns what it printed. Gzipping the layers in a race-built test binary
// would take several times as long.
func runTool(t *testing.T, out string, args ...string) string {
	t.Helper()
	toolOnce.Do(func() {
		toolPath = filepath.Join(sharedDir, "images")
		cmd := exec.Command("go", "build", "-o", toolPath, ".")
		var output []byte
		if output, toolErr = cmd.CombinedOutput(); toolErr != nil {
			toolErr = fmt.Errorf("go build ./hack/images: %w\n%s", toolErr, output)
		}
	})
	require.NoError(t, toolErr)
	args = append([]string{"--repo=" + repoRoot, "--output=" + out, "--version=" + testVersion}, args...)
	cmd := exec.Command(toolPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "images %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

// readOutputs returns the Go images the tool wrote to out, read from their
// OCI layouts in the order of images.txt, which must list each once.
func readOutputs(t *testing.T, out string) []builtImage {
	t.Helper()
	list, err := os.ReadFile(filepath.Join(out, "images.txt"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(list)), "\n")
	require.Len(t, lines, len(goImages), "images.txt lists every image:\n%s", list)
	var images []builtImage
	for i, line := range lines {
		ref, digest, ok := strings.Cut(line, " ")
		require.True(t, ok, "images.txt line %q", line)
		spec := goImages[i]
		img := builtImage{Key: spec.Name, Name: spec.Name, Tag: testVersion, Aliases: []string{"latest"}}
		require.Equal(t, img.Ref("kruntimes.io"), ref)
		hash, err := v1.NewHash(digest)
		require.NoError(t, err)
		l, err := layout.FromPath(filepath.Join(out, spec.Name))
		require.NoError(t, err)
		img.Image, err = l.Image(hash)
		require.NoError(t, err)
		images = append(images, img)
	}
	return images
}

// sharedImages builds every Go image once per test binary, into a
// directory the tests that only read images share.
func sharedImages(t *testing.T) []builtImage {
	t.Helper()
	buildOnce.Do(func() {
		start := time.Now()
		out := filepath.Join(sharedDir, "first")
		t.Logf("images: %s", runTool(t, out))
		shared = readOutputs(t, out)
		t.Logf("images: built %d images in %s", len(shared), time.Since(start).Round(time.Millisecond))
	})
	if shared == nil {
		t.Fatal("the shared build failed in an earlier test")
	}
	return shared
}

func sharedImage(t *testing.T, key string) builtImage {
	t.Helper()
	for _, img := range sharedImages(t) {
		if img.Key == key {
			return img
		}
	}
	t.Fatalf("no image %s in the shared build", key)
	return builtImage{}
}

func headRevision(t *testing.T) revision {
	t.Helper()
	rev, err := readRevision(context.Background(), repoRoot)
	require.NoError(t, err)
	return rev
}

func TestPseudoVersion(t *testing.T) {
	commitTime := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name string
		rev  revision
		want string
	}{
		{"a clean tree is named by commit time and commit", revision{Commit: "0123456789abcdef0123456789abcdef01234567", Time: commitTime}, "v0.0.0-20260304050607-0123456789ab"},
		{"a tree with changes to tracked files is marked dirty", revision{Commit: "0123456789abcdef0123456789abcdef01234567", Time: commitTime, Dirty: true}, "v0.0.0-20260304050607-0123456789ab-dirty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.rev.pseudoVersion()
			assert.Equal(t, tt.want, got)
			assert.Regexp(t, tagPattern, got)
		})
	}
}

func TestRevisionTimeFromSourceDateEpoch(t *testing.T) {
	head := headRevision(t)
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	rev, err := readRevision(context.Background(), repoRoot)
	require.NoError(t, err)
	assert.Equal(t, head.Commit, rev.Commit)
	assert.Equal(t, time.Unix(1700000000, 0).UTC(), rev.Time)

	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	_, err = readRevision(context.Background(), repoRoot)
	assert.ErrorContains(t, err, "SOURCE_DATE_EPOCH")
}

func TestBaseFlag(t *testing.T) {
	tests := []struct {
		name    string
		values  []string
		want    baseFlags
		wantErr string
	}{
		{"NAME=PATH adds a base", []string{"python=bases/python.tar"}, baseFlags{{Name: "python", Path: "bases/python.tar"}}, ""},
		{"several bases keep their order", []string{"python=a", "node-22=b"}, baseFlags{{Name: "python", Path: "a"}, {Name: "node-22", Path: "b"}}, ""},
		{"a path may contain =", []string{"python=dir/a=b.tar"}, baseFlags{{Name: "python", Path: "dir/a=b.tar"}}, ""},
		{"a value without = is rejected", []string{"python"}, nil, "want NAME=PATH"},
		{"an empty path is rejected", []string{"python="}, nil, "want NAME=PATH"},
		{"a name that cannot be part of a tag is rejected", []string{"Py thon=a"}, nil, "part of a tag"},
		{"a name given twice is rejected", []string{"python=a", "python=b"}, nil, "given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got baseFlags
			var err error
			for _, v := range tt.values {
				if err = got.Set(v); err != nil {
					break
				}
			}
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSelectedImages(t *testing.T) {
	tests := []struct {
		name    string
		images  string
		want    []string
		wantErr string
	}{
		{"the default is every Go image", newOptions().images, imageNames(), ""},
		{"images come in the order of goImages", "krt, kruntimes-apiserver", []string{"kruntimes-apiserver", "krt"}, ""},
		{"empty selects none, for a --base-only build", "", nil, ""},
		{"an unknown image is rejected with the known ones", "kruntimes-apiserver,kube-apiserver", nil, `no image "kube-apiserver"; the images are kruntimes-apiserver`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOptions()
			o.images = tt.images
			specs, err := o.selectedImages()
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, s := range specs {
				got = append(got, s.Name)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestBuildRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*options)
		wantErr string
	}{
		{"nothing to build", func(o *options) { o.images = "" }, "nothing to build"},
		{"a version that cannot be a tag", func(o *options) { o.version = "v1.0.0+build" }, "cannot be a tag"},
		{"no CA bundle", func(o *options) { o.images = "krt"; o.caCertificates = filepath.Join(t.TempDir(), "missing.crt") }, "ca-certificates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t.TempDir())
			tt.modify(o)
			_, err := o.build(context.Background())
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestImageNamesMatchCommands(t *testing.T) {
	for _, spec := range goImages {
		for _, bin := range spec.binaries() {
			_, err := os.Stat(filepath.Join(repoRoot, "cmd", bin, "main.go"))
			assert.NoError(t, err, "image %s ships %s, which must be a command of cmd/", spec.Name, bin)
		}
	}
	assert.True(t, strings.Contains(strings.Join(findSpec(runtimeImage).Companions, ","), "kruntimes-reaper"),
		"kruntimes-runtime runs programs under kruntimes-reaper, found beside its executable")
}
