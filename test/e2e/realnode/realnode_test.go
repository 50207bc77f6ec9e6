package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/test/localcluster"
	"kruntimes.io/kruntimes/test/localcluster/realnode"
	"kruntimes.io/kruntimes/test/repobin"
)

// podCIDR is this suite's Pod network, apart from make run's.
const podCIDR = "10.245.0.0/24"

func requireRealNode(t *testing.T) string {
	t.Helper()
	realnode.RequireForTest(t)
	wd, err := os.Getwd()
	require.NoError(t, err)
	root, err := repobin.RepoRoot(wd)
	require.NoError(t, err)
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "kubelet", "kube-proxy", "kube-scheduler", "containerd", "containerd-shim-runc-v2"} {
		_, err := os.Stat(filepath.Join(root, "bin", b))
		require.NoError(t, err, "run hack/build-kube.sh and hack/build-node.sh")
	}
	return root
}

func stateDir(t *testing.T, root string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	dir := filepath.Join(root, ".local", "e2e-realnode-"+hex.EncodeToString(b))
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		} else {
			t.Logf("state and logs kept in %s", dir)
		}
	})
	return dir
}

// buildHello builds a static program that prints a line and sleeps.
func buildHello(t *testing.T) string {
	hello, err := realnode.BuildHello(context.Background(), t.TempDir())
	require.NoError(t, err)
	return hello
}

// runHelloPod runs the image as 65532 and returns the Pod once its log
// shows the greeting.
func runHelloPod(ctx context.Context, t *testing.T, client kubernetes.Interface, image string) *corev1.Pod {
	pod, err := client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(65532)), RunAsNonRoot: ptr.To(true)},
			Containers:                    []corev1.Container{{Name: "hello", Image: image, ImagePullPolicy: corev1.PullAlways}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var logs string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err = client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "hello", metav1.GetOptions{})
		if err != nil || pod.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		data, err := client.CoreV1().Pods(metav1.NamespaceDefault).GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(data)
		return err == nil && strings.Contains(logs, realnode.HelloGreeting), nil
	})
	require.NoError(t, err, "Pod %s/hello status %+v, logs %q", metav1.NamespaceDefault, pod.Status, logs)
	assert.Contains(t, logs, "uid 65532")
	_, cidr, _ := net.ParseCIDR(podCIDR)
	assert.True(t, cidr.Contains(net.ParseIP(pod.Status.PodIP)), "Pod IP %s in %s", pod.Status.PodIP, podCIDR)
	return pod
}

// runToCompletion runs the image as 65532 with the default ServiceAccount
// and returns its logs once the Pod Succeeded, as kubectl logs reads them.
func runToCompletion(ctx context.Context, t *testing.T, client kubernetes.Interface, name, image string) string {
	pods := client.CoreV1().Pods(metav1.NamespaceDefault)
	_, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(65532)), RunAsNonRoot: ptr.To(true)},
			Containers:                    []corev1.Container{{Name: name, Image: image}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var pod *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err = pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	})
	logs, logErr := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err, "Pod %s/%s did not finish: status %+v, logs %q", metav1.NamespaceDefault, name, pod.Status, logs)
	require.NoError(t, logErr, "kubectl logs of Pod %s/%s", metav1.NamespaceDefault, name)
	require.Equal(t, corev1.PodSucceeded, pod.Status.Phase, "Pod %s/%s: status %+v, logs %q", metav1.NamespaceDefault, name, pod.Status, logs)
	return string(logs)
}

