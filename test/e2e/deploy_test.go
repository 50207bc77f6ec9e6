package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"kruntimes.io/kruntimes/test/chart"
	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster"
)

// The production manifests pass kube-apiserver's validation and admission
// (including Pod Security "restricted", which their namespace enforces) in
// a server-side dry run. The local cluster runs kruntimes from these very
// manifests' RBAC, with its own ExternalName Service in kruntimes-system,
// so the dry run moves the namespaced objects into a fresh namespace
// (kustomize's namespace transformer). The cluster has no cert-manager: of
// that overlay the built-in kinds are dry-run and the cert-manager objects
// are checked to fit together (the Certificate's Secret is the one the
// apiserver mounts, and its CA is what the APIService is injected with).
func TestDeployManifestsServerDryRun(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ctx := framework.Context(t, 3*time.Minute)
	// The overlays read files from their directory (the Secret overlay
	// its certificate), as a user's copy would.
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(f.RepoRoot, "artifacts"))))

	dryRun := func(t *testing.T, overlay string) {
		t.Helper()
		ns := f.CreateNamespace(t, "deploy-dry-run")
		// As the manifests' Namespace, which a dry run does not label.
		_, err := f.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		wrapper := filepath.Join(dir, "dry-run-"+overlay)
		require.NoError(t, os.MkdirAll(wrapper, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(wrapper, "kustomization.yaml"),
			[]byte("resources:\n- ../overlays/"+overlay+"\nnamespace: "+ns+"\n"), 0o644))
		var builtIn strings.Builder
		for _, objs := range objectsByKind(t, kustomize(t, f, wrapper)) {
			for _, obj := range objs {
				if strings.HasPrefix(obj.GetAPIVersion(), "cert-manager.io/") {
					continue
				}
				data, err := obj.MarshalJSON()
				require.NoError(t, err)
				builtIn.Write(data)
				builtIn.WriteString("\n")
			}
		}
		cmd := f.KubectlCommand(ctx, "apply", "--dry-run=server", "-f", "-")
		cmd.Stdin = strings.NewReader(builtIn.String())
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "kubectl apply --dry-run=server:\n%s%s", stdout.String(), stderr.String())
		assert.NotContains(t, stderr.String(), "would violate PodSecurity", "the apiserver and controllers Pods meet Pod Security restricted")
		assert.Contains(t, stdout.String(), "deployment.apps/kruntimes-apiserver created (server dry run)")
		assert.Contains(t, stdout.String(), "deployment.apps/kruntimes-controllers created (server dry run)")
		assert.Contains(t, stdout.String(), "apiservice.apiregistration.k8s.io/"+localcluster.KruntimesAPIService+" configured (server dry run)")
	}

	t.Run("secret overlay", func(t *testing.T) {
		overlay := filepath.Join(dir, "overlays", "secret")
		writeServingCertificate(t, overlay)
		rendered := objectsByKind(t, kustomize(t, f, overlay))
		apiService := rendered["APIService"][0]
		caBundle, _, _ := unstructured.NestedString(apiService.Object, "spec", "caBundle")
		ca, err := os.ReadFile(filepath.Join(overlay, "ca.crt"))
		require.NoError(t, err)
		assert.Equal(t, base64.StdEncoding.EncodeToString(ca), strings.ReplaceAll(caBundle, "\n", ""), "caBundle is the CA of the Secret")
		checkDeployment(t, rendered, secretName(rendered["Secret"]))
		dryRun(t, "secret")
	})

	t.Run("cert-manager overlay", func(t *testing.T) {
		rendered := objectsByKind(t, kustomize(t, f, filepath.Join(dir, "overlays", "cert-manager")))
		certificates, issuers := map[string]*unstructured.Unstructured{}, map[string]bool{}
		for _, cert := range rendered["Certificate"] {
			certificates[cert.GetName()] = cert
		}
		for _, issuer := range rendered["Issuer"] {
			issuers[issuer.GetName()] = true
		}
		for name, cert := range certificates {
			issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
			assert.True(t, issuers[issuer], "Certificate %s is issued by Issuer %q, which the overlay defines", name, issuer)
		}
		inject := rendered["APIService"][0].GetAnnotations()["cert-manager.io/inject-ca-from"]
		ns, certName, _ := strings.Cut(inject, "/")
		serving := certificates[certName]
		require.NotNil(t, serving, "APIService is injected from Certificate %q, which the overlay defines", inject)
		assert.Equal(t, localcluster.KruntimesNamespace, ns)
		assert.Equal(t, ns, serving.GetNamespace())
		dnsNames, _, _ := unstructured.NestedStringSlice(serving.Object, "spec", "dnsNames")
		assert.Contains(t, dnsNames, localcluster.KruntimesService+"."+localcluster.KruntimesNamespace+".svc", "the name the aggregator dials")
		servingSecret, _, _ := unstructured.NestedString(serving.Object, "spec", "secretName")
		checkDeployment(t, rendered, servingSecret)
		dryRun(t, "cert-manager")
	})
}

