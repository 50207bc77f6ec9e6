package chart

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/keyutil"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository checkout: go test runs in this package's
// directory.
const repoRoot = "../.."

// requireHelm skips without bin/helm, or fails under KRUNTIMES_E2E_REQUIRE=1
// (make test, which builds it first).
func requireHelm(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(HelmPath(repoRoot)); err != nil {
		msg := "bin/helm is missing: run make helm (hack/build-helm.sh)"
		if os.Getenv("KRUNTIMES_E2E_REQUIRE") == "1" {
			t.Fatalf("%s; KRUNTIMES_E2E_REQUIRE=1 requires the chart tests to run", msg)
		}
		t.Skip(msg)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func ciValuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := CIValuesFiles(repoRoot)
	require.NoError(t, err)
	return files
}

func TestLint(t *testing.T) {
	requireHelm(t)
	for _, file := range ciValuesFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			out, err := Helm(testContext(t), repoRoot, "lint", Dir, "--strict", "--namespace", Namespace, "--values", file)
			require.NoError(t, err, out)
			assert.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
		})
	}
}

// scenario is a ci/*-values.yaml rendered as an upgrade renders it: with
// kruntimes.io served, so the built-in Runtimes are rendered too.
type scenario struct {
	values map[string]any
	objs   []*unstructured.Unstructured
}

func renderScenario(t *testing.T, file string) scenario {
	t.Helper()
	defaults, err := os.ReadFile(filepath.Join(repoRoot, Dir, "values.yaml"))
	require.NoError(t, err)
	overrides, err := os.ReadFile(filepath.Join(repoRoot, file))
	require.NoError(t, err)
	values := map[string]any{}
	for _, data := range [][]byte{defaults, overrides} {
		var v map[string]any
		require.NoError(t, yaml.Unmarshal(data, &v))
		mergeValues(values, v)
	}
	out, err := Template(testContext(t), repoRoot, "--values", file, "--api-versions", "kruntimes.io/v1alpha1/Runtime")
	require.NoError(t, err)
	objs, err := Decode(out)
	require.NoError(t, err)
	return scenario{values: values, objs: objs}
}

// mergeValues merges src into dst as Helm merges values files.
func mergeValues(dst, src map[string]any) {
	for k, v := range src {
		if sub, ok := v.(map[string]any); ok {
			if dsub, ok := dst[k].(map[string]any); ok {
				mergeValues(dsub, sub)
				continue
			}
		}
		dst[k] = v
	}
}

func (s scenario) value(path string) any {
	var v any = s.values
	for _, key := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[key]
	}
	return v
}

func (s scenario) kind(kind string) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for _, obj := range s.objs {
		if obj.GetKind() == kind {
			objs = append(objs, obj)
		}
	}
	return objs
}

func (s scenario) object(kind, name string) *unstructured.Unstructured {
	for _, obj := range s.kind(kind) {
		if obj.GetName() == name {
			return obj
		}
	}
	return nil
}

// deployment is the apiserver's Deployment.
func (s scenario) deployment(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	deployment := s.object("Deployment", apiserverName)
	require.NotNil(t, deployment, "the chart renders the Deployment %s", apiserverName)
	return deployment
}

// TestInvariants checks what every scenario promises, whatever its values.
func TestInvariants(t *testing.T) {
	requireHelm(t)
	for _, file := range ciValuesFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			s := renderScenario(t, file)
			t.Run("the APIService verifies the serving certificate", func(t *testing.T) { checkAPIService(t, s) })
			t.Run("a PodDisruptionBudget only with more than one replica", func(t *testing.T) { checkPodDisruptionBudget(t, s) })
			t.Run("Pods are restricted", func(t *testing.T) { checkSecurityContexts(t, s) })
			t.Run("every container requests CPU and memory", func(t *testing.T) { checkRequests(t, s) })
			t.Run("images are pinned", func(t *testing.T) { checkImages(t, s) })
			t.Run("every mounted Secret is the chart's or named in the values", func(t *testing.T) { checkSecrets(t, s) })
			t.Run("the storage backend's objects", func(t *testing.T) { checkStorage(t, s) })
			t.Run("priority and fairness", func(t *testing.T) { checkFlowControl(t, s) })
		})
	}
}

