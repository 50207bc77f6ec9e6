package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/klog/v2"
)

// Registry is the cluster's loopback OCI registry (go-containerregistry's),
// which the node's containerd pulls from over plain HTTP.
type Registry struct {
	// Host is host:port, the prefix of image references in it.
	Host   string
	server *http.Server
	done   chan struct{}
}

// StartRegistry serves a registry on a free loopback port with its blobs in
// dir; manifests live in memory, so images are pushed again at every
// start.
func StartRegistry(ctx context.Context, dir string) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	r := &Registry{
		Host: l.Addr().String(),
		server: &http.Server{
			Handler: registry.New(
				registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)),
				registry.Logger(log.New(io.Discard, "", 0)),
			),
			ReadHeaderTimeout: 10 * time.Second,
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		if err := r.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Loopback registry stopped")
		}
	}()
	return r, nil
}

// Stop closes the registry.
func (r *Registry) Stop() {
	if r == nil {
		return
	}
	_ = r.server.Close()
	<-r.done
}

// PushBinary pushes an image of one static binary, at /<name>, as its
// entrypoint, owned by root and run as user (e.g. "65532"; "" for root),
// to <registry>/<repository>:<tag> and returns that reference.
func (r *Registry) PushBinary(ctx context.Context, repository, tag, binary, user string) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	base := filepath.Base(binary)
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	if err := tw.WriteHeader(&tar.Header{Name: base, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	layerBytes := layerTar.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return "", err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/" + base}, User: user})
	if err != nil {
		return "", err
	}
	ref, err := name.ParseReference(fmt.Sprintf("%s/%s:%s", r.Host, repository, tag), name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return ref.String(), nil
}

// BuildStatic builds the main package pkg of the module at dir into out
// without cgo, so it runs in an image with nothing else in it.
func BuildStatic(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, strings.TrimSpace(string(output)))
	}
	return nil
}

// refNameAnnotation names an image in an OCI image layout's index.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// PushLayout pushes every image of the OCI image layout at dir whose
// reference (its org.opencontainers.image.ref.name, as hack/images writes
// it) is on host — a host the node mirrors to this registry — so that the
// node pulls host/<repository>:<tag> from here. It returns the references
// pushed.
func (r *Registry) PushLayout(ctx context.Context, dir, host string) ([]string, error) {
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the image layout %s: %w", dir, err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the image layout %s: %w", dir, err)
	}
	var pushed []string
	for _, desc := range manifest.Manifests {
		ref, err := name.ParseReference(desc.Annotations[refNameAnnotation])
		if err != nil || ref.Context().RegistryStr() != host {
			continue
		}
		img, err := index.Image(desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("reading %s from %s: %w", ref, dir, err)
		}
		local, err := name.ParseReference(fmt.Sprintf("%s/%s:%s", r.Host, ref.Context().RepositoryStr(), ref.Identifier()), name.Insecure)
		if err != nil {
			return nil, err
		}
		if err := remote.Write(local, img, remote.WithContext(ctx)); err != nil {
			return nil, fmt.Errorf("pushing %s as %s: %w", ref, local, err)
		}
		pushed = append(pushed, ref.String())
	}
	return pushed, nil
}
