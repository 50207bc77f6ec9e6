package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// loadBase reads the base image at p: an OCI image layout directory (the
// image for linux/arch when it holds several), a `docker save` tarball of
// one image, or a root file system tarball, plain or gzipped (mmdebstrap,
// debootstrap, docker export), which becomes a one-layer image.
func loadBase(p string, b buildInfo) (v1.Image, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", p, err)
	}
	if info.IsDir() {
		img, err := imageFromLayout(p, b.Arch)
		if err != nil {
			return nil, fmt.Errorf("base %s: %w", p, err)
		}
		return img, nil
	}
	kind, err := tarballKind(p)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", p, err)
	}
	switch kind {
	case dockerArchive:
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			return nil, fmt.Errorf("base %s: %w", p, err)
		}
		return img, nil
	case ociArchive:
		return nil, fmt.Errorf("base %s is an OCI layout in a tarball: unpack it (mkdir base && tar -xf %s -C base) and pass the directory", p, filepath.Base(p))
	}
	layer, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", p, err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: b.history("root file system " + filepath.Base(p))})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", b.Arch
	return mutate.ConfigFile(img, cfg)
}

type archiveKind int

const (
	rootFSArchive archiveKind = iota
	dockerArchive
	ociArchive
)

// tarballKind tells a `docker save` tarball (manifest.json at the top) and
// an OCI layout tarball (oci-layout, index.json) from a root file system.
func tarballKind(p string) (archiveKind, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, err
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	var hasOCILayout bool
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("not a tarball: %w", err)
		}
		switch path.Clean(hdr.Name) {
		case "manifest.json":
			return dockerArchive, nil
		case "oci-layout":
			hasOCILayout = true
		}
	}
	if hasOCILayout {
		return ociArchive, nil
	}
	return rootFSArchive, nil
}

// imageFromLayout returns the image of the layout at dir: its only image,
// or the one for linux/arch, looking one index deep.
func imageFromLayout(dir, arch string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	return pickImage(idx, arch, 2)
}

func pickImage(idx v1.ImageIndex, arch string, depth int) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var candidates []v1.Descriptor
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS == "linux" && d.Platform.Architecture == arch || len(m.Manifests) == 1 {
			candidates = append(candidates, d)
		}
	}
	if len(candidates) != 1 {
		return nil, fmt.Errorf("want one image for linux/%s, found %d among %d manifests", arch, len(candidates), len(m.Manifests))
	}
	d := candidates[0]
	switch {
	case d.MediaType.IsImage():
		return idx.Image(d.Digest)
	case d.MediaType.IsIndex() && depth > 1:
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		return pickImage(child, arch, depth-1)
	}
	return nil, fmt.Errorf("manifest %s has media type %s, not an image", d.Digest, d.MediaType)
}