func checkAPIService(t *testing.T, s scenario) {
	apiServices := s.kind("APIService")
	require.Len(t, apiServices, 1)
	apiService := apiServices[0]
	_, insecure, _ := unstructured.NestedFieldNoCopy(apiService.Object, "spec", "insecureSkipTLSVerify")
	assert.False(t, insecure, "no insecureSkipTLSVerify")
	caBundle, _, _ := unstructured.NestedString(apiService.Object, "spec", "caBundle")
	servingSecret := mountedSecret(t, s.deployment(t), "serving-cert")
	if s.value("tls.type") == "cert-manager" {
		assert.Empty(t, caBundle, "cert-manager's CA injector writes the caBundle")
		inject := apiService.GetAnnotations()["cert-manager.io/inject-ca-from"]
		ns, name, _ := strings.Cut(inject, "/")
		assert.Equal(t, Namespace, ns)
		cert := s.object("Certificate", name)
		require.NotNil(t, cert, "the APIService is injected from Certificate %q, which the chart renders", inject)
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		assert.Equal(t, servingSecret, secretName, "the apiserver serves the certificate the APIService is injected with")
		dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		assert.Contains(t, dnsNames, "kruntimes-apiserver.kruntimes-system.svc", "the name the aggregator dials")
		return
	}
	require.NotEmpty(t, caBundle, "caBundle is set")
	ca := parseCertificate(t, decodeBase64(t, caBundle))
	assert.True(t, ca.IsCA, "caBundle is a CA")
	if s.value("tls.type") != "helm" {
		return
	}
	secret := s.object("Secret", servingSecret)
	require.NotNil(t, secret, "tls.type=helm renders the serving Secret %s", servingSecret)
	assert.Equal(t, caBundle, secretData(t, secret, "ca.crt"), "caBundle is the CA of the serving Secret")
	serving := parseCertificate(t, decodeBase64(t, secretData(t, secret, "tls.crt")))
	_, err := serving.Verify(x509.VerifyOptions{
		DNSName: "kruntimes-apiserver.kruntimes-system.svc", Roots: pool(ca),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	assert.NoError(t, err, "the serving certificate is the CA's, for the name the aggregator dials")
	_, err = keyutil.ParsePrivateKeyPEM(decodeBase64(t, secretData(t, secret, "tls.key")))
	assert.NoError(t, err)

	if s.value("runtimedCA.type") != "" && s.value("runtimedCA.type") != "helm" {
		return
	}
	runtimedCASecret := s.object("Secret", mountedSecret(t, s.deployment(t), "runtimed-ca"))
	clientSecret := s.object("Secret", mountedSecret(t, s.deployment(t), "runtimed-client"))
	require.NotNil(t, runtimedCASecret, "runtimedCA.type=helm renders the runtimed CA Secret")
	require.NotNil(t, clientSecret, "runtimedCA.type=helm renders the apiserver's runtimed client Secret")
	runtimedCA := parseCertificate(t, decodeBase64(t, secretData(t, runtimedCASecret, "tls.crt")))
	assert.True(t, runtimedCA.IsCA)
	assert.NotEqual(t, ca.Raw, runtimedCA.Raw, "the invoke hop has a CA of its own")
	_, err = keyutil.ParsePrivateKeyPEM(decodeBase64(t, secretData(t, runtimedCASecret, "tls.key")))
	assert.NoError(t, err, "the runtime controller gets the CA's key to issue runtimed serving pairs")
	client := parseCertificate(t, decodeBase64(t, secretData(t, clientSecret, "tls.crt")))
	assert.Equal(t, "kruntimes-apiserver", client.Subject.CommonName, "runtimed accepts only this CommonName")
	_, err = client.Verify(x509.VerifyOptions{Roots: pool(runtimedCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err, "the client pair is the runtimed CA's, for client auth")
}

func checkPodDisruptionBudget(t *testing.T, s scenario) {
	replicas := s.value("replicas").(float64)
	deployment := s.deployment(t)
	got, found, err := unstructured.NestedInt64(deployment.Object, "spec", "replicas")
	require.True(t, found && err == nil, "the Deployment's replicas: %v", err)
	assert.Equal(t, int64(replicas), got)
	pdbs := s.kind("PodDisruptionBudget")
	if replicas <= 1 {
		assert.Empty(t, pdbs, "one replica with minAvailable 1 would block every drain")
		return
	}
	require.Len(t, pdbs, 1)
	pdbSelector, _, _ := unstructured.NestedStringMap(pdbs[0].Object, "spec", "selector", "matchLabels")
	deploymentSelector, _, _ := unstructured.NestedStringMap(deployment.Object, "spec", "selector", "matchLabels")
	assert.Equal(t, deploymentSelector, pdbSelector, "the PodDisruptionBudget covers the apiserver Pods")
}

// podTemplates are the Pod specs the chart renders, by owner: the apiserver
// and controllers Deployments' and the built-in Runtimes' templates.
func (s scenario) podTemplates() map[string]map[string]any {
	specs := map[string]map[string]any{}
	for _, kind := range []string{"Deployment", "Runtime"} {
		for _, obj := range s.kind(kind) {
			spec, _, _ := unstructured.NestedMap(obj.Object, "spec", "template", "spec")
			specs[kind+"/"+obj.GetName()] = spec
		}
	}
	return specs
}

func containers(spec map[string]any) []map[string]any {
	var out []map[string]any
	for _, field := range []string{"initContainers", "containers"} {
		list, _, _ := unstructured.NestedSlice(spec, field)
		for _, c := range list {
			out = append(out, c.(map[string]any))
		}
	}
	return out
}

// checkSecurityContexts: the Pods meet Pod Security restricted, which the
// namespace enforces; the apiserver's root file system is read-only too. A
// Runtime's runtime container runs user code, which may write where it
// pleases in its own file system, so that one is not required there.
func checkSecurityContexts(t *testing.T, s scenario) {
	for owner, spec := range s.podTemplates() {
		podSC, _, _ := unstructured.NestedMap(spec, "securityContext")
		for _, c := range containers(spec) {
			sc, _, _ := unstructured.NestedMap(c, "securityContext")
			what := owner + " container " + c["name"].(string)
			effective := func(field ...string) any {
				if v, found, _ := unstructured.NestedFieldNoCopy(sc, field...); found {
					return v
				}
				v, _, _ := unstructured.NestedFieldNoCopy(podSC, field...)
				return v
			}
			assert.Equal(t, true, effective("runAsNonRoot"), "%s runs as non-root", what)
			assert.Equal(t, "RuntimeDefault", effective("seccompProfile", "type"), "%s has the default seccomp profile", what)
			assert.Equal(t, false, sc["allowPrivilegeEscalation"], "%s cannot escalate privilege", what)
			drop, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "drop")
			assert.Contains(t, drop, "ALL", "%s drops every capability", what)
			add, _, _ := unstructured.NestedStringSlice(sc, "capabilities", "add")
			assert.Empty(t, add, "%s adds no capability", what)
			assert.NotEqual(t, true, sc["privileged"], "%s is not privileged", what)
			if strings.HasPrefix(owner, "Deployment/") {
				assert.Equal(t, true, sc["readOnlyRootFilesystem"], "%s has a read-only root file system", what)
			}
		}
	}
}

func checkRequests(t *testing.T, s scenario) {
	for owner, spec := range s.podTemplates() {
		for _, c := range containers(spec) {
			requests, _, _ := unstructured.NestedStringMap(c, "resources", "requests")
			assert.NotEmpty(t, requests["cpu"], "%s container %s requests CPU", owner, c["name"])
			assert.NotEmpty(t, requests["memory"], "%s container %s requests memory", owner, c["name"])
		}
	}
}

func checkImages(t *testing.T, s scenario) {
	images := map[string]string{}
	for owner, spec := range s.podTemplates() {
		for _, c := range containers(spec) {
			images[owner+" container "+c["name"].(string)] = c["image"].(string)
		}
	}
	for _, runtime := range s.kind("Runtime") {
		image, _, _ := unstructured.NestedString(runtime.Object, "spec", "runtimedImage")
		images["Runtime/"+runtime.GetName()+" runtimedImage"] = image
	}
	for what, image := range images {
		_, tag, tagged := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
		assert.True(t, tagged && tag != "" && tag != "latest", "%s: image %q is pinned to a version", what, image)
	}
}

// checkSecrets: each Secret the apiserver and the controllers mount is rendered by the chart,
// written by a Certificate it renders, or named in the values as one the
// user provides.
func checkSecrets(t *testing.T, s scenario) {
	provided := map[string]bool{}
	for _, secret := range s.kind("Secret") {
		provided[secret.GetName()] = true
	}
	for _, cert := range s.kind("Certificate") {
		name, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		provided[name] = true
	}
	for _, path := range []string{"tls.secret.name", "runtimedCA.secret.caName", "runtimedCA.secret.clientName", "storage.etcd3.tlsSecretName"} {
		if name, _ := s.value(path).(string); name != "" && s.valueSelects(path) {
			provided[name] = true
		}
	}
	for _, deployment := range s.kind("Deployment") {
		volumes, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "volumes")
		for _, v := range volumes {
			if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name != "" {
				assert.True(t, provided[name], "%s mounts Secret %s, which nothing provides", deployment.GetName(), name)
			}
		}
	}
}

// valueSelects reports whether the value at path is in use: an existing
// Secret's name counts only with the type that takes one.
func (s scenario) valueSelects(path string) bool {
	switch {
	case strings.HasPrefix(path, "tls.secret."):
		return s.value("tls.type") == "secret"
	case strings.HasPrefix(path, "runtimedCA.secret."):
		runtimedCA := s.value("runtimedCA.type")
		if runtimedCA == "" {
			runtimedCA = s.value("tls.type")
		}
		return runtimedCA == "secret"
	case strings.HasPrefix(path, "storage.etcd3."):
		return s.value("storage.backend") == "etcd3"
	}
	return false
}

func checkStorage(t *testing.T, s scenario) {
	deployment := s.deployment(t)
	strategy, _, _ := unstructured.NestedString(deployment.Object, "spec", "strategy", "type")
	pvc := s.object("PersistentVolumeClaim", "kruntimes-data")
	if s.value("storage.backend") == "embedded" {
		assert.Equal(t, "Recreate", strategy, "two servers never open the data file at once")
		require.NotNil(t, pvc)
		assert.Equal(t, "keep", pvc.GetAnnotations()["helm.sh/resource-policy"], "helm uninstall keeps the Runs' volume")
		assert.Equal(t, "kruntimes-data", mountedClaim(t, deployment))
		return
	}
	assert.Nil(t, pvc, "etcd3 needs no volume")
	assert.Equal(t, "RollingUpdate", strategy)
	args := containerArgs(t, deployment)
	assert.Contains(t, args, "--storage-backend=etcd3")
	for _, arg := range args {
		if servers, ok := strings.CutPrefix(arg, "--etcd-servers="); ok {
			assert.NotEmpty(t, servers)
		}
	}
}

func checkFlowControl(t *testing.T, s scenario) {
	flowSchemas, levels := s.kind("FlowSchema"), s.kind("PriorityLevelConfiguration")
	if s.value("apf.enabled") != true {
		assert.Empty(t, flowSchemas)
		assert.Empty(t, levels)
		return
	}
	require.Len(t, flowSchemas, 2)
	byName := map[string]*unstructured.Unstructured{}
	for _, level := range levels {
		byName[level.GetName()] = level
	}
	for _, fs := range flowSchemas {
		levelName, _, _ := unstructured.NestedString(fs.Object, "spec", "priorityLevelConfiguration", "name")
		level := byName[levelName]
		require.NotNil(t, level, "FlowSchema %s's level %s is rendered", fs.GetName(), levelName)
		precedence, found, err := unstructured.NestedInt64(fs.Object, "spec", "matchingPrecedence")
		require.True(t, found && err == nil, "FlowSchema %s's matchingPrecedence: %v", fs.GetName(), err)
		assert.Greater(t, precedence, int64(1000), "FlowSchema %s comes after the system schemas", fs.GetName())
		assert.Less(t, precedence, int64(9000), "FlowSchema %s beats the built-in service-accounts schema", fs.GetName())
		distinguisher, _, _ := unstructured.NestedString(fs.Object, "spec", "distinguisherMethod", "type")
		assert.Equal(t, "ByUser", distinguisher)
		response, _, _ := unstructured.NestedString(level.Object, "spec", "limited", "limitResponse", "type")
		assert.Equal(t, "Queue", response, "level %s queues rather than rejects at once", levelName)
	}
	invoke := s.object("FlowSchema", "kruntimes-invoke")
	require.NotNil(t, invoke)
	rules, _, _ := unstructured.NestedSlice(invoke.Object, "spec", "rules")
	require.Len(t, rules, 1)
	resources, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "resourceRules")
	require.Len(t, resources, 1)
	assert.Equal(t, []any{"runs/invoke"}, resources[0].(map[string]any)["resources"])
	assert.Equal(t, []any{"create"}, resources[0].(map[string]any)["verbs"])
}

// TestRefuses: values that contradict each other fail helm template with a
// message that says what to change.
func TestRefuses(t *testing.T) {
	requireHelm(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"embedded storage with two replicas", []string{"--set", "replicas=2"},
			"storage.backend=embedded runs one replica"},
		{"etcd3 without servers", []string{"--set", "storage.backend=etcd3"},
			"storage.backend=etcd3 needs storage.etcd3.servers"},
		{"an unknown storage backend", []string{"--set", "storage.backend=sqlite"},
			"storage.backend must be embedded or etcd3"},
		{"no replica", []string{"--set", "storage.backend=etcd3", "--set", "storage.etcd3.servers={https://etcd:2379}", "--set", "replicas=0"},
			"replicas must be at least 1"},
		{"an unknown tls.type", []string{"--set", "tls.type=insecure"},
			"tls.type must be helm, secret or cert-manager"},
		{"an unknown runtimedCA.type", []string{"--set", "runtimedCA.type=self"},
			"runtimedCA.type must be"},
		{"a secret without a CA bundle it can read", []string{"--set", "tls.type=secret"},
			"set apiService.caBundle"},
		{"another namespace", []string{"--namespace", "kruntimes"},
			"install kruntimes into the namespace kruntimes-system"},
		{"an unknown invokeEndpoint", []string{"--set", "invokeEndpoint=proxy"},
			"invokeEndpoint must be aggregated or direct"},
		{"an unknown runtimedAPI", []string{"--set", "runtimedAPI=proxy"},
			"runtimedAPI must be aggregated or direct"},
		{"runtimed direct with a serving Secret that need not hold ca.crt", []string{"--set", "runtimedAPI=direct", "--set", "tls.type=secret", "--set", "apiService.caBundle=Zm9v"},
			"runtimedAPI=direct gives runtimed the serving Secret's ca.crt"},
		{"direct with a serving Secret that need not hold ca.crt", []string{"--set", "invokeEndpoint=direct", "--set", "tls.type=secret", "--set", "apiService.caBundle=Zm9v"},
			"invokeEndpoint=direct gives callers the serving Secret's ca.crt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Template(testContext(t), repoRoot, tc.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestBuiltInRuntimesWaitForTheAPI: on a first install the cluster does not
// serve kruntimes.io yet, so the Runtimes are left out rather than failing
// the install.
func TestBuiltInRuntimesWaitForTheAPI(t *testing.T) {
	requireHelm(t)
	args := []string{"--set", "runtimes.bash.enabled=true", "--set", "runtimes.python.enabled=true"}
	for _, tc := range []struct {
		name   string
		served bool
	}{{"kruntimes.io not served", false}, {"kruntimes.io served", true}} {
		t.Run(tc.name, func(t *testing.T) {
			extra := args
			if tc.served {
				extra = append(extra, "--api-versions", "kruntimes.io/v1alpha1/Runtime")
			}
			out, err := Template(testContext(t), repoRoot, extra...)
			require.NoError(t, err)
			objs, err := Decode(out)
			require.NoError(t, err)
			var runtimes []string
			for _, obj := range objs {
				if obj.GetKind() == "Runtime" {
					runtimes = append(runtimes, obj.GetName())
				}
			}
			if tc.served {
				assert.ElementsMatch(t, []string{"bash", "python"}, runtimes)
			} else {
				assert.Empty(t, runtimes)
			}
		})
	}
}

// TestRuntimeImageHasAnInterpreter: the built-in Runtimes default to the
// -python variant of kruntimes-runtime, since the plain image has no
// interpreter for either of them; an explicit tag is taken as given.
func TestRuntimeImageHasAnInterpreter(t *testing.T) {
	requireHelm(t)
	base := []string{"--set", "runtimes.bash.enabled=true", "--set", "runtimes.python.enabled=true",
		"--api-versions", "kruntimes.io/v1alpha1/Runtime"}
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"default", nil, "-python"},
		{"explicit tag", []string{"--set", "image.runtime.tag=v9.9.9-custom"}, ":v9.9.9-custom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Template(testContext(t), repoRoot, append(base, tc.extra...)...)
			require.NoError(t, err)
			objs, err := Decode(out)
			require.NoError(t, err)
			seen := 0
			for _, obj := range objs {
				if obj.GetKind() != "Runtime" {
					continue
				}
				cs, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
				require.NoError(t, err)
				for _, c := range cs {
					c := c.(map[string]any)
					if c["name"] == "runtime" {
						assert.True(t, strings.HasSuffix(c["image"].(string), tc.want), "Runtime/%s runtime image %q ends in %q", obj.GetName(), c["image"], tc.want)
						seen++
					}
				}
			}
			assert.Equal(t, 2, seen, "both built-in Runtimes have a runtime container")
		})
	}
}