// hostState is what a real node may leave on the machine.
type hostState struct {
	links    string
	iptables string
	netns    string
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

func readHostState(t *testing.T) hostState {
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	require.NoError(t, err)
	var names []string
	for _, l := range strings.Split(string(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
		}
	}
	rules, err := exec.Command("iptables-save").Output()
	require.NoError(t, err)
	var kept []string
	for _, l := range strings.Split(string(rules), "\n") {
		if !strings.HasPrefix(l, "#") {
			kept = append(kept, counters.ReplaceAllString(l, ""))
		}
	}
	netns, _ := exec.Command("ip", "netns", "list").Output()
	return hostState{links: strings.Join(names, " "), iptables: strings.Join(kept, "\n"), netns: string(netns)}
}

// assertNothingLeft checks that the node left no mount, cgroup, shim,
// link, iptables rule or network namespace.
func assertNothingLeft(t *testing.T, node *realnode.Node, before hostState) {
	t.Helper()
	mounts, err := node.Mounts()
	require.NoError(t, err)
	assert.Empty(t, mounts, "mounts below the state directory")
	for _, hierarchy := range []string{"memory", "pids", "cpu", "systemd"} {
		_, err := os.Stat(filepath.Join("/sys/fs/cgroup", hierarchy, node.CgroupRoot()))
		assert.True(t, os.IsNotExist(err), "cgroup %s of hierarchy %s is left", node.CgroupRoot(), hierarchy)
	}
	after := readHostState(t)
	assert.Equal(t, before.links, after.links, "network links")
	assert.Equal(t, before.iptables, after.iptables, "iptables rules")
	assert.Equal(t, before.netns, after.netns, "named network namespaces")
	out, _ := exec.Command("pgrep", "-f", node.ContainerdSocket()).Output()
	assert.Empty(t, strings.TrimSpace(string(out)), "processes naming the node's containerd socket")
}

func newClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestRealNodeRunsPodsAndLeavesNothing(t *testing.T) {
	root := requireRealNode(t)
	ctx := klog.NewContext(context.Background(), klog.Background().WithName("realnode"))
	before := readHostState(t)
	cfg := localcluster.Config{
		RepoRoot:  root,
		StateDir:  stateDir(t, root),
		Kruntimes: localcluster.KruntimesDisabled,
		Node:      localcluster.NodeContainerd,
		PodCIDR:   podCIDR,
		Progress:  testWriter{t},
	}
	cluster, err := localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	node := cluster.RealNode()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cluster.Stop(ctx)
		}
	})
	client, err := kubernetes.NewForConfig(cluster.AdminConfig)
	require.NoError(t, err)

	n, err := client.CoreV1().Nodes().Get(ctx, cluster.Config().NodeName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://2."), n.Status.NodeInfo.ContainerRuntimeVersion)
	assert.Equal(t, "v1.37.2", n.Status.NodeInfo.KubeletVersion)

	image, err := cluster.PushBinaryImage(ctx, "e2e/hello", "v1", buildHello(t), "")
	require.NoError(t, err)
	runHelloPod(ctx, t, client, image)

	whoami, err := realnode.BuildWhoAmI(ctx, t.TempDir())
	require.NoError(t, err)
	image, err = cluster.PushBinaryImage(ctx, "e2e/whoami", "v1", whoami, "")
	require.NoError(t, err)
	logs := runToCompletion(ctx, t, client, "whoami", image)
	assert.Contains(t, logs, realnode.WhoAmIPrefix+"system:serviceaccount:default:default",
		"a Pod reaches kube-apiserver through the kubernetes Service with its ServiceAccount token")

	cluster.Stop(ctx)
	stopped = true
	assertNothingLeft(t, node, before)
}

