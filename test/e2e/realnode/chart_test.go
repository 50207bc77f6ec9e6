package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/test/localcluster"
)

// chartPVC is the chart's default claim of the embedded store, kept by
// helm uninstall.
const chartPVC = "kruntimes-data"

// TestRealNodeChartWithDefaults installs charts/kruntimes with its
// defaults (only the tag of the images make images built is set) on the
// real node: containerd pulls kruntimes-apiserver and kruntimes-controllers
// from the loopback registry, the apiserver reaches kube-apiserver through
// the kubernetes Service, the embedded store lives on the default
// StorageClass's volume, and kube-apiserver reaches the aggregated API
// through its Service's ClusterIP (kube-proxy), without
// --enable-aggregator-routing. The README quickstart then passes through
// it; a Ready function whose Pod is deleted comes back on a new Pod; and
// helm uninstall leaves nothing but the PVC the chart keeps.
func TestRealNodeChartWithDefaults(t *testing.T) {
	root := requireRealNode(t)
	image := pythonRuntimeImage(t, root)
	ctx := klog.NewContext(context.Background(), klog.Background().WithName("realnode"))
	cluster, err := localcluster.Start(ctx, localcluster.Config{
		RepoRoot: root, StateDir: stateDir(t, root), Node: localcluster.NodeContainerd, PodCIDR: podCIDR,
		Kruntimes: localcluster.KruntimesChart,
		Progress:  testWriter{t},
	})
	require.NoError(t, err)
	t.Cleanup(func() { cluster.Stop(ctx) })
	kube, err := kubernetes.NewForConfig(cluster.AdminConfig)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cluster.AdminConfig)
	require.NoError(t, err)
	ns := localcluster.KruntimesNamespace

	values, err := cluster.Helm(ctx, "get", "values", localcluster.ChartRelease, "--namespace", ns, "--output", "json")
	require.NoError(t, err)
	assert.Regexp(t, `^\{"image":\{"apiserver":\{"tag":"[^"]+"\},"controllers":\{"tag":"[^"]+"\}\}\}\s*$`, string(values),
		"the release sets only the images' tag")

	for _, name := range []string{"kruntimes-apiserver", "kruntimes-controllers"} {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		require.NoError(t, err)
		require.Len(t, pods.Items, 1, "Pods of %s", name)
		pod := pods.Items[0]
		require.Len(t, pod.Status.ContainerStatuses, 1)
		status := pod.Status.ContainerStatuses[0]
		assert.True(t, status.Ready, "%s's container is Ready", name)
		assert.Contains(t, status.ImageID, localcluster.ImageHost+"/"+name+"@sha256:", "%s pulled by containerd", name)
		assert.True(t, strings.HasPrefix(status.ContainerID, "containerd://"), status.ContainerID)
		assert.Zero(t, status.RestartCount, "%s did not restart", name)
	}
	pvc, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, chartPVC, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase, "the default StorageClass's volume")
	pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, pv.Spec.HostPath)
	stored, err := os.ReadDir(pv.Spec.HostPath.Path)
	require.NoError(t, err)
	assert.NotEmpty(t, stored, "the embedded store writes its volume as 65532")

	run := func(name string, stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "bin", name), args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Config().KubeconfigPath)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
		return string(out)
	}
	example := func(file string) string {
		data, err := os.ReadFile(filepath.Join(root, "artifacts", "examples", file))
		require.NoError(t, err)
		return strings.ReplaceAll(string(data), "kruntimes.io/kruntimes-runtime:v0.1.0-python", image)
	}

	// The README quickstart.
	run("kubectl", example("runtime-bash.yaml"), "apply", "-f", "-")
	run("kubectl", "", "wait", "--for=condition=Ready", "runtime/bash", "--timeout=3m")
	run("kubectl", example("run-task.yaml"), "create", "-f", "-")
	run("kubectl", "", "wait", "--for=jsonpath={.status.phase}=Succeeded", "run/hello", "--timeout=2m")
	assert.Equal(t, `{"greeted":"world"}`, run("kubectl", "", "get", "run", "hello", "-o", "jsonpath={.status.outputs}"))
	assert.Contains(t, run("krt", "", "logs", "hello"), "hello, world")
	run("kubectl", example("runtime-python.yaml"), "apply", "-f", "-")
	run("kubectl", "", "wait", "--for=condition=Ready", "runtime/python", "--timeout=3m")
	run("kubectl", example("run-function.yaml"), "create", "-f", "-")
	run("kubectl", "", "wait", "--for=condition=Ready", "run/echo", "--timeout=2m")
	assert.Contains(t, run("krt", "", "invoke", "echo", "--data", `{"hello":"world"}`), `"echo":{"hello":"world"}`)

	t.Run("a Runtime Pod deleted under a Ready function: it comes back Ready on a new Pod", func(t *testing.T) {
		old := run("kubectl", "", "get", "run", "echo", "-o", "jsonpath={.status.assignedPod}")
		require.NotEmpty(t, old)
		run("kubectl", "", "delete", "pod", old, "--wait=false")
		var last string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), "get", "run", "echo", "-o",
				`jsonpath={.status.phase} {.status.assignedPod} {.status.conditions[?(@.type=="Ready")].status}`)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Config().KubeconfigPath)
			out, err := cmd.Output()
			if err != nil {
				return false, nil
			}
			last = string(out)
			fields := strings.Fields(last)
			return len(fields) == 3 && fields[0] == "Ready" && fields[1] != old && fields[2] == "True", nil
		})
		require.NoError(t, err, "the function is Ready on another Pod (phase, Pod, Ready: %q)", last)
		assert.Contains(t, run("krt", "", "invoke", "echo", "--data", `{"again":true}`), `"echo":{"again":true}`)
	})

	// Uninstall as the README says: Runs and Runtimes first, while the
	// controllers still run, then helm uninstall.
	manifest, err := cluster.Helm(ctx, "get", "manifest", localcluster.ChartRelease, "--namespace", ns)
	require.NoError(t, err)
	for _, kind := range []string{"runs", "runtimes"} {
		run("kubectl", "", "delete", kind, "--all", "--all-namespaces", "--wait=true", "--timeout=3m")
	}
	out, err := cluster.Helm(ctx, "uninstall", localcluster.ChartRelease, "--namespace", ns, "--wait", "--timeout=3m")
	require.NoError(t, err)
	t.Logf("$ helm uninstall\n%s", out)
	assertChartObjectsGone(ctx, t, kube, dyn, manifest)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return len(pods.Items) == 0, nil
	})
	assert.NoError(t, err, "no Pod left: neither the chart's nor a Runtime's")

	// The kept PVC, removed as the install notes say: the provisioner
	// removes its volume.
	run("kubectl", "", "delete", "pvc", chartPVC, "--namespace", ns, "--wait=true", "--timeout=1m")
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	assert.NoError(t, err, "the released volume %s is removed", pvc.Spec.VolumeName)
}

// assertChartObjectsGone checks that every object of the release's
// manifest is gone, but the PVC the chart keeps.
func assertChartObjectsGone(ctx context.Context, t *testing.T, kube kubernetes.Interface, dyn dynamic.Interface, manifest []byte) {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(manifest)), 4096)
	var checked int
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		if len(obj.Object) == 0 || (obj.GetKind() == "PersistentVolumeClaim" && obj.GetName() == chartPVC) {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Logf("%s %s: %v", gvk.Kind, obj.GetName(), err)
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == "namespace" {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = localcluster.KruntimesNamespace
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		_, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s %s left after helm uninstall (%v)", gvk.Kind, obj.GetName(), err)
		checked++
	}
	assert.Greater(t, checked, 5, "objects of the release checked")
	_, err := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).
		Get(ctx, localcluster.KruntimesAPIService, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no APIService left: %v", err)
}
