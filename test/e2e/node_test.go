package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster"
	"kruntimes.io/kruntimes/test/localcluster/nodeagent"
)

// testServerImage maps to bin/e2e-testserver on the local node.
const testServerImage = "kruntimes.io/e2e-testserver:dev"

func testServerDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name:  "server",
						Image: testServerImage,
						Args:  []string{"--listen=$(POD_IP):8080"},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 2,
						},
					}},
				},
			},
		},
	}
}

func TestDeploymentRunsOnLocalNode(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "deploy")
	ctx := framework.Context(t, 3*time.Minute)

	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, testServerDeployment("hello"), metav1.CreateOptions{})
	require.NoError(t, err)

	pod := waitForReadyPod(ctx, t, f, ns, "app=hello", "")
	t.Logf("Pod %s Ready with IP %s", pod.Name, pod.Status.PodIP)
	assert.Equal(t, localcluster.DefaultNodeName, pod.Spec.NodeName)
	ip := net.ParseIP(pod.Status.PodIP)
	require.NotNil(t, ip, "podIP")
	assert.True(t, ip.IsLoopback() && !ip.Equal(net.IPv4(127, 0, 0, 1)), "Pod IP %s is its own loopback address", ip)
	require.Len(t, pod.Status.ContainerStatuses, 1)
	assert.True(t, pod.Status.ContainerStatuses[0].Ready)
	assert.NotNil(t, pod.Status.ContainerStatuses[0].State.Running)

	url := fmt.Sprintf("http://%s/", net.JoinHostPort(pod.Status.PodIP, "8080"))
	body := httpGet(ctx, t, url)
	assert.Equal(t, "hello from "+pod.Name+"\n", body)

	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		out, err := f.Kubectl(ctx, "logs", "-n", ns, pod.Name)
		if seen.Err(err) {
			return false, nil
		}
		return strings.Contains(out, "listening on "+pod.Status.PodIP) && strings.Contains(out, "request GET /"), nil
	})
	require.NoError(t, err, "kubectl logs shows the server's output")

	// Deleting the Pod stops its process, and the ReplicaSet replaces it.
	require.NoError(t, f.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	err = framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		_, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return seen.Deleted(err), nil
	})
	require.NoError(t, err, "deleted Pod is removed once its process stopped")
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(pod.Status.PodIP, "8080"), time.Second)
	if err == nil {
		conn.Close()
	}
	assert.Error(t, err, "nothing listens on the deleted Pod's address")
	replacement := waitForReadyPod(ctx, t, f, ns, "app=hello", pod.Name)
	t.Logf("replacement Pod %s Ready with IP %s", replacement.Name, replacement.Status.PodIP)
}

func TestUnknownImageIsImagePullBackOff(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "image")
	ctx := framework.Context(t, time.Minute)
	_, err := f.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "docker.io/library/nginx:1.27"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var waiting *corev1.ContainerStateWaiting
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, "nginx", metav1.GetOptions{})
		if seen.Err(err) || len(pod.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		waiting = pod.Status.ContainerStatuses[0].State.Waiting
		return waiting != nil && waiting.Reason == "ImagePullBackOff", nil
	})
	require.NoError(t, err)
	assert.Contains(t, waiting.Message, "not one this local node can run")
}

func TestCrashingContainerRestarts(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "crash")
	ctx := framework.Context(t, time.Minute)
	// An unknown flag makes the test server exit 2 at once.
	_, err := f.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crash"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "c", Image: testServerImage, Args: []string{"--no-such-flag"}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, "crash", metav1.GetOptions{})
		if seen.Err(err) || len(pod.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		cs := pod.Status.ContainerStatuses[0]
		last := cs.LastTerminationState.Terminated
		seen.State("restartCount %d, last termination %+v", cs.RestartCount, last)
		return cs.RestartCount >= 2 && last != nil && last.ExitCode != 0, nil
	})
	require.NoError(t, err, "container restarts with a recorded non-zero exit")
	out, err := f.Kubectl(ctx, "logs", "-n", ns, "crash", "--previous")
	require.NoError(t, err)
	assert.Contains(t, out, "no-such-flag")
}

func TestCompletedPodSucceeds(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "complete")
	ctx := framework.Context(t, time.Minute)
	_, err := f.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "help"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// --help exits 0 after printing usage.
			Containers: []corev1.Container{{Name: "c", Image: testServerImage, Args: []string{"--help"}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, "help", metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		return pod.Status.Phase == corev1.PodSucceeded, nil
	})
	require.NoError(t, err)
}