func mountedSecret(t *testing.T, deployment *unstructured.Unstructured, volume string) string {
	t.Helper()
	volumes, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		v := v.(map[string]any)
		if v["name"] == volume {
			name, _, _ := unstructured.NestedString(v, "secret", "secretName")
			return name
		}
	}
	t.Fatalf("%s mounts no volume %s", deployment.GetName(), volume)
	return ""
}

func mountedClaim(t *testing.T, deployment *unstructured.Unstructured) string {
	t.Helper()
	volumes, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "volumes")
	for _, v := range volumes {
		if name, _, _ := unstructured.NestedString(v.(map[string]any), "persistentVolumeClaim", "claimName"); name != "" {
			return name
		}
	}
	return ""
}

func containerArgs(t *testing.T, deployment *unstructured.Unstructured) []string {
	t.Helper()
	list, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	require.NotEmpty(t, list)
	args, _, _ := unstructured.NestedStringSlice(list[0].(map[string]any), "args")
	return args
}

func secretData(t *testing.T, secret *unstructured.Unstructured, key string) string {
	t.Helper()
	value, _, _ := unstructured.NestedString(secret.Object, "data", key)
	require.NotEmpty(t, value, "Secret %s has %s", secret.GetName(), key)
	return value
}

func decodeBase64(t *testing.T, s string) []byte {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	return data
}

