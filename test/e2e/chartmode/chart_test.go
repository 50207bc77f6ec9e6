package chartmode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/registry/storage/embedded"
	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster"
)

func TestMain(m *testing.M) {
	os.Exit(framework.MainWith(m, func(c *localcluster.Config) {
		c.Kruntimes = localcluster.KruntimesChart
		// A Pod IP block apart from the shared suite's (127.101–200) and
		// the replicas suite's (127.201–250), which may run at the same
		// time, and from make run's (127.100).
		c.PodIPBase = net.IPv4(127, byte(51+os.Getpid()%49), 0, 0)
	}))
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

const (
	pvcName        = "kruntimes-data"
	deploymentName = "kruntimes-apiserver"
	podSelector    = "app.kubernetes.io/name=kruntimes-apiserver"
)

// TestChartLifecycle installs, upgrades and uninstalls the chart as a user
// of a real cluster would, and checks each step: the APIService becomes
// Available through the chart's Service endpoint, the embedded store lives
// in the PVC's own directory, the README quickstart passes through the
// chart's server, the direct entry point is off and the audit log has the
// quickstart's writes, the controllers run apart with rights the apiserver
// lacks, an upgrade to a new image tag rolls the Pod and keeps every Run,
// the server's and the controllers' RBAC suffices (no forbidden in their
// logs), and
// uninstalling removes every object the release made but the PVC it keeps.
func TestChartLifecycle(t *testing.T) {
	f := framework.Get(t)
	f.RequireKruntimes(t)
	ctx := framework.Context(t, 15*time.Minute)
	cluster := f.Cluster
	kube := f.Client
	kr, err := versioned.NewForConfig(f.AdminConfig)
	require.NoError(t, err)

	// Install (done by the cluster's start): Available, through the
	// Service's endpoint, the store in the claim's directory.
	requireAPIServiceAvailable(ctx, t, f)
	pod := runningApiserverPod(ctx, t, f, "")
	t.Logf("chart's apiserver Pod %s (%s) at %s", pod.Name, pod.UID, pod.Status.PodIP)

	svc, err := kube.CoreV1().Services(localcluster.KruntimesNamespace).Get(ctx, localcluster.KruntimesService, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ServiceTypeClusterIP, svc.Spec.Type, "the chart's Service, not the host-process mode's ExternalName")
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		slices, err := kube.DiscoveryV1().EndpointSlices(localcluster.KruntimesNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
		if seen.Err(err) {
			return false, nil
		}
		seen.State("%d slices", len(slices.Items))
		if len(slices.Items) != 1 || len(slices.Items[0].Endpoints) != 1 || len(slices.Items[0].Ports) != 1 {
			return false, nil
		}
		ep, port := slices.Items[0].Endpoints[0], slices.Items[0].Ports[0]
		seen.State("endpoint %v ready=%v port %v", ep.Addresses, ep.Conditions.Ready, port.Port)
		return ep.Addresses[0] == pod.Status.PodIP && ep.Conditions.Ready != nil && *ep.Conditions.Ready &&
			port.Port != nil && *port.Port == 8443 && port.Name != nil && *port.Name == "https", nil
	}), "the Service's EndpointSlice names the ready Pod on its target port 8443")

	pvc, err := kube.CoreV1().PersistentVolumeClaims(localcluster.KruntimesNamespace).Get(ctx, pvcName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, corev1.ClaimBound, pvc.Status.Phase)
	pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, pv.Spec.HostPath, "the local-path provisioner's volumes are hostPath")
	volumeDir := pv.Spec.HostPath.Path
	rel, err := filepath.Rel(cluster.VolumeRoot(), volumeDir)
	require.NoError(t, err)
	assert.False(t, strings.HasPrefix(rel, ".."), "volume %s under the provisioner's root %s", volumeDir, cluster.VolumeRoot())
	assert.Contains(t, rel, string(pvc.UID), "a directory of the claim's own")
	assert.FileExists(t, filepath.Join(volumeDir, embedded.DataFileName), "the embedded store in the PVC's directory")

	// The README quickstart through the chart's server, in a namespace of
	// its own.
	ns := f.CreateNamespace(t, "chart-readme")
	runQuickstart(ctx, t, f, ns)

	// Runs went Ready and answered invocations above with the controllers
	// in a Deployment of their own; the apiserver has none of their
	// rights.
	assertControllersApart(ctx, t, f, ns)

	// The security defaults (docs/deploy.md, "Security model"): the
	// direct entry point refuses a valid token with a 403 that says why,
	// and the audit log holds the quickstart's writes and invocations and
	// that refusal.
	refused := assertDirectEntryPointOff(ctx, t, f, pod.Status.PodIP, ns)
	assertAudited(ctx, t, cluster.Config().StateDir, ns, refused)

	runsBefore, err := kr.KruntimesV1alpha1().Runs(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, runsBefore.Items)
	uids := map[string]types.UID{}
	for _, r := range runsBefore.Items {
		uids[r.Name] = r.UID
	}
	hello, err := kr.KruntimesV1alpha1().Runs(ns).Get(ctx, "hello", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, lifecycle.Succeeded, hello.Status.Phase)

	// Upgrade to a new image tag: the Deployment rolls (Recreate, the
	// embedded store's one writer), the Runs stay.
	upgradeArgs := append(cluster.HelmUpgradeArgs(), "--set", "image.apiserver.tag=upgraded")
	out, err := cluster.Helm(ctx, upgradeArgs...)
	require.NoError(t, err)
	t.Logf("$ helm %s\n%s", strings.Join(upgradeArgs, " "), out)
	deploy, err := kube.AppsV1().Deployments(localcluster.KruntimesNamespace).Get(ctx, deploymentName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(deploy.Spec.Template.Spec.Containers[0].Image, ":upgraded"), "image %s", deploy.Spec.Template.Spec.Containers[0].Image)
	newPod := runningApiserverPod(ctx, t, f, pod.UID)
	t.Logf("rolled to Pod %s (%s) at %s", newPod.Name, newPod.UID, newPod.Status.PodIP)
	requireAPIServiceAvailable(ctx, t, f)

	for name, uid := range uids {
		var got *v1alpha1.Run
		require.NoError(t, framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			got, err = kr.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
			return !seen.Err(err), nil
		}), "Run %s after the upgrade", name)
		assert.Equal(t, uid, got.UID, "Run %s keeps its UID across the upgrade", name)
		if name == "hello" {
			assert.Equal(t, hello.Status, got.Status, "the finished task keeps its status")
		}
	}
	kubeconfig := namespacedKubeconfig(t, f, ns)
	require.NoError(t, framework.Poll(ctx, time.Second, 3*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		out, err := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), "--kubeconfig="+kubeconfig, "invoke", "echo", "--data", `{"after":"upgrade"}`).CombinedOutput()
		if seen.Err(fmt.Errorf("%w: %s", err, out)) && err != nil {
			return false, nil
		}
		seen.State("%s", out)
		return strings.Contains(string(out), `"after"`), nil
	}), "the function answers through the upgraded server")

	// The chart's built-in bash Runtime, which it renders only once
	// kruntimes.io is served: an upgrade that changes nothing else creates
	// it (the Deployment does not roll), and a task runs on it.
	bashArgs := append(upgradeArgs, "--set", "runtimes.bash.enabled=true")
	out, err = cluster.Helm(ctx, bashArgs...)
	require.NoError(t, err)
	t.Logf("$ helm %s\n%s", strings.Join(bashArgs, " "), out)
	runtimesNS := "default"
	_, err = f.Kubectl(ctx, "wait", "--for=condition=Ready", "runtime/bash", "--namespace", runtimesNS, "--timeout=3m")
	require.NoError(t, err, "the chart's bash Runtime becomes Ready")
	rt, err := kr.KruntimesV1alpha1().Runtimes(runtimesNS).Get(ctx, "bash", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, localcluster.ChartRelease, rt.Annotations["meta.helm.sh/release-name"], "the Runtime is the release's")
	taskOut, err := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), "--kubeconfig="+f.Kubeconfig, "-n", runtimesNS,
		"run", "-r", "bash", "--name", "chart-bash", "--", "sh", "-c", "echo from the chart runtime").CombinedOutput()
	require.NoError(t, err, "%s", taskOut)
	assert.Contains(t, string(taskOut), "from the chart runtime")
	assert.Equal(t, newPod.UID, runningApiserverPod(ctx, t, f, "").UID, "enabling a Runtime does not roll the apiserver")

	// Every permission the server and the controllers used is in the
	// chart's RBAC.
	assertNoForbidden(t, cluster.Config().StateDir, deploymentName)
	assertNoForbidden(t, cluster.Config().StateDir, controllersName)

	// Uninstall as the README says: Runs and Runtimes first, while the
	// controllers still run, then helm uninstall.
	manifest, err := cluster.Helm(ctx, "get", "manifest", localcluster.ChartRelease, "--namespace", localcluster.KruntimesNamespace)
	require.NoError(t, err)
	notes, err := cluster.Helm(ctx, "get", "notes", localcluster.ChartRelease, "--namespace", localcluster.KruntimesNamespace)
	require.NoError(t, err)
	assert.Contains(t, string(notes), pvcName, "the install notes name the PVC kept on uninstall")
	for _, kind := range []string{"runs", "runtimes"} {
		_, err := f.Kubectl(ctx, "delete", kind, "--all", "--all-namespaces", "--wait=true", "--timeout=3m")
		require.NoError(t, err, "deleting every %s", kind)
	}
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, 2*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		runs, err := kr.KruntimesV1alpha1().Runs("").List(ctx, metav1.ListOptions{})
		if seen.Err(err) {
			return false, nil
		}
		runtimes, err := kr.KruntimesV1alpha1().Runtimes("").List(ctx, metav1.ListOptions{})
		if seen.Err(err) {
			return false, nil
		}
		seen.State("%d Runs, %d Runtimes left", len(runs.Items), len(runtimes.Items))
		return len(runs.Items) == 0 && len(runtimes.Items) == 0, nil
	}), "no Run or Runtime left (none stuck on a finalizer)")
	out, err = cluster.Helm(ctx, "uninstall", localcluster.ChartRelease, "--namespace", localcluster.KruntimesNamespace, "--wait", "--timeout=3m")
	require.NoError(t, err)
	t.Logf("$ helm uninstall\n%s", out)
	assert.Regexp(t, regexp.MustCompile(`(?s)kept.*`+pvcName), string(out), "helm uninstall names the PVC it keeps")

	_, err = f.Dynamic.Resource(apiServiceGVR).Get(ctx, localcluster.KruntimesAPIService, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no APIService left behind: %v", err)
	_, err = kube.CoreV1().PersistentVolumeClaims(localcluster.KruntimesNamespace).Get(ctx, pvcName, metav1.GetOptions{})
	assert.NoError(t, err, "the PVC is kept")
	assertReleaseObjectsGone(ctx, t, f, manifest)

	// Removing the kept PVC for good, as the notes say: the local-path
	// provisioner removes the Released volume and its directory.
	_, err = f.Kubectl(ctx, "delete", "pvc", pvcName, "--namespace", localcluster.KruntimesNamespace, "--wait=true", "--timeout=1m")
	require.NoError(t, err)
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		_, err := kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if !seen.Deleted(err) {
			return false, nil
		}
		_, statErr := os.Stat(volumeDir)
		seen.State("volume deleted; directory: %v", statErr)
		return os.IsNotExist(statErr), nil
	}), "the released volume and its directory %s are removed", volumeDir)
	_, err = os.Stat(cluster.VolumeRoot())
	assert.NoError(t, err, "the provisioner's root stays")
}