// waitForReadyPod waits for a Ready Pod matching selector other than exclude.
func waitForReadyPod(ctx context.Context, t *testing.T, f *framework.Framework, ns, selector, exclude string) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	var last string
	err := framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if seen.Err(err) {
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == exclude || p.DeletionTimestamp != nil {
				continue
			}
			last = fmt.Sprintf("%s phase=%s conditions=%v containers=%v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = p
					return true, nil
				}
			}
		}
		return false, nil
	})
	require.NoError(t, err, "waiting for a Ready Pod (%s); last seen: %s", selector, last)
	return ready
}

func httpGet(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}

func TestLivenessFailureRestartsContainer(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "liveness")
	ctx := framework.Context(t, 2*time.Minute)
	_, err := f.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unhealthy"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:  "c",
				Image: testServerImage,
				// Nothing listens on 8089: every liveness probe fails.
				LivenessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8089)}},
					PeriodSeconds:    1,
					FailureThreshold: 1,
				},
			}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	err = framework.Poll(ctx, framework.PollInterval, framework.PodTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, "unhealthy", metav1.GetOptions{})
		if seen.Err(err) {
			return false, nil
		}
		return len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].RestartCount >= 1, nil
	})
	require.NoError(t, err, "container killed by its liveness probe is restarted")
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		events, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=unhealthy"})
		if seen.Err(err) {
			return false, nil
		}
		reasons := map[string]bool{}
		for _, e := range events.Items {
			reasons[e.Reason] = true
		}
		return reasons["Scheduled"] && reasons["Started"] && reasons["Unhealthy"] && reasons["Killing"], nil
	})
	require.NoError(t, err, "Scheduled, Started, Unhealthy and Killing events are recorded")
}

func TestKubectlLogsFollow(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "follow")
	ctx := framework.Context(t, 2*time.Minute)
	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, testServerDeployment("follow"), metav1.CreateOptions{})
	require.NoError(t, err)
	pod := waitForReadyPod(ctx, t, f, ns, "app=follow", "")

	followCtx, stop := context.WithCancel(ctx)
	defer stop()
	cmd := f.KubectlCommand(followCtx, "logs", "-f", "-n", ns, pod.Name)
	var out syncBuffer
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stop(); _ = cmd.Wait() })

	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		// Each request adds a line; -f must show lines written after it started.
		_ = httpGet(ctx, t, fmt.Sprintf("http://%s/followed", net.JoinHostPort(pod.Status.PodIP, "8080")))
		return strings.Contains(out.String(), "request GET /followed"), nil
	})
	require.NoError(t, err, "kubectl logs -f output: %s", out.String())
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestInitContainerRunsFirst(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "init")
	ctx := framework.Context(t, 2*time.Minute)
	deploy := testServerDeployment("init")
	deploy.Spec.Template.Spec.InitContainers = []corev1.Container{{
		Name: "setup", Image: testServerImage,
		// --help prints usage and exits 0, like a setup step that succeeds.
		Args: []string{"--help"},
	}}
	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := waitForReadyPod(ctx, t, f, ns, "app=init", "")
	require.Len(t, pod.Status.InitContainerStatuses, 1)
	done := pod.Status.InitContainerStatuses[0].State.Terminated
	require.NotNil(t, done, "init container finished")
	assert.Equal(t, int32(0), done.ExitCode)
	assert.Equal(t, "Completed", done.Reason)
	running := pod.Status.ContainerStatuses[0].State.Running
	require.NotNil(t, running)
	assert.False(t, running.StartedAt.Before(&done.FinishedAt), "the server started after the init container finished")
}

func TestForceDeleteStopsProcessAndRemovesPodDir(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "force")
	ctx := framework.Context(t, 2*time.Minute)
	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, testServerDeployment("force"), metav1.CreateOptions{})
	require.NoError(t, err)
	pod := waitForReadyPod(ctx, t, f, ns, "app=force", "")
	podDir := nodeagent.PodDir(filepath.Join(f.Cluster.Config().StateDir, "pods"), pod.UID)
	require.DirExists(t, podDir)

	_, err = f.Kubectl(ctx, "delete", "pod", "-n", ns, pod.Name, "--force", "--grace-period=0")
	require.NoError(t, err)
	addr := net.JoinHostPort(pod.Status.PodIP, "8080")
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return false, nil
		}
		_, statErr := os.Stat(podDir)
		return os.IsNotExist(statErr), nil
	})
	require.NoError(t, err, "process stopped and %s removed", podDir)
}
