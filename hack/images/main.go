// Command images builds the kruntimes container images without a container
// engine: static Go binaries on an empty base with a distroless-like layer
// (passwd and group with the nonroot user 65532, /tmp, CA certificates),
// assembled with go-containerregistry. The same commit, Go toolchain and CA
// bundle give the same digests: every timestamp is the commit's time (or
// $SOURCE_DATE_EPOCH).
//
// For each image it writes, under --output, an OCI image layout (<image>/)
// and a tarball that `docker load` reads (<image>.tar), and lists every
// reference with its digest in images.txt. --push REGISTRY pushes them all to
// REGISTRY/<image>:<tag>, with the credentials of ~/.docker/config.json.
// --base NAME=PATH also puts kruntimes-runtime on the base image at PATH (an
// OCI layout directory, a `docker save` tarball or a root file system
// tarball), tagged <version>-NAME: the Runtime Server needs its language's
// interpreter, which the Go images do not have.
//
// Usage, from the repository root (the Makefile's `make images`):
//
//	go run ./hack/images [--output _output/images] [--version v0.1.0] [--push ghcr.io/you] [--base python=base.tar]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
)

func main() {
	o := newOptions()
	o.addFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "images: takes no arguments, got %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := o.run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

// options are the tool's flags.
type options struct {
	repoRoot       string
	output         string
	repository     string
	version        string
	source         string
	arch           string
	caCertificates string
	images         string
	bases          baseFlags
	push           string
	latest         bool
}

func newOptions() *options {
	return &options{
		repoRoot:       ".",
		output:         "_output/images",
		repository:     "kruntimes.io",
		source:         "https://kruntimes.io/kruntimes",
		arch:           runtime.GOARCH,
		caCertificates: "/etc/ssl/certs/ca-certificates.crt",
		images:         strings.Join(imageNames(), ","),
		latest:         true,
	}
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.repoRoot, "repo", o.repoRoot, "The kruntimes repository to build from.")
	fs.StringVar(&o.output, "output", o.output, "Directory for the OCI layouts, the docker load tarballs, images.txt and the binaries, relative to --repo; each image's files are replaced.")
	fs.StringVar(&o.repository, "repository", o.repository, "Registry and path the images are named under in the tarballs and layouts: <repository>/<image>:<tag>.")
	fs.StringVar(&o.version, "version", o.version, "Release the images are tagged and labeled with and the binaries report; empty: a Go pseudo-version of HEAD (v0.0.0-<commit time>-<commit>), -dirty when tracked files changed.")
	fs.StringVar(&o.source, "source", o.source, "URL of the source repository, the org.opencontainers.image.source label.")
	fs.StringVar(&o.arch, "arch", o.arch, "GOARCH of the images (linux only).")
	fs.StringVar(&o.caCertificates, "ca-certificates", o.caCertificates, "CA bundle copied into the Go images at /etc/ssl/certs/ca-certificates.crt (Debian's ca-certificates package).")
	fs.StringVar(&o.images, "images", o.images, "Comma-separated images to build, of "+strings.Join(imageNames(), ", ")+"; empty builds only the --base ones.")
	fs.Var(&o.bases, "base", "NAME=PATH: also put kruntimes-runtime on the base image at PATH (OCI layout directory, docker save tarball, or root file system tarball), tagged <version>-NAME. Repeatable.")
	fs.BoolVar(&o.latest, "latest", o.latest, "Also tag every Go image latest, in its tarball and layout and when pushing, so that defaults naming :latest (such as a Runtime's runtimedImage) resolve after a local build; --latest=false for a release that must not move latest.")
	fs.StringVar(&o.push, "push", o.push, "Registry and path to push every image to as <push>/<image>:<tag>, such as ghcr.io/you or localhost:5000; empty pushes nothing.")
}

// baseFlags are the --base NAME=PATH flags.
type baseFlags []baseImage

// baseImage is a base to put kruntimes-runtime on.
type baseImage struct {
	// Name is the variant, the tag's suffix: python gives <version>-python.
	Name string
	// Path is an OCI layout directory or a tarball.
	Path string
}

func (b *baseFlags) String() string {
	parts := make([]string, len(*b))
	for i, base := range *b {
		parts[i] = base.Name + "=" + base.Path
	}
	return strings.Join(parts, ",")
}

func (b *baseFlags) Set(value string) error {
	name, path, ok := strings.Cut(value, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want NAME=PATH, got %q", value)
	}
	if !validVariant(name) {
		return fmt.Errorf("base name %q must be lower-case letters, digits and dashes, starting with a letter: it becomes part of a tag", name)
	}
	for _, existing := range *b {
		if existing.Name == name {
			return fmt.Errorf("base %q given twice", name)
		}
	}
	*b = append(*b, baseImage{Name: name, Path: path})
	return nil
}

func validVariant(name string) bool {
	if name == "" || len(name) > 32 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// selectedImages returns the specs --images names, in the order of goImages.
func (o *options) selectedImages() ([]imageSpec, error) {
	want := map[string]bool{}
	for _, name := range strings.Split(o.images, ",") {
		if name = strings.TrimSpace(name); name != "" {
			want[name] = true
		}
	}
	var specs []imageSpec
	for _, spec := range goImages {
		if want[spec.Name] {
			specs = append(specs, spec)
			delete(want, spec.Name)
		}
	}
	var errs []error
	for name := range want {
		errs = append(errs, fmt.Errorf("--images: no image %q; the images are %s", name, strings.Join(imageNames(), ", ")))
	}
	return specs, errors.Join(errs...)
}