func TestRealNodeStartCleansWhatAKilledRunLeft(t *testing.T) {
	root := requireRealNode(t)
	ctx := klog.NewContext(context.Background(), klog.Background().WithName("realnode"))
	before := readHostState(t)
	state := stateDir(t, root)
	kubeconfig := filepath.Join(state, "admin.kubeconfig")
	binary := filepath.Join(t.TempDir(), "localcluster")
	build := exec.Command("go", "build", "-o", binary, "./test/localcluster/cmd/localcluster")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	// A file, not a buffer: the process writes it while the test reads.
	outputPath := filepath.Join(t.TempDir(), "localcluster.log")
	output, err := os.Create(outputPath)
	require.NoError(t, err)
	defer output.Close()
	readOutput := func() string { data, _ := os.ReadFile(outputPath); return string(data) }
	cmd := exec.Command(binary, "--node=containerd", "--kruntimes-apiserver=disabled", "--build=false",
		"--state-dir="+state, "--kubeconfig-out="+kubeconfig, "--pod-cidr="+podCIDR)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = output, output
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(readOutput(), "Press Ctrl-C to stop"), nil
	})
	require.NoError(t, err, readOutput())
	client := newClient(t, kubeconfig)

	// The registry runs in the localcluster process; containerd's
	// configuration names it, beside the hosts it mirrors.
	hosts, err := os.ReadDir(filepath.Join(state, "node", "containerd", "certs.d"))
	require.NoError(t, err)
	var registry *realnode.Registry
	for _, host := range hosts {
		if strings.HasPrefix(host.Name(), "127.0.0.1:") {
			registry = &realnode.Registry{Host: host.Name()}
		}
	}
	require.NotNil(t, registry, "containerd's certs.d names the loopback registry: %v", hosts)
	image, err := registry.PushBinary(ctx, "e2e/hello", "v1", buildHello(t), "")
	require.NoError(t, err)
	runHelloPod(ctx, t, client, image)

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	t.Logf("localcluster killed; its output:\n%s", readOutput())

	// What the killed run left: its containers (their shims outlive
	// containerd), their mounts and network namespaces, the bridge.
	_, cidr, _ := net.ParseCIDR(podCIDR)
	killed, err := realnode.New(realnode.Config{StateDir: filepath.Join(state, "node"), PodCIDR: cidr})
	require.NoError(t, err)
	left, err := killed.Mounts()
	require.NoError(t, err)
	assert.NotEmpty(t, left, "a killed run leaves its containers' mounts")
	_, err = net.InterfaceByName(killed.BridgeName())
	assert.NoError(t, err, "a killed run leaves its bridge")

	cluster, err := localcluster.Start(ctx, localcluster.Config{
		RepoRoot: root, StateDir: state, KubeconfigPath: kubeconfig,
		Kruntimes: localcluster.KruntimesDisabled, Node: localcluster.NodeContainerd, PodCIDR: podCIDR,
		Progress: testWriter{t},
	})
	require.NoError(t, err, "a start after a killed run")
	node := cluster.RealNode()
	cluster.Stop(ctx)
	assertNothingLeft(t, node, before)
}

// pythonRuntimeImage is make image-python's kruntimes-runtime image, as
// its OCI layout names it.
func pythonRuntimeImage(t *testing.T, root string) string {
	data, err := os.ReadFile(filepath.Join(root, "_output", "images", "kruntimes-runtime-python", "index.json"))
	require.NoError(t, err, "run make image-python")
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	require.NoError(t, json.Unmarshal(data, &index))
	for _, m := range index.Manifests {
		if ref := m.Annotations["org.opencontainers.image.ref.name"]; strings.HasSuffix(ref, "-python") {
			return ref
		}
	}
	t.Fatalf("no -python image in make image-python's layout")
	return ""
}