// The Helm chart's renderings pass kube-apiserver's validation and
// admission too, each ci/*-values.yaml scenario as an upgrade renders it
// (kruntimes.io served, so with the built-in Runtimes, which
// kruntimes-apiserver dry-runs). As for the overlays, the namespaced objects
// (the local cluster's own kruntimes-system runs kruntimes) move into a fresh
// namespace that enforces Pod Security restricted; the
// cluster has neither cert-manager nor the Prometheus Operator, so their
// objects are left out (test/chart checks that they fit together).
func TestChartServerDryRun(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	if _, err := os.Stat(chart.HelmPath(f.RepoRoot)); err != nil {
		if framework.Required() {
			t.Fatalf("bin/helm is missing (make helm); %s=1 requires this test to run", framework.RequireEnv)
		}
		t.Skip("bin/helm is missing: run make helm")
	}
	files, err := chart.CIValuesFiles(f.RepoRoot)
	require.NoError(t, err)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			ctx := framework.Context(t, 3*time.Minute)
			rendered, err := chart.Template(ctx, f.RepoRoot, "--values", file, "--api-versions", "kruntimes.io/v1alpha1/Runtime")
			require.NoError(t, err)
			ns := f.CreateNamespace(t, "chart-dry-run")
			_, err = f.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{})
			require.NoError(t, err)
			var builtIn strings.Builder
			var runtimes []string
			for kind, objs := range objectsByKind(t, rendered) {
				for _, obj := range objs {
					group, _, _ := strings.Cut(obj.GetAPIVersion(), "/")
					if group == "cert-manager.io" || group == "monitoring.coreos.com" {
						continue
					}
					if kind == "Runtime" {
						runtimes = append(runtimes, obj.GetName())
					}
					// The chart names the namespace of every namespaced
					// object, so this moves exactly those.
					if obj.GetNamespace() != "" {
						obj.SetNamespace(ns)
					}
					data, err := obj.MarshalJSON()
					require.NoError(t, err)
					builtIn.Write(data)
					builtIn.WriteString("\n")
				}
			}
			cmd := f.KubectlCommand(ctx, "apply", "--dry-run=server", "-f", "-")
			cmd.Stdin = strings.NewReader(builtIn.String())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "kubectl apply --dry-run=server:\n%s%s", stdout.String(), stderr.String())
			assert.NotContains(t, stderr.String(), "would violate PodSecurity", "the apiserver Pod meets Pod Security restricted")
			assert.Contains(t, stdout.String(), "deployment.apps/kruntimes-apiserver created (server dry run)")
			assert.Contains(t, stdout.String(), "apiservice.apiregistration.k8s.io/"+localcluster.KruntimesAPIService+" configured (server dry run)")
			for _, name := range runtimes {
				assert.Contains(t, stdout.String(), "runtime.kruntimes.io/"+name+" created (server dry run)")
			}
		})
	}
}

