package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/test/localcluster"
	"kruntimes.io/kruntimes/test/logscan"
	"kruntimes.io/kruntimes/test/repobin"
)

// RequireEnv, set to 1, turns every reason to skip into a failure. CI sets it.
const RequireEnv = "KRUNTIMES_E2E_REQUIRE"

// KeepEnv, set to 1, keeps the cluster's state directory after the run.
const KeepEnv = "KRUNTIMES_E2E_KEEP"

// RecoveryHeartbeatGracePeriod is the hosted recovery controller's
// --recovery-heartbeat-grace-period in the suite's cluster: short, so a test
// that silences a runtimed sees its Pod deleted within seconds, yet longer
// than a runtimed that a test kills takes to come back and renew.
const RecoveryHeartbeatGracePeriod = 3 * time.Second

// InvokeWaitForReady is kruntimes-apiserver's --invoke-wait-for-ready in
// the suite's cluster: longer than its default, so that a test's
// invocation of a function on its way to Ready is answered when the
// function is, even when a loaded machine registers it slowly.
const InvokeWaitForReady = 30 * time.Second

// Framework is the cluster shared by every test of one go test invocation.
type Framework struct {
	RepoRoot    string
	Kubeconfig  string
	Cluster     *localcluster.Cluster
	AdminConfig *rest.Config
	Client      kubernetes.Interface
	Dynamic     dynamic.Interface
}

var (
	shared     *Framework
	skipReason string
)

// Required reports whether missing prerequisites fail instead of skip.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Main is called from TestMain: it starts the cluster, runs the tests and
// stops the cluster. When the Kubernetes binaries are missing it runs the
// tests anyway so that each one reports a clear skip.
func Main(m *testing.M) int {
	return MainWith(m, nil)
}

// MainWith is Main for a suite whose cluster differs from the shared
// suite's: configure changes the local cluster's Config before it starts.
func MainWith(m *testing.M, configure func(*localcluster.Config)) int {
	ctx := klog.NewContext(context.Background(), klog.Background().WithName("e2e"))
	f, reason, err := start(ctx, configure)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: starting the local cluster: %v\n", err)
		return 1
	}
	if reason != "" {
		if Required() {
			fmt.Fprintf(os.Stderr, "e2e: %s (and %s=1)\n", reason, RequireEnv)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: skipping: %s\n", reason)
		skipReason = reason
		return m.Run()
	}
	shared = f
	code := m.Run()
	stopControlPlane()
	f.Cluster.Stop(ctx)
	// After the stop, so that what components write while shutting down
	// counts too.
	stateDir := f.Cluster.Config().StateDir
	if !componentLogsClean(os.Stderr, stateDir) {
		code = 1
	}
	if code == 0 && os.Getenv(KeepEnv) != "1" {
		_ = os.RemoveAll(stateDir)
	} else {
		fmt.Fprintf(os.Stderr, "e2e: cluster state and logs kept in %s\n", stateDir)
	}
	return code
}

// componentLogsClean scans the logs of every process the suite ran — the
// cluster's components, the bare control plane, every container of every
// Pod — for data races and crashes, prints each it finds and reports whether
// there were none. A component built with -race (see repobin) reports a race
// only in its log; without this scan nobody would read it.
func componentLogsClean(out io.Writer, stateDir string) bool {
	reports, err := logscan.ScanDirs(filepath.Join(stateDir, "logs"), filepath.Join(stateDir, "controlplane"))
	if err != nil {
		fmt.Fprintf(out, "e2e: scanning component logs: %v\n", err)
		return false
	}
	if len(reports) == 0 {
		fmt.Fprintf(out, "e2e: component logs show no data race or crash (components race-built: %v)\n", repobin.RaceEnabled)
		return true
	}
	fmt.Fprintf(out, "e2e: FAIL: %d data race or crash reports in component logs:\n", len(reports))
	for _, r := range reports {
		if rel, err := filepath.Rel(stateDir, r.Path); err == nil {
			r.Path = rel
		}
		fmt.Fprintf(out, "--- %s\n", r)
	}
	return false
}