// requireAPIServiceAvailable waits for the APIService to be Available.
func requireAPIServiceAvailable(ctx context.Context, t *testing.T, f *framework.Framework) {
	t.Helper()
	require.NoError(t, localcluster.WaitAPIServiceAvailable(ctx, f.Dynamic, localcluster.KruntimesAPIService, 3*time.Minute, nil))
}

// runningApiserverPod waits for the one chart apiserver Pod, Running and
// Ready, whose UID is not notUID, with no other Pod of the Deployment left.
func runningApiserverPod(ctx context.Context, t *testing.T, f *framework.Framework, notUID types.UID) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, 3*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(localcluster.KruntimesNamespace).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
		if seen.Err(err) {
			return false, nil
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, fmt.Sprintf("%s %s ready=%v deleting=%v", p.UID, p.Status.Phase, podReady(p), p.DeletionTimestamp != nil))
		}
		seen.State("%v", states)
		if len(pods.Items) != 1 {
			return false, nil
		}
		p := &pods.Items[0]
		if p.UID == notUID || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return false, nil
		}
		found = p
		return true, nil
	}), "the chart's apiserver Pod runs and is Ready")
	return found
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// namespacedKubeconfig is the cluster-admin kubeconfig with ns as its
// context's namespace.
func namespacedKubeconfig(t *testing.T, f *framework.Framework, ns string) string {
	t.Helper()
	config, err := clientcmd.LoadFromFile(f.Kubeconfig)
	require.NoError(t, err)
	config.Contexts[config.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*config, path))
	return path
}