// TestRealNodeRunsTheQuickstart runs the README quickstart on the real node:
// Runtime Pods from make images' images, pulled by containerd as
// kruntimes.io/... from the loopback registry, then a task, krt run and a
// function invoked through kube-apiserver; user code runs as 65532 with no
// credentials and a read-only root file system.
func TestRealNodeRunsTheQuickstart(t *testing.T) {
	root := requireRealNode(t)
	image := pythonRuntimeImage(t, root)
	ctx := klog.NewContext(context.Background(), klog.Background().WithName("realnode"))
	state := stateDir(t, root)
	cluster, err := localcluster.Start(ctx, localcluster.Config{
		RepoRoot: root, StateDir: state, Node: localcluster.NodeContainerd, PodCIDR: podCIDR,
		Progress: testWriter{t},
	})
	require.NoError(t, err)
	t.Cleanup(func() { cluster.Stop(ctx) })

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

	run("kubectl", example("runtime-bash.yaml"), "apply", "-f", "-")
	run("kubectl", "", "wait", "--for=condition=Ready", "runtime/bash", "--timeout=3m")
	run("kubectl", example("run-task.yaml"), "create", "-f", "-")
	run("kubectl", "", "wait", "--for=jsonpath={.status.phase}=Succeeded", "run/hello", "--timeout=2m")
	assert.Equal(t, `{"greeted":"world"}`, run("kubectl", "", "get", "run", "hello", "-o", "jsonpath={.status.outputs}"))
	assert.Contains(t, run("krt", "", "logs", "hello"), "hello, world")

	out := run("krt", "", "run", "--runtime=bash", "--name=isolation", "--", "sh", "-c",
		`id -u; ls /var/run/secrets/kubernetes.io 2>&1; touch /written 2>&1; `+
			`grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; `+
			`echo mounts: $(grep -c -e runtimed-tls -e serviceaccount -e kube-api-access /proc/self/mountinfo); `+
			`echo runtimed: $(for f in /proc/[0-9]*/cmdline; do tr '\0' '\n' < $f 2>/dev/null | head -n 1; done | grep -c 'runtimed$'); echo done`)
	assert.Contains(t, out, "65532\n", "user code runs as 65532")
	assert.Contains(t, out, "/var/run/secrets/kubernetes.io': No such file or directory", "user code has no ServiceAccount token")
	assert.Contains(t, out, "touch: cannot touch '/written'", "the image's root file system is not user code's to write")
	// The example's securityContext, as the kernel applies it to user code.
	assert.Regexp(t, `CapEff:\s+0000000000000000\n`, out, "user code has no capability")
	assert.Regexp(t, `NoNewPrivs:\s+1\n`, out, "user code cannot gain privileges (allowPrivilegeEscalation: false)")
	assert.Regexp(t, `Seccomp:\s+2\n`, out, "user code runs under a seccomp filter (RuntimeDefault)")
	assert.Contains(t, out, "mounts: 0\n", "neither runtimed's TLS key nor any ServiceAccount token is mounted where user code runs")
	assert.Contains(t, out, "runtimed: 0\n", "runtimed's processes (and their /proc) are not visible to user code")

	run("kubectl", example("runtime-python.yaml"), "apply", "-f", "-")
	run("kubectl", "", "wait", "--for=condition=Ready", "runtime/python", "--timeout=3m")
	run("kubectl", example("run-function.yaml"), "create", "-f", "-")
	run("kubectl", "", "wait", "--for=condition=Ready", "run/echo", "--timeout=2m")
	assert.Contains(t, run("krt", "", "invoke", "echo", "--data", `{"hello":"world"}`), `"echo":{"hello":"world"}`)

	pods := run("kubectl", "", "get", "pods", "-o", "jsonpath={range .items[*]}{.status.containerStatuses[*].imageID}{\"\\n\"}{end}")
	assert.Contains(t, pods, localcluster.ImageHost+"/runtimed@sha256:", "runtimed pulled as kruntimes.io/runtimed")
	// The python Runtime has one Pod of capacity 1: with echo gone, the
	// sandboxes below take turns on it.
	run("kubectl", "", "delete", "run", "echo", "--wait=true")
	t.Run("a sandbox leaves nothing for the next on its Pod", func(t *testing.T) {
		sandboxTenants(t, run, func(args ...string) ([]byte, error) {
			cmd := exec.Command(filepath.Join(root, "bin", "krt"), args...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Config().KubeconfigPath)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, stderr.String())
			}
			return out, err
		})
	})
}

// realNodeImplant plants a json.py, sitecustomize and usercustomize, each
// leaving a marker when imported, in every directory of its container it
// can write, and returns those directories.
const realNodeImplant = `import os, site
home = os.environ["HOME"]
candidates = [home, os.environ["TMPDIR"], site.getusersitepackages(), os.getcwd(), os.path.dirname(os.getcwd()),
              os.path.dirname(os.path.dirname(home)), "/tmp", "/var/tmp", "/dev/shm", "/run/kruntimes", "/home/nonroot", "/"]
planted = []
for d in candidates:
    try:
        os.makedirs(d, exist_ok=True)
        for name in ("json", "sitecustomize", "usercustomize"):
            with open(os.path.join(d, name + ".py"), "w") as f:
                f.write("open(%r, 'w').close()\n" % os.path.join(d, "imported-" + name))
        planted.append(d)
    except OSError:
        pass
planted`