func start(ctx context.Context, configure func(*localcluster.Config)) (*Framework, string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, "", err
	}
	root, err := repobin.RepoRoot(wd)
	if err != nil {
		return nil, "", err
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			return nil, fmt.Sprintf("bin/%s is missing; run hack/build-kube.sh (about 15 minutes cold)", b), nil
		}
	}
	// Every binary a container image maps to, or the suite would test
	// whatever an earlier build left in bin/.
	builtAt := time.Now()
	if err := repobin.Build(ctx, root, localcluster.ImageCommands...); err != nil {
		return nil, "", err
	}
	fmt.Fprintf(os.Stderr, "e2e: image binaries up to date in bin/ (race: %v) in %s\n", repobin.RaceEnabled, time.Since(builtAt).Round(time.Millisecond))
	if err := os.MkdirAll(filepath.Join(root, ".local"), 0o755); err != nil {
		return nil, "", err
	}
	stateDir, err := os.MkdirTemp(filepath.Join(root, ".local"), "e2e-")
	if err != nil {
		return nil, "", err
	}
	mode := localcluster.KruntimesRequired
	started := time.Now()
	cfg := localcluster.Config{
		RepoRoot: root,
		StateDir: stateDir,
		// A block of its own per run, so a make run cluster and parallel
		// suites do not hand out the same Pod IPs.
		PodIPBase: net.IPv4(127, byte(101+os.Getpid()%100), 0, 0),
		Kruntimes: mode,
		KruntimesArgs: []string{
			"--recovery-heartbeat-grace-period=" + RecoveryHeartbeatGracePeriod.String(),
			"--invoke-wait-for-ready=" + InvokeWaitForReady.String(),
		},
		Progress:    os.Stderr,
		KeepPodLogs: true,
	}
	if configure != nil {
		configure(&cfg)
	}
	cluster, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("%w (state and logs in %s)", err, stateDir)
	}
	fmt.Fprintf(os.Stderr, "e2e: cluster up in %s\n", time.Since(started).Round(time.Millisecond))
	client, err := kubernetes.NewForConfig(cluster.AdminConfig)
	if err != nil {
		return nil, "", err
	}
	dyn, err := dynamic.NewForConfig(cluster.AdminConfig)
	if err != nil {
		return nil, "", err
	}
	return &Framework{
		RepoRoot:    root,
		Kubeconfig:  cluster.Config().KubeconfigPath,
		Cluster:     cluster,
		AdminConfig: cluster.AdminConfig,
		Client:      client,
		Dynamic:     dyn,
	}, "", nil
}

// Get returns the shared cluster, or skips t when it could not be started
// for a reason that Main reported.
func Get(t testing.TB) *Framework {
	t.Helper()
	if shared == nil {
		if skipReason == "" {
			t.Fatal("framework.Main was not called from TestMain")
		}
		t.Skip(skipReason)
	}
	return shared
}

// RequireKruntimes skips (or, with KRUNTIMES_E2E_REQUIRE=1, fails) t when
// kruntimes-apiserver is not running behind its APIService.
func (f *Framework) RequireKruntimes(t testing.TB) {
	t.Helper()
	if f.Cluster.KruntimesRunning {
		return
	}
	msg := "kruntimes-apiserver is not running: " + firstLine(f.Cluster.KruntimesSkipReason)
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Kubectl runs bin/kubectl against the cluster and returns stdout; a
// non-zero exit is returned as an error that includes stderr.
func (f *Framework) Kubectl(ctx context.Context, args ...string) (string, error) {
	return f.KubectlWithInput(ctx, "", args...)
}

// KubectlWithInput is Kubectl with stdin.
func (f *Framework) KubectlWithInput(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := f.KubectlCommand(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// KubectlCommand prepares bin/kubectl with the admin kubeconfig.
func (f *Framework) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "kubectl"), append([]string{"--kubeconfig=" + f.Kubeconfig}, args...)...)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
