package main

import (
	"fmt"
	"maps"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageSpec is one Go image: the command it runs and what ships beside it.
type imageSpec struct {
	// Name is the image's name and the command it runs, ./cmd/<Name>.
	Name string
	// Companions are further commands put beside it in /usr/local/bin.
	Companions []string
	// Description is the org.opencontainers.image.description label.
	Description string
}

// binaries are the commands in the image, its entrypoint first.
func (s imageSpec) binaries() []string { return append([]string{s.Name}, s.Companions...) }

// runtimeImage is the Runtime Server's image, the one --base builds on.
const runtimeImage = "kruntimes-runtime"

// goImages are the images of the commands kruntimes ships.
var goImages = []imageSpec{
	{Name: "kruntimes-apiserver", Description: "The kruntimes.io aggregated API server; it also runs the kruntimes controllers unless --controllers=false (the chart runs them apart)."},
	{Name: "kruntimes-controllers", Description: "The kruntimes controllers as a process of their own, beside kruntimes-apiserver --controllers=false: the chart's default."},
	{Name: "runtimed", Description: "runtimed, the per-Pod daemon every Runtime Pod runs as a sidecar."},
	// The Runtime Server runs every program under kruntimes-reaper, which
	// it finds beside its own executable (docs/api.md, runtimes/process).
	{Name: runtimeImage, Companions: []string{"kruntimes-reaper"}, Description: "The built-in bash and python Runtime Server without an interpreter; see the -python variant, or put it on a base of your own."},
	{Name: "krt", Description: "krt, the kruntimes command line."},
}

func imageNames() []string {
	names := make([]string, len(goImages))
	for i, s := range goImages {
		names[i] = s.Name
	}
	return names
}

func findSpec(name string) imageSpec {
	for _, s := range goImages {
		if s.Name == name {
			return s
		}
	}
	panic("no image spec " + name)
}

// builtImage is an image and the name and tag it is written and pushed
// under.
type builtImage struct {
	// Key names its files under the output directory: the image name, with
	// -<base> for an image built on a --base.
	Key  string
	Name string
	Tag  string
	// Aliases are further tags of the same image, such as latest.
	Aliases []string
	Image   v1.Image
}

// Ref is the image's reference under repository: <repository>/<name>:<tag>.
func (b builtImage) Ref(repository string) string {
	return strings.TrimSuffix(repository, "/") + "/" + b.Name + ":" + b.Tag
}

// Refs are Ref and the references of its aliases.
func (b builtImage) Refs(repository string) []string {
	refs := []string{b.Ref(repository)}
	for _, a := range b.Aliases {
		refs = append(refs, strings.TrimSuffix(repository, "/")+"/"+b.Name+":"+a)
	}
	return refs
}

// buildInfo is what every image of one build shares.
type buildInfo struct {
	Revision revision
	Version  string
	Source   string
	Arch     string
	// BinDir holds the built binaries.
	BinDir string
}

func (b buildInfo) created() time.Time { return b.Revision.Time }

func (b buildInfo) history(createdBy string) v1.History {
	return v1.History{Created: v1.Time{Time: b.created()}, CreatedBy: createdBy, Comment: "hack/images"}
}

// labels are the OCI labels of an image.
func (b buildInfo) labels(title, description string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.created":     b.created().Format(time.RFC3339),
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.revision":    b.Revision.Commit,
		"org.opencontainers.image.source":      b.Source,
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.version":     b.Version,
	}
}

// goImage builds the image of spec on an empty base: the distroless-like
// layer base, then the binaries. It runs as nonroot and has no shell.
func goImage(b buildInfo, spec imageSpec, base v1.Layer) (v1.Image, error) {
	bins, err := newLayer(binaryEntries(b.BinDir, spec.binaries()), b.created(), types.OCILayer)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: b.history("distroless-like base: users root and nonroot (65532), /tmp, CA certificates")},
		mutate.Addendum{Layer: bins, History: b.history("COPY " + strings.Join(spec.binaries(), " ") + " " + binDir + "/")},
	)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", b.Arch, v1.Time{Time: b.created()}
	cfg.Config = v1.Config{
		User:       fmt.Sprint(nonrootUID),
		Entrypoint: []string{path.Join(binDir, spec.Name)},
		Env:        []string{defaultPath, "SSL_CERT_FILE=" + caBundlePath},
		WorkingDir: nonrootHome,
		Labels:     b.labels(spec.Name, spec.Description),
	}
	return mutate.ConfigFile(img, cfg)
}

// runtimeOnBase puts kruntimes-runtime and kruntimes-reaper on base, adds
// the nonroot user when base has none, and makes the Runtime Server the
// entrypoint, run as nonroot. base keeps its layers, environment and
// working directory.
func runtimeOnBase(b buildInfo, base v1.Image, variant string) (v1.Image, error) {
	baseCfg, err := base.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the base's config: %w", err)
	}
	if baseCfg.OS != "" && baseCfg.OS != "linux" || baseCfg.Architecture != "" && baseCfg.Architecture != b.Arch {
		return nil, fmt.Errorf("the base is for %s/%s, the images for linux/%s (--arch)", baseCfg.OS, baseCfg.Architecture, b.Arch)
	}
	layerType := types.OCILayer
	if mt, err := base.MediaType(); err == nil && mt == types.DockerManifestSchema2 {
		layerType = types.DockerLayer
	}
	var adds []mutate.Addendum
	users, err := nonrootEntries(base)
	if err != nil {
		return nil, err
	}
	if users != nil {
		layer, err := newLayer(users, b.created(), layerType)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: layer, History: b.history(fmt.Sprintf("add user %s (%d)", nonrootName, nonrootUID))})
	}
	spec := findSpec(runtimeImage)
	bins, err := newLayer(binaryEntries(b.BinDir, spec.binaries()), b.created(), layerType)
	if err != nil {
		return nil, err
	}
	adds = append(adds, mutate.Addendum{Layer: bins, History: b.history("COPY " + strings.Join(spec.binaries(), " ") + " " + binDir + "/")})
	img, err := mutate.Append(base, adds...)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", b.Arch, v1.Time{Time: b.created()}
	cfg.Config.User = fmt.Sprint(nonrootUID)
	cfg.Config.Entrypoint = []string{path.Join(binDir, runtimeImage)}
	cfg.Config.Cmd = nil
	cfg.Config.Env = withPath(cfg.Config.Env)
	labels := maps.Clone(cfg.Config.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, b.labels(runtimeImage, fmt.Sprintf("The built-in bash and python Runtime Server on the %s base.", variant)))
	cfg.Config.Labels = labels
	return mutate.ConfigFile(img, cfg)
}

// withPath returns env with a PATH, defaultPath's when it has none.
func withPath(env []string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return env
		}
	}
	return append(append([]string(nil), env...), defaultPath)
}
