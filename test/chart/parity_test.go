package chart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// helmLabels are the labels the chart adds to every object (and Pod
// template) that artifacts/ does not have: Helm's and the recommended
// app.kubernetes.io ones naming the release. They are what the parity
// comparison ignores, with helmAnnotations and the Secrets of the secret
// overlay and the caBundle's line breaks (below).
var helmLabels = []string{
	"helm.sh/chart",
	"app.kubernetes.io/part-of",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
	"app.kubernetes.io/managed-by",
}

// helmAnnotations are the chart's annotations that only mean something to
// Helm: the PersistentVolumeClaim's keep on uninstall.
var helmAnnotations = []string{"helm.sh/resource-policy"}

// TestKustomizeParity: the chart renders the very objects of artifacts/
// (the kustomize base and an overlay) with the values that mean the same.
// The chart's own additions (Helm's labels and annotations) are ignored; so
// are the secret overlay's Secrets, which kustomize generates from your
// files and the chart takes as existing Secrets (tls.type=secret), and with
// them the content hash kustomize appends to their names, and the line
// breaks in the base64 of the caBundle kustomize copies from one.
func TestKustomizeParity(t *testing.T) {
	requireHelm(t)
	// The overlays read files from their directory (the secret overlay its
	// certificates), as a user's copy would.
	artifacts := t.TempDir()
	require.NoError(t, os.CopyFS(artifacts, os.DirFS(filepath.Join(repoRoot, "artifacts"))))
	secretOverlay := filepath.Join(artifacts, "overlays", "secret")
	writeOverlayCertificates(t, secretOverlay)

	for _, tc := range []struct {
		overlay string
		values  []string
	}{
		{"secret", []string{
			"--set", "tls.type=secret", "--set", "runtimedCA.type=secret",
			"--set-file", "apiService.caBundle=" + filepath.Join(secretOverlay, "ca.crt"),
		}},
		{"cert-manager", []string{"--set", "tls.type=cert-manager"}},
	} {
		t.Run(tc.overlay, func(t *testing.T) {
			kustomized := kustomize(t, filepath.Join(artifacts, "overlays", tc.overlay))
			// The values that mean what artifacts/ does: the Namespace
			// rendered, and no pull policy (the image is pinned, so the
			// cluster's default is IfNotPresent either way).
			args := append([]string{"--set", "namespace.create=true", "--set", "image.apiserver.pullPolicy=", "--set", "image.controllers.pullPolicy="}, tc.values...)
			out, err := Template(testContext(t), repoRoot, args...)
			require.NoError(t, err)
			charted, err := Decode(out)
			require.NoError(t, err)

			want := byIdentity(t, dropGeneratedSecrets(kustomized))
			got := byIdentity(t, charted)
			assert.Equal(t, sortedKeys(want), sortedKeys(got), "the chart renders the objects of artifacts/overlays/%s", tc.overlay)
			for id, obj := range want {
				if other, ok := got[id]; ok {
					assert.Equal(t, normalize(obj).Object, normalize(other).Object, "%s renders the same from the chart as from artifacts/overlays/%s", id, tc.overlay)
				}
			}
		})
	}
}

func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize %s", dir)
	manifests, err := resources.AsYaml()
	require.NoError(t, err)
	objs, err := Decode(string(manifests))
	require.NoError(t, err)
	return objs
}

// dropGeneratedSecrets removes the Secrets a secretGenerator made and
// points the Deployment's volumes at their names without kustomize's hash.
func dropGeneratedSecrets(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	unhashed := map[string]string{}
	var kept []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == "Secret" {
			name := obj.GetName()
			unhashed[name] = name[:strings.LastIndex(name, "-")]
			continue
		}
		kept = append(kept, obj)
	}
	for _, obj := range kept {
		if obj.GetKind() != "Deployment" {
			continue
		}
		volumes, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "volumes")
		for _, v := range volumes {
			secret, ok := v.(map[string]any)["secret"].(map[string]any)
			if name, hashed := unhashed[fmt.Sprint(secret["secretName"])]; ok && hashed {
				secret["secretName"] = name
			}
		}
		_ = unstructured.SetNestedSlice(obj.Object, volumes, "spec", "template", "spec", "volumes")
	}
	return kept
}

func byIdentity(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		id := obj.GetAPIVersion() + " " + obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
		require.NotContains(t, out, id, "rendered twice")
		out[id] = obj
	}
	return out
}

func sortedKeys(m map[string]*unstructured.Unstructured) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// normalize drops helmLabels and helmAnnotations from an object's metadata
// and from its Pod template's, and the line breaks kustomize puts in the
// base64 of the caBundle it copies from a Secret.
func normalize(obj *unstructured.Unstructured) *unstructured.Unstructured {
	obj = obj.DeepCopy()
	if caBundle, found, _ := unstructured.NestedString(obj.Object, "spec", "caBundle"); found && obj.GetKind() == "APIService" {
		_ = unstructured.SetNestedField(obj.Object, strings.ReplaceAll(caBundle, "\n", ""), "spec", "caBundle")
	}
	for _, meta := range [][]string{{"metadata"}, {"spec", "template", "metadata"}} {
		for field, keys := range map[string][]string{"labels": helmLabels, "annotations": helmAnnotations} {
			path := append(append([]string{}, meta...), field)
			values, found, _ := unstructured.NestedStringMap(obj.Object, path...)
			if !found {
				continue
			}
			for _, k := range keys {
				delete(values, k)
			}
			if len(values) == 0 {
				unstructured.RemoveNestedField(obj.Object, path...)
			} else {
				_ = unstructured.SetNestedStringMap(obj.Object, values, path...)
			}
		}
	}
	return obj
}

// writeOverlayCertificates writes the files the secret overlay turns into
// Secrets. Parity compares objects, not certificates, so one CA and key
// stand in for every pair.
func writeOverlayCertificates(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kruntimes-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	for name, data := range map[string][]byte{
		"ca.crt": certPEM, "tls.crt": certPEM, "tls.key": keyPEM,
		"runtimed-ca.crt": certPEM, "runtimed-ca.key": keyPEM,
		"runtimed-client.crt": certPEM, "runtimed-client.key": keyPEM,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
}
