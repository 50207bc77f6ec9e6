package realnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"kruntimes.io/kruntimes/test/repobin"
)

// TestContainerdRunsAPodAndCleanUpLeavesNothing runs a Pod through
// containerd's CRI as kubelet would — the sandbox and image pulled from the
// loopback registry, an address from the CNI bridge, a container as 65532
// whose log is written — and checks that CleanUp leaves no mount, link,
// iptables rule, shim, shim socket or cgroup, after containerd stopped and
// after it was killed under its running containers.
func TestContainerdRunsAPodAndCleanUpLeavesNothing(t *testing.T) {
	RequireForTest(t)
	wd, err := os.Getwd()
	require.NoError(t, err)
	root, err := repobin.RepoRoot(wd)
	require.NoError(t, err)
	ctx := context.Background()

	hello, err := BuildHello(ctx, t.TempDir())
	require.NoError(t, err)
	pause := filepath.Join(t.TempDir(), "pause")
	require.NoError(t, BuildStatic(ctx, root, "./test/localcluster/cmd/pause", pause))

	for _, stop := range []struct {
		name   string
		signal syscall.Signal
	}{{"after containerd stopped", syscall.SIGTERM}, {"after containerd was killed", syscall.SIGKILL}} {
		t.Run(stop.name, func(t *testing.T) {
			// Short: containerd's socket path (+ ".ttrpc") must fit
			// a unix socket's 108 bytes, which t.TempDir's does not.
			state, err := os.MkdirTemp("", "krtnode")
			require.NoError(t, err)
			t.Cleanup(func() { _ = os.RemoveAll(state) })
			reg, err := StartRegistry(ctx, filepath.Join(state, "registry"))
			require.NoError(t, err)
			t.Cleanup(reg.Stop)
			sandbox, err := reg.PushBinary(ctx, "kruntimes/pause", "local", pause, "65535:65535")
			require.NoError(t, err)
			image, err := reg.PushBinary(ctx, "e2e/hello", "v1", hello, "")
			require.NoError(t, err)
			_, cidr, _ := net.ParseCIDR("10.246.0.0/24")
			n, err := New(Config{
				StateDir: filepath.Join(state, "node"), BinDir: filepath.Join(root, "bin"), CNIBinDir: "/usr/lib/cni",
				NodeName: "test", PodCIDR: cidr, ServiceCIDR: "10.0.0.0/24", ClusterDomain: "cluster.local",
				SandboxImage: sandbox, Registry: reg.Host,
			})
			require.NoError(t, err)
			release, err := n.Lock()
			require.NoError(t, err)
			t.Cleanup(release)
			before := hostNetwork(t)
			require.NoError(t, n.Prepare(ctx))
			t.Cleanup(func() { _ = n.CleanUp(ctx) })

			log, err := os.Create(filepath.Join(state, "containerd.log"))
			require.NoError(t, err)
			containerd := exec.Command(filepath.Join(root, "bin", "containerd"), n.ContainerdArgs()...)
			containerd.Env = n.ContainerdEnv()
			containerd.Stdout, containerd.Stderr = log, log
			containerd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			require.NoError(t, containerd.Start())
			t.Cleanup(func() { _ = containerd.Process.Kill(); _ = containerd.Wait() })

			conn, err := grpc.NewClient("unix://"+n.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			defer conn.Close()
			runtime := runtimeapi.NewRuntimeServiceClient(conn)
			err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				status, err := runtime.Status(ctx, &runtimeapi.StatusRequest{})
				if err != nil {
					return false, nil
				}
				ready := 0
				for _, c := range status.Status.Conditions {
					if (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) && c.Status {
						ready++
					}
				}
				return ready == 2, nil
			})
			require.NoError(t, err, "containerd's RuntimeReady and NetworkReady (log: %s)", log.Name())
			version, err := runtime.Version(ctx, &runtimeapi.VersionRequest{})
			require.NoError(t, err)
			assert.Equal(t, "containerd", version.RuntimeName)
			assert.True(t, strings.HasPrefix(version.RuntimeVersion, "2."), version.RuntimeVersion)

			_, err = runtimeapi.NewImageServiceClient(conn).PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})
			require.NoError(t, err)
			sandboxConfig := &runtimeapi.PodSandboxConfig{
				Metadata:     &runtimeapi.PodSandboxMetadata{Name: "hello", Namespace: "default", Uid: fmt.Sprint(time.Now().UnixNano())},
				LogDirectory: filepath.Join(n.PodLogsDir(), "hello"),
				Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: n.CgroupRoot() + "/pod-hello"},
			}
			pod, err := runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig})
			require.NoError(t, err, "log: %s", log.Name())
			created, err := runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
				PodSandboxId: pod.PodSandboxId, SandboxConfig: sandboxConfig,
				Config: &runtimeapi.ContainerConfig{
					Metadata: &runtimeapi.ContainerMetadata{Name: "hello"}, Image: &runtimeapi.ImageSpec{Image: image}, LogPath: "hello.log",
					Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 65532}}},
				},
			})
			require.NoError(t, err)
			_, err = runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId})
			require.NoError(t, err)
			status, err := runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod.PodSandboxId})
			require.NoError(t, err)
			assert.True(t, cidr.Contains(net.ParseIP(status.Status.Network.Ip)), "Pod IP %s in %s", status.Status.Network.Ip, cidr)
			err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				logs, _ := os.ReadFile(filepath.Join(sandboxConfig.LogDirectory, "hello.log"))
				return strings.Contains(string(logs), HelloGreeting+" 65532"), nil
			})
			require.NoError(t, err, "the container's log")
			mounts, err := n.Mounts()
			require.NoError(t, err)
			assert.NotEmpty(t, mounts, "the Pod's root file systems, /dev/shm and network namespace")

			require.NoError(t, containerd.Process.Signal(stop.signal))
			_ = containerd.Wait()
			require.NoError(t, n.CleanUp(ctx))
			mounts, err = n.Mounts()
			require.NoError(t, err)
			assert.Empty(t, mounts)
			assert.Empty(t, n.cgroupDirs(), "cgroups under %s", n.CgroupRoot())
			assert.Equal(t, before, hostNetwork(t), "links and iptables rules")
			assert.Zero(t, n.killShims(), "shims serving the node's socket")
			sockets, _ := os.ReadDir(shimSocketDir)
			for _, s := range sockets {
				conn, err := net.Dial("unix", filepath.Join(shimSocketDir, s.Name()))
				if err == nil {
					conn.Close()
				}
				assert.Error(t, err, "a shim socket nobody serves is left: %s", s.Name())
			}
		})
	}
}

// hostNetwork is the machine's links and iptables rules (without counters).
func hostNetwork(t *testing.T) string {
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	require.NoError(t, err)
	var b strings.Builder
	for _, l := range strings.Split(string(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			b.WriteString(f[1] + "\n")
		}
	}
	rules, err := exec.Command("iptables", "-w", "-S").Output()
	require.NoError(t, err)
	b.Write(rules)
	nat, err := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
	require.NoError(t, err)
	b.Write(nat)
	return b.String()
}
