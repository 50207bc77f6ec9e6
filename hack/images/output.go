package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation names an image in an OCI layout's index.json, as
// skopeo, crane and containerd read it.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// tagPattern is what a registry accepts as a tag.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// run builds the images, writes them under the output directory and pushes
// them when --push names a registry.
func (o *options) run(ctx context.Context) error {
	images, err := o.build(ctx)
	if err != nil {
		return err
	}
	out := o.outputDir()
	var list strings.Builder
	for _, img := range images {
		ref := img.Ref(o.repository)
		if err := writeOutputs(out, img, img.Refs(o.repository)); err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		digest, err := img.Image.Digest()
		if err != nil {
			return err
		}
		compressed, uncompressed, err := imageSizes(img.Image)
		if err != nil {
			return err
		}
		fmt.Printf("%-60s %s  %5.1f MiB compressed, %5.1f MiB unpacked\n", ref, digest, mib(compressed), mib(uncompressed))
		fmt.Fprintf(&list, "%s %s\n", ref, digest)
	}
	if err := os.WriteFile(filepath.Join(out, "images.txt"), []byte(list.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("images: OCI layouts and docker load tarballs in %s; references and digests in %s\n", out, filepath.Join(out, "images.txt"))
	if o.push == "" {
		return nil
	}
	pushed, err := push(ctx, o.push, images, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	for _, p := range pushed {
		fmt.Println("pushed", p)
	}
	return err
}

// build builds the binaries and assembles every image the flags ask for.
func (o *options) build(ctx context.Context) ([]builtImage, error) {
	specs, err := o.selectedImages()
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 && len(o.bases) == 0 {
		return nil, fmt.Errorf("nothing to build: --images is empty and no --base is given")
	}
	rev, err := readRevision(ctx, o.repoRoot)
	if err != nil {
		return nil, err
	}
	info := buildInfo{Revision: rev, Version: o.version, Source: o.source, Arch: o.arch}
	if info.Version == "" {
		info.Version = rev.pseudoVersion()
	}
	if !tagPattern.MatchString(info.Version) {
		return nil, fmt.Errorf("--version %q cannot be a tag: letters, digits, _ . - only", info.Version)
	}
	info.BinDir = filepath.Join(o.outputDir(), "bin", "linux_"+o.arch)

	var caBundle []byte
	if len(specs) > 0 {
		if caBundle, err = os.ReadFile(o.caCertificates); err != nil {
			return nil, fmt.Errorf("reading the CA certificates for the images (install Debian's ca-certificates, or pass --ca-certificates): %w", err)
		}
	}
	var commands []string
	for _, s := range specs {
		commands = append(commands, s.binaries()...)
	}
	if len(o.bases) > 0 && !slices.Contains(commands, runtimeImage) {
		commands = append(commands, findSpec(runtimeImage).binaries()...)
	}
	if err := buildBinaries(ctx, o.repoRoot, info.BinDir, o.arch, info.Version, rev.Commit, commands); err != nil {
		return nil, err
	}

	var images []builtImage
	if len(specs) > 0 {
		base, err := newLayer(distrolessEntries(caBundle), info.created(), types.OCILayer)
		if err != nil {
			return nil, err
		}
		for _, spec := range specs {
			img, err := goImage(info, spec, base)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", spec.Name, err)
			}
			built := builtImage{Key: spec.Name, Name: spec.Name, Tag: info.Version, Image: img}
			if o.latest {
				built.Aliases = []string{"latest"}
			}
			images = append(images, built)
		}
	}
	for _, b := range o.bases {
		base, err := loadBase(b.Path, info)
		if err != nil {
			return nil, err
		}
		img, err := runtimeOnBase(info, base, b.Name)
		if err != nil {
			return nil, fmt.Errorf("%s on base %s: %w", runtimeImage, b.Name, err)
		}
		images = append(images, builtImage{Key: runtimeImage + "-" + b.Name, Name: runtimeImage, Tag: info.Version + "-" + b.Name, Image: img})
	}
	return images, nil
}

func (o *options) outputDir() string {
	if filepath.IsAbs(o.output) {
		return o.output
	}
	return filepath.Join(o.repoRoot, o.output)
}

// writeOutputs replaces img's OCI layout (<out>/<key>/) and docker load
// tarball (<out>/<key>.tar), both naming it by every one of refs.
func writeOutputs(out string, img builtImage, refs []string) error {
	tags := map[name.Reference]v1.Image{}
	for _, ref := range refs {
		tag, err := name.NewTag(ref, name.StrictValidation)
		if err != nil {
			return err
		}
		tags[tag] = img.Image
	}
	dir := filepath.Join(out, img.Key)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	// One index entry per reference: the layout's blobs are stored once.
	for _, ref := range refs {
		if err := p.AppendImage(img.Image, layout.WithAnnotations(map[string]string{refNameAnnotation: ref})); err != nil {
			return fmt.Errorf("writing the OCI layout: %w", err)
		}
	}
	tmp := filepath.Join(out, "."+img.Key+".tar.tmp")
	if err := tarball.MultiRefWriteToFile(tmp, tags); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the docker load tarball: %w", err)
	}
	return os.Rename(tmp, filepath.Join(out, img.Key+".tar"))
}

// push pushes every image to <registry>/<name>:<tag> and returns each
// reference pushed with its digest.
func push(ctx context.Context, registry string, images []builtImage, opts ...remote.Option) ([]string, error) {
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	var pushed []string
	for _, img := range images {
		for i, r := range img.Refs(registry) {
			ref, err := name.NewTag(r, name.StrictValidation)
			if err != nil {
				return pushed, fmt.Errorf("--push %s: %w", registry, err)
			}
			digest, err := img.Image.Digest()
			if err != nil {
				return pushed, err
			}
			if i == 0 {
				err = remote.Write(ref, img.Image, opts...)
			} else {
				// The blobs and manifest are there already: only the tag moves.
				err = remote.Tag(ref, img.Image, opts...)
			}
			if err != nil {
				return pushed, fmt.Errorf("pushing %s: %w", ref, err)
			}
			pushed = append(pushed, ref.String()+"@"+digest.String())
		}
	}
	return pushed, nil
}

// imageSizes returns the bytes a registry stores for img (its compressed
// layers and config) and the bytes of its unpacked layers.
func imageSizes(img v1.Image) (compressed, uncompressed int64, err error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, 0, err
	}
	compressed = m.Config.Size
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range layers {
		size, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		compressed += size
		n, err := uncompressedSize(l)
		if err != nil {
			return 0, 0, err
		}
		uncompressed += n
	}
	return compressed, uncompressed, nil
}

func uncompressedSize(l v1.Layer) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