// runQuickstart runs the README quickstart's commands as a user pastes
// them (what test/e2e's TestREADMEQuickstart runs against the host-process
// server), with KUBECONFIG pointing at namespace ns.
func runQuickstart(ctx context.Context, t *testing.T, f *framework.Framework, ns string) {
	t.Helper()
	commands := quickstartCommands(t, filepath.Join(f.RepoRoot, "README.md"))
	require.NotEmpty(t, commands)
	require.Equal(t, "export KUBECONFIG=$PWD/.local/kubeconfig", commands[0])
	kubeconfig := namespacedKubeconfig(t, f, ns)
	for _, command := range commands[1:] {
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", command)
		cmd.Dir = f.RepoRoot
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "README quickstart command failed: %s\n%s", command, out)
		t.Logf("$ %s\n%s", command, strings.TrimRight(string(out), "\n"))
	}
}

// quickstartCommands returns the lines of the README's last sh block under
// "## Quickstart".
func quickstartCommands(t *testing.T, readme string) []string {
	t.Helper()
	file, err := os.Open(readme)
	require.NoError(t, err)
	defer file.Close()
	var inSection, inBlock bool
	var block []string
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = line == "## Quickstart"
		case inSection && line == "```sh":
			inBlock, block = true, nil
		case inSection && inBlock && line == "```":
			inBlock = false
		case inSection && inBlock && strings.TrimSpace(line) != "":
			block = append(block, line)
		}
	}
	require.NoError(t, scanner.Err())
	return block
}