func parseCertificate(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	require.NotNil(t, block, "a PEM certificate")
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// TestNotes: what the install notes tell, rendered from a copy of the chart
// with a template that prints them (helm template leaves NOTES.txt out).
func TestNotes(t *testing.T) {
	requireHelm(t)
	root := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(root, Dir), os.DirFS(filepath.Join(repoRoot, Dir))))
	require.NoError(t, os.WriteFile(filepath.Join(root, Dir, "templates", "zz-notes-test.yaml"), []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ include \"kruntimes.notes\" . | quote }}\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	helm, err := filepath.Abs(HelmPath(repoRoot))
	require.NoError(t, err)
	require.NoError(t, os.Symlink(helm, HelmPath(root)))
	notes := func(t *testing.T, args ...string) string {
		out, err := Template(testContext(t), root, append(args, "--show-only", "templates/zz-notes-test.yaml")...)
		require.NoError(t, err)
		objs, err := Decode(out)
		require.NoError(t, err)
		require.Len(t, objs, 1)
		text, _, _ := unstructured.NestedString(objs[0].Object, "data", "notes")
		return text
	}
	for _, tc := range []struct {
		name          string
		args          []string
		want, notWant []string
	}{
		{"embedded storage: the PVC is kept on uninstall", nil,
			[]string{"helm uninstall keeps it (helm.sh/resource-policy: keep)", "kubectl delete pvc kruntimes-data --namespace kruntimes-system"}, nil},
		{"etcd3: no PVC", []string{"--set", "storage.backend=etcd3", "--set", "storage.etcd3.servers={https://etcd:2379}"},
			nil, []string{"PersistentVolumeClaim"}},
		{"built-in Runtimes before kruntimes.io is served", []string{"--set", "runtimes.bash.enabled=true"},
			[]string{"The built-in Runtimes (runtimes.*) were left out", "--reuse-values"}, nil},
		{"built-in Runtimes once kruntimes.io is served", []string{"--set", "runtimes.bash.enabled=true", "--api-versions", "kruntimes.io/v1alpha1/Runtime"},
			nil, []string{"were left out"}},
		{"invoke off", []string{"--set", "runtimedCA.type=none"}, []string{"runs/invoke answers 503"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := notes(t, tc.args...)
			assert.Contains(t, text, "kubectl wait --for=condition=Available apiservice/v1alpha1.kruntimes.io")
			for _, want := range tc.want {
				assert.Contains(t, text, want)
			}
			for _, notWant := range tc.notWant {
				assert.NotContains(t, text, notWant)
			}
		})
	}
}

// TestInvokeEndpoint: invokeEndpoint=direct makes Ready functions advertise
// the chart's Service, and runtimedAPI=direct points runtimed at it, each
// verified with the serving Secret's CA, which the apiserver mounts; the
// defaults add no flag (aggregated).
func TestInvokeEndpoint(t *testing.T) {
	requireHelm(t)
	for _, tc := range []struct {
		name string
		args []string
		// deployment takes the flags, with the serving Secret in volume.
		deployment, volume string
		want               []string
	}{
		{"default", nil, apiserverName, "serving-cert", nil},
		{"direct", []string{"--set", "invokeEndpoint=direct"}, apiserverName, "serving-cert", []string{
			"--invoke-endpoint=direct",
			"--invoke-direct-endpoint-base=https://kruntimes-apiserver.kruntimes-system.svc:443",
			"--invoke-direct-endpoint-ca-file=/var/run/kruntimes/serving-cert/ca.crt",
		}},
		{"direct on another Service port", []string{"--set", "invokeEndpoint=direct", "--set", "service.port=8443"}, apiserverName, "serving-cert", []string{
			"--invoke-endpoint=direct",
			"--invoke-direct-endpoint-base=https://kruntimes-apiserver.kruntimes-system.svc:8443",
			"--invoke-direct-endpoint-ca-file=/var/run/kruntimes/serving-cert/ca.crt",
		}},
		{"runtimed direct goes to the controllers", []string{"--set", "runtimedAPI=direct", "--set", "service.port=8443"}, controllersName, "serving-ca", []string{
			"--runtimed-kruntimes-api-server=https://kruntimes-apiserver.kruntimes-system.svc:8443",
			"--runtimed-kruntimes-api-ca-file=/var/run/kruntimes/serving-ca/ca.crt",
		}},
		{"runtimed direct with the controllers hosted", []string{"--set", "runtimedAPI=direct", "--set", "controllers.hosted=true"}, apiserverName, "serving-cert", []string{
			"--runtimed-kruntimes-api-server=https://kruntimes-apiserver.kruntimes-system.svc:443",
			"--runtimed-kruntimes-api-ca-file=/var/run/kruntimes/serving-cert/ca.crt",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := render(t, tc.args...)
			deployment := s.object("Deployment", tc.deployment)
			require.NotNil(t, deployment)
			var invokeArgs []string
			for _, a := range containerArgs(t, deployment) {
				if strings.HasPrefix(a, "--invoke-") || strings.HasPrefix(a, "--runtimed-kruntimes-api-") {
					invokeArgs = append(invokeArgs, a)
				}
			}
			assert.Equal(t, tc.want, invokeArgs)
			assert.Equal(t, "kruntimes-apiserver-serving", mountedSecret(t, deployment, tc.volume), "the CA file comes from the serving Secret")
			for _, other := range s.kind("Deployment") {
				if other.GetName() == tc.deployment {
					continue
				}
				for _, a := range containerArgs(t, other) {
					assert.False(t, strings.HasPrefix(a, "--invoke-") || strings.HasPrefix(a, "--runtimed-kruntimes-api-"), "%s has no flag %s", other.GetName(), a)
				}
			}
		})
	}
}
