package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	// Dir is the chart, relative to the repository root.
	Dir = "charts/kruntimes"
	// Namespace is the one namespace the chart installs into.
	Namespace = "kruntimes-system"
	// ReleaseName is the release name the tests render with.
	ReleaseName = "kruntimes"
)

// HelmPath is bin/helm of the repository at repoRoot.
func HelmPath(repoRoot string) string { return filepath.Join(repoRoot, "bin", "helm") }

// CIValuesFiles lists the chart's test scenarios, ci/*-values.yaml, as
// paths relative to the repository root.
func CIValuesFiles(repoRoot string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(repoRoot, Dir, "ci", "*-values.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no %s/ci/*-values.yaml", Dir)
	}
	sort.Strings(files)
	for i, f := range files {
		if files[i], err = filepath.Rel(repoRoot, f); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// Helm runs bin/helm with args in repoRoot and returns its standard output;
// the error carries its standard error.
func Helm(ctx context.Context, repoRoot string, args ...string) (string, error) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, HelmPath(root), args...)
	cmd.Dir = root
	// Helm keeps no state the tests need: no repositories, no plugins.
	home := os.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "kruntimes-helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "kruntimes-helm-config"),
		"HELM_DATA_HOME="+filepath.Join(home, "kruntimes-helm-data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %v: %w\n%s", args, err, stderr.String())
	}
	return stdout.String(), nil
}

// Template renders the chart as helm template does for an install into
// kruntimes-system, with the values files (relative to repoRoot) and
// --set-string style flags given as extra arguments.
func Template(ctx context.Context, repoRoot string, extraArgs ...string) (string, error) {
	args := append([]string{"template", ReleaseName, Dir, "--namespace", Namespace}, extraArgs...)
	return Helm(ctx, repoRoot, args...)
}

// Decode splits rendered manifests into objects, in order; empty documents
// are dropped. Integers decode as int64, as from the API.
func Decode(manifests string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(manifests)), 4096)
	for {
		var doc json.RawMessage
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(doc) == 0 || string(doc) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(doc); err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}
