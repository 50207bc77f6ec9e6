package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ControlPlane is etcd and kube-apiserver and nothing else, for tests whose
// objects the cluster's kube-controller-manager must not act on: there is no
// garbage collector, so a Deployment owned by a Runtime of a standalone
// kruntimes-apiserver (unknown to the cluster) is not deleted as dangling,
// and no Deployment controller, so a Deployment's status is what the test
// writes. It trusts the cluster's admin credentials.
type ControlPlane struct {
	// Config reaches kube-apiserver as cluster admin.
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface

	dir   string
	procs []*process
}

// process is one binary the control plane runs.
type process struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // set before exited is closed
}

var controlPlane struct {
	once sync.Once
	cp   *ControlPlane
	err  error
}

// ControlPlane returns the suite's bare control plane, started from bin/ on
// first use and stopped by Main. Tests share it; each creates a namespace of
// its own there.
func (f *Framework) ControlPlane(t testing.TB) *ControlPlane {
	t.Helper()
	controlPlane.once.Do(func() {
		controlPlane.cp, controlPlane.err = f.startControlPlane(context.Background())
	})
	if controlPlane.err != nil {
		t.Fatalf("starting etcd and kube-apiserver: %v", controlPlane.err)
	}
	return controlPlane.cp
}

func (f *Framework) startControlPlane(ctx context.Context) (*ControlPlane, error) {
	cp := &ControlPlane{dir: filepath.Join(f.Cluster.Config().StateDir, "controlplane")}
	if err := os.MkdirAll(cp.dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := cp.start("etcd", filepath.Join(f.RepoRoot, "bin", "etcd"),
		"--name=controlplane",
		"--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=controlplane="+peerURL,
		"--listen-metrics-urls=",
		"--log-level=warn",
	); err != nil {
		return nil, err
	}

	// The cluster's PKI (test/localcluster/pki.go): its serving pair is
	// valid for 127.0.0.1 and its CA signed the admin client certificate,
	// so the admin config works here with only the host changed.
	pki := filepath.Dir(f.AdminConfig.TLSClientConfig.CAFile)
	if err := cp.start("kube-apiserver", filepath.Join(f.RepoRoot, "bin", "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(ports[2]),
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--client-ca-file="+f.AdminConfig.TLSClientConfig.CAFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--authorization-mode=RBAC",
		"--profiling=false",
	); err != nil {
		cp.stop()
		return nil, err
	}
	cp.Config = rest.CopyConfig(f.AdminConfig)
	cp.Config.Host = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	cp.Client, err = kubernetes.NewForConfig(cp.Config)
	if err != nil {
		cp.stop()
		return nil, err
	}
	err = Poll(ctx, 200*time.Millisecond, 2*time.Minute, func(ctx context.Context, seen *Observed) (bool, error) {
		for _, p := range cp.procs {
			select {
			case <-p.exited:
				return false, fmt.Errorf("%s exited: %v", p.name, p.err)
			default:
			}
		}
		var code int
		err := cp.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error()
		seen.Err(err)
		seen.State("/readyz answered %d", code)
		return code == http.StatusOK, nil
	})
	if err != nil {
		cp.stop()
		return nil, fmt.Errorf("waiting for kube-apiserver (logs in %s): %w", cp.dir, err)
	}
	return cp, nil
}

// start runs binary with its output in dir/name.log. The process is killed
// if this one dies, so a crashed test leaves nothing behind.
func (cp *ControlPlane) start(name, binary string, args ...string) error {
	log, err := os.OpenFile(filepath.Join(cp.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{})}
	cp.procs = append(cp.procs, p)
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	return nil
}

// stop terminates the processes it started, newest first.
func (cp *ControlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	cp.procs = nil
}

func stopControlPlane() {
	if controlPlane.cp != nil {
		controlPlane.cp.stop()
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