// realNodeInspect reports what the next sandbox sees of the first one.
const realNodeInspect = `import json, os, sys
dirs = %s
def cmdline(p):
    try:
        return open("/proc/%%s/cmdline" %% p, "rb").read().split(b"\0")
    except OSError:
        return []
{"json": json.__file__,
 "custom": [getattr(sys.modules[m], "__file__", "") for m in ("sitecustomize", "usercustomize") if m in sys.modules],
 "markers": [os.path.join(d, n) for d in dirs if os.path.isdir(d) for n in os.listdir(d) if n.startswith("imported-")],
 "sleepers": [p for p in os.listdir("/proc") if p.isdigit() and cmdline(p)[:2] == [b"sleep", b"300"]],
 "pid1": os.path.basename(cmdline(1)[0].decode()),
 "left": [d for d in dirs if os.path.exists(os.path.join(d, "json.py"))]}`

// sandboxTenants runs two sandboxes one after the other on the python
// Runtime's one Pod: the first plants modules wherever it can write, starts
// a daemon and kills its own reaper; the second imports none of it, finds
// no process of the first, and runs under the Runtime Server as PID 1.
func sandboxTenants(t *testing.T, run func(name, stdin string, args ...string) string, krt func(args ...string) ([]byte, error)) {
	sandbox := func(name string) {
		run("kubectl", "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: "+name+"}\nspec: {runtime: python, mode: {function: {handler: kruntimes.sandbox}}}\n", "create", "-f", "-")
		run("kubectl", "", "wait", "--for=condition=Ready", "run/"+name, "--timeout=2m")
	}
	try := func(name, src string) (any, error) {
		req, err := json.Marshal(map[string]string{"op": "run_code", "code": src})
		require.NoError(t, err)
		raw, err := krt("invoke", name, "--data", string(req))
		if err != nil {
			return nil, fmt.Errorf("krt invoke %s: %w: %s", name, err, raw)
		}
		var out struct {
			Result any `json:"result"`
			Error  any `json:"error"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || out.Error != nil {
			return nil, fmt.Errorf("run_code in %s: %v: %s", name, err, raw)
		}
		return out.Result, nil
	}
	code := func(name, src string) any {
		result, err := try(name, src)
		require.NoError(t, err)
		return result
	}

	sandbox("first")
	planted := code("first", realNodeImplant).([]any)
	require.NotEmpty(t, planted)
	t.Logf("the first sandbox planted modules in %v", planted)
	code("first", "import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True).pid")
	// User code may kill its reaper: the worker dies with it, before it
	// answers or after (then the registration is lost and the Run fails),
	// and the daemon is left to the Runtime Server, which kills it; the
	// second sandbox looks for it.
	_, _ = try("first", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
	run("kubectl", "", "delete", "run", "first", "--wait=true")

	sandbox("second")
	dirs, err := json.Marshal(planted)
	require.NoError(t, err)
	seen := code("second", fmt.Sprintf(realNodeInspect, dirs)).(map[string]any)
	imported := append([]any{seen["json"]}, seen["custom"].([]any)...)
	for _, d := range planted {
		for _, file := range imported {
			assert.NotEqual(t, filepath.Dir(file.(string)), filepath.Clean(d.(string)), "the second sandbox imported %s, which the first one planted", file)
		}
	}
	assert.Empty(t, seen["markers"], "an implant of the first sandbox ran")
	assert.Empty(t, seen["sleepers"], "the first sandbox's daemon outlived it")
	assert.Equal(t, "kruntimes-runtime", seen["pid1"], "the Runtime Server is its container's PID 1")
	// The Runtime Server swept the container's shared directories when the
	// first sandbox ended; runtimed's workspace root is not among them.
	assert.Equal(t, []any{"/workspace"}, seen["left"], "what the first sandbox wrote outside the workspace root is gone")
	run("kubectl", "", "delete", "run", "second", "--wait=true")
}
