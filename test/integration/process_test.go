package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	kruntimestestserver "kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/test/logscan"
	"kruntimes.io/kruntimes/test/repobin"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// apiserverBinary brings bin/kruntimes-apiserver up to date (race-built when
// this test binary is) once per test binary and returns its path.
func apiserverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			buildErr = err
			return
		}
		root, err := repobin.RepoRoot(wd)
		if err != nil {
			buildErr = err
			return
		}
		buildErr = repobin.Build(context.Background(), root, repobin.APIServer)
		binary = repobin.Path(root, repobin.APIServer.Name)
	})
	require.NoError(t, buildErr)
	return binary
}

// serverProcess is kruntimes-apiserver running as its own process.
type serverProcess struct {
	cmd    *exec.Cmd
	config *rest.Config
	client versioned.Interface
	exited chan error
}

// startServerProcess runs the built server standalone on dataDir and waits
// until it is ready. The test's cleanup kills it if it is still running.
func startServerProcess(t *testing.T, dataDir string) *serverProcess {
	t.Helper()
	workDir := t.TempDir()
	kubeconfig := filepath.Join(workDir, "kubeconfig")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	cmd := exec.Command(apiserverBinary(t),
		"--standalone", "--standalone-kubeconfig="+kubeconfig,
		"--storage-path="+dataDir, "--cert-dir="+filepath.Join(workDir, "certs"),
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port), "-v=0")
	logFile, err := os.Create(filepath.Join(workDir, "server.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	p := &serverProcess{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() {
		p.kill()
		// A race-built server reports a race only in its log.
		reports, err := logscan.ScanFile(logFile.Name())
		assert.NoError(t, err)
		for _, r := range reports {
			t.Errorf("kruntimes-apiserver logged a %s", r)
		}
	})

	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-p.exited:
			p.exited <- err
			log, _ := os.ReadFile(logFile.Name())
			return false, fmt.Errorf("server exited early: %v\n%s", err, log)
		default:
		}
		config, ready, err := kruntimestestserver.Ready(kubeconfig)
		p.config = config
		return ready, err
	})
	require.NoError(t, err, "server process did not become ready")
	p.config.QPS, p.config.Burst = 5000, 5000
	p.client, err = versioned.NewForConfig(p.config)
	require.NoError(t, err)
	return p
}

// kill sends SIGKILL, as a crash or an OOM kill would, and waits for the exit.
func (p *serverProcess) kill() {
	if p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(30 * time.Second):
	}
}

// TestSIGTERMEndsOpenWatches: a server with open watches (every runtimed and
// controller holds one) exits promptly on SIGTERM instead of waiting for
// its watchers to go away, and the watchers see their stream end.
func TestSIGTERMEndsOpenWatches(t *testing.T) {
	p := startServerProcess(t, t.TempDir())
	w, err := p.client.KruntimesV1alpha1().Runs(namespace).Watch(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	defer w.Stop()

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		p.exited <- err
		require.NoError(t, err, "the server exits cleanly on SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("the server is still running 30s after SIGTERM")
	}
	select {
	case _, open := <-w.ResultChan():
		assert.False(t, open, "the watch ends with the server")
	case <-time.After(10 * time.Second):
		t.Fatal("the watch is still open after the server exited")
	}
}
