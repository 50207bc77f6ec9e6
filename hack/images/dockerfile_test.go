package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dockerfileImages are the images with a Dockerfile in build/<image>/: the Go
// images, and kruntimes-runtime on a Python base.
func dockerfileImages() map[string]imageSpec {
	images := map[string]imageSpec{}
	for _, s := range goImages {
		images[s.Name] = s
	}
	images[runtimeImage+"-python"] = findSpec(runtimeImage)
	return images
}

// TestDockerfilesMatchTheImages keeps the Dockerfiles, which no test here
// can build (there is no Docker engine), building what hack/images builds:
// the same go build flags and commands, binaries in the same place, the
// same user, entrypoint and labels.
func TestDockerfilesMatchTheImages(t *testing.T) {
	images := dockerfileImages()
	dirs, err := filepath.Glob(filepath.Join(repoRoot, "build", "*", "Dockerfile"))
	require.NoError(t, err)
	var found []string
	for _, d := range dirs {
		found = append(found, filepath.Base(filepath.Dir(d)))
	}
	var want []string
	for key := range images {
		want = append(want, key)
	}
	assert.ElementsMatch(t, want, found, "one Dockerfile per image, none for an image hack/images does not build")

	buildArgs := goBuildArgs("/out", "${VERSION}", "${COMMIT}")
	for key, spec := range images {
		t.Run(key, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(repoRoot, "build", key, "Dockerfile"))
			require.NoError(t, err)
			// Join continued lines, so each instruction is one line.
			text := strings.ReplaceAll(string(data), "\\\n", " ")
			text = regexp.MustCompile(`[ \t]+`).ReplaceAllString(text, " ")

			assert.Contains(t, text, "CGO_ENABLED=0")
			for i := 1; i < len(buildArgs)-2; i++ { // build ... (not -o DIR)
				arg := buildArgs[i]
				if strings.Contains(arg, " ") {
					arg = `"` + arg + `"`
				}
				assert.Contains(t, text, " "+arg+" ", "go build argument %s", arg)
			}
			var pkgs, copies []string
			for _, bin := range spec.binaries() {
				pkgs = append(pkgs, "./cmd/"+bin)
				copies = append(copies, "/out/"+bin)
			}
			assert.Contains(t, text, "-o /out/ "+strings.Join(pkgs, " ")+"\n")
			assert.Contains(t, text, "COPY --from=build "+strings.Join(copies, " ")+" "+binDir+"/\n")
			assert.Contains(t, text, "\nUSER 65532\n")
			assert.Contains(t, text, `ENTRYPOINT ["`+binDir+"/"+spec.Name+`"]`)
			for _, label := range []string{"source", "revision", "version", "title"} {
				assert.Contains(t, text, "org.opencontainers.image."+label+"=", "label %s", label)
			}
			assert.Contains(t, text, `org.opencontainers.image.source="`+newOptions().source+`"`)
			assert.Contains(t, text, `org.opencontainers.image.title="`+spec.Name+`"`)
			if key == spec.Name {
				assert.Contains(t, text, `org.opencontainers.image.description="`+spec.Description+`"`)
				assert.Contains(t, text, "FROM gcr.io/distroless/static-debian12:nonroot\n", "a Go image has no shell")
				assert.Contains(t, text, "WORKDIR "+nonrootHome+"\n")
			}
		})
	}
}
