package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ImageBinaries lists the binaries this repository builds that a container
// image may map to. An image maps to bin/<name> when its repository's last
// path element is <name>: "ghcr.io/x/runtimed:v1" → bin/runtimed.
var ImageBinaries = []string{
	"runtimed",
	"kruntimes-runtime",
	"kruntimes-apiserver",
	"kruntimes-controllers",
	"krt",
	"e2e-testserver",
}

// imageRepositoryName returns the last path element of image's repository,
// without tag or digest.
func imageRepositoryName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	last := image[strings.LastIndex(image, "/")+1:]
	if i := strings.Index(last, ":"); i >= 0 {
		last = last[:i]
	}
	return last
}

// resolveImage returns the binary an image runs, or an error that explains
// which images this node can run.
func resolveImage(binDir, image string) (string, error) {
	name := imageRepositoryName(image)
	for _, known := range ImageBinaries {
		if name != known {
			continue
		}
		path := filepath.Join(binDir, name)
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("image %q maps to bin/%s, which is not built", image, name)
		}
		return path, nil
	}
	return "", fmt.Errorf("image %q is not one this local node can run: the repository must end in one of %s", image, strings.Join(ImageBinaries, ", "))
}