// checkDeployment checks what the server's dry run does not: the images of
// the apiserver and controllers Deployments are pinned, the APIService
// verifies, and the serving certificate comes from secret.
func checkDeployment(t *testing.T, rendered map[string][]*unstructured.Unstructured, secret string) {
	t.Helper()
	var deploy *unstructured.Unstructured
	var names []string
	for _, d := range rendered["Deployment"] {
		names = append(names, d.GetName())
		if d.GetName() == "kruntimes-apiserver" {
			deploy = d
		}
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		require.NotEmpty(t, containers)
		for _, c := range containers {
			c := c.(map[string]any)
			image, _ := c["image"].(string)
			_, tag, tagged := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
			assert.True(t, tagged && tag != "latest", "image %q is pinned to a version", image)
			_, hasLimits, _ := unstructured.NestedMap(c, "resources", "limits")
			_, hasRequests, _ := unstructured.NestedMap(c, "resources", "requests")
			assert.True(t, hasLimits && hasRequests, "container %v has resource requests and limits", c["name"])
			readOnly, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem")
			assert.True(t, readOnly, "container %v has a read-only root file system", c["name"])
		}
	}
	assert.ElementsMatch(t, []string{"kruntimes-apiserver", "kruntimes-controllers"}, names, "the apiserver and, apart, the controllers")
	require.NotNil(t, deploy)
	var mounted string
	volumes, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		if v := v.(map[string]any); v["name"] == "serving-cert" {
			mounted, _, _ = unstructured.NestedString(v, "secret", "secretName")
		}
	}
	assert.Equal(t, secret, mounted, "the apiserver serves the certificate the APIService trusts")
	apiService := rendered["APIService"][0]
	_, insecure, _ := unstructured.NestedBool(apiService.Object, "spec", "insecureSkipTLSVerify")
	assert.False(t, insecure, "the APIService verifies the serving certificate")
}

func kustomize(t *testing.T, f *framework.Framework, dir string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(f.RepoRoot, "bin", "kubectl"), "kustomize", dir).Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		err = errors.Join(err, errors.New(string(exitErr.Stderr)))
	}
	require.NoError(t, err, "kubectl kustomize %s", dir)
	return string(out)
}

func objectsByKind(t *testing.T, manifests string) map[string][]*unstructured.Unstructured {
	t.Helper()
	objs := map[string][]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		obj := &unstructured.Unstructured{}
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		require.NoError(t, err)
		objs[obj.GetKind()] = append(objs[obj.GetKind()], obj)
	}
}

func secretName(secrets []*unstructured.Unstructured) string {
	for _, s := range secrets {
		if strings.HasPrefix(s.GetName(), "kruntimes-apiserver-serving") {
			return s.GetName()
		}
	}
	return ""
}

// writeServingCertificate writes what docs/deploy.md tells users to make:
// a CA and a serving pair for the name the aggregator dials, and the invoke
// hop's CA with the apiserver's client pair.
func writeServingCertificate(t *testing.T, dir string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return key
	}
	caKey, servingKey := newKey(), newKey()
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kruntimes-ca"},
		NotBefore: now, NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	svc := localcluster.KruntimesService + "." + localcluster.KruntimesNamespace + ".svc"
	servingDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: svc}, DNSNames: []string{svc},
		NotBefore: now, NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, caTemplate, &servingKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(servingKey)
	require.NoError(t, err)
	runtimedCAKey, clientKey := newKey(), newKey()
	runtimedCATemplate := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "kruntimes-runtimed-ca"},
		NotBefore: now, NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	}
	runtimedCADER, err := x509.CreateCertificate(rand.Reader, runtimedCATemplate, runtimedCATemplate, &runtimedCAKey.PublicKey, runtimedCAKey)
	require.NoError(t, err)
	clientDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(4), Subject: pkix.Name{CommonName: "kruntimes-apiserver"},
		NotBefore: now, NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, runtimedCATemplate, &clientKey.PublicKey, runtimedCAKey)
	require.NoError(t, err)
	runtimedCAKeyDER, err := x509.MarshalECPrivateKey(runtimedCAKey)
	require.NoError(t, err)
	clientKeyDER, err := x509.MarshalECPrivateKey(clientKey)
	require.NoError(t, err)
	for name, block := range map[string]*pem.Block{
		"ca.crt":              {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt":             {Type: "CERTIFICATE", Bytes: servingDER},
		"tls.key":             {Type: "EC PRIVATE KEY", Bytes: keyDER},
		"runtimed-ca.crt":     {Type: "CERTIFICATE", Bytes: runtimedCADER},
		"runtimed-ca.key":     {Type: "EC PRIVATE KEY", Bytes: runtimedCAKeyDER},
		"runtimed-client.crt": {Type: "CERTIFICATE", Bytes: clientDER},
		"runtimed-client.key": {Type: "EC PRIVATE KEY", Bytes: clientKeyDER},
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600))
	}
}