// assertNoForbidden checks every log of the Pods of the chart's Deployment
// name (kept under logs/pods/ after the Pods are gone) for a forbidden
// answer from kube-apiserver.
func assertNoForbidden(t *testing.T, stateDir, name string) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(stateDir, "logs", "pods", localcluster.KruntimesNamespace+"_"+name+"-*"))
	require.NoError(t, err)
	require.NotEmpty(t, dirs, "the %s Pods' logs are kept", name)
	var logs int
	require.NoError(t, filepath.WalkDir(filepath.Join(stateDir, "logs", "pods"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		for _, dir := range dirs {
			if strings.HasPrefix(path, dir+string(filepath.Separator)) {
				logs++
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				for _, line := range strings.Split(string(data), "\n") {
					if _, audit := isAuditEvent(line); audit {
						// Other callers' refusals (the direct entry
						// point's), not the server's own requests.
						continue
					}
					if strings.Contains(strings.ToLower(line), "forbidden") {
						t.Errorf("%s: %s", path, line)
					}
				}
			}
		}
		return nil
	}))
	assert.Positive(t, logs, "log files read")
}

// assertReleaseObjectsGone checks that every object of the release's
// manifest is gone, but the PVC the chart keeps.
func assertReleaseObjectsGone(ctx context.Context, t *testing.T, f *framework.Framework, manifest []byte) {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(f.Client.Discovery()))
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(manifest)), 4096)
	var checked int
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetKind() == "PersistentVolumeClaim" && obj.GetName() == pvcName {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			// A kind no longer served (the release's own API) has no
			// objects left either.
			t.Logf("%s %s: %v", gvk.Kind, obj.GetName(), err)
			continue
		}
		ri := f.Dynamic.Resource(mapping.Resource)
		var getErr error
		if obj.GetNamespace() != "" || mapping.Scope.Name() == "namespace" {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = localcluster.KruntimesNamespace
			}
			_, getErr = ri.Namespace(ns).Get(ctx, obj.GetName(), metav1.GetOptions{})
		} else {
			_, getErr = ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		}
		assert.True(t, apierrors.IsNotFound(getErr), "%s %s left after helm uninstall (%v)", gvk.Kind, obj.GetName(), getErr)
		checked++
	}
	assert.Greater(t, checked, 5, "objects of the release checked")
}
