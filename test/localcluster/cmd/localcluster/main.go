// Command localcluster runs the kruntimes local cluster in the foreground
// until SIGINT or SIGTERM: etcd, kube-apiserver, kube-controller-manager, a
// local node agent and kruntimes-apiserver behind a real APIService.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/test/localcluster"
	"kruntimes.io/kruntimes/test/repobin"
)

// options are the command's flags.
type options struct {
	repoRoot   string
	stateDir   string
	kubeconfig string
	nodeName   string
	podIPBase  string
	kruntimes  string
	storage    string
	// kruntimesArgs are extra flags of kruntimes-apiserver.
	kruntimesArgs []string
	build         bool
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.repoRoot, "repo-root", "", "Repository checkout whose bin/ and artifacts/ are used. Defaults to the kruntimes module above the working directory.")
	fs.StringVar(&o.stateDir, "state-dir", "", "Directory for etcd data, certificates, logs and Pod directories. Defaults to <repo-root>/.local/cluster.")
	fs.StringVar(&o.kubeconfig, "kubeconfig-out", "", "Where to write the cluster-admin kubeconfig. Defaults to <repo-root>/.local/kubeconfig.")
	fs.StringVar(&o.nodeName, "node-name", localcluster.DefaultNodeName, "Name of the local Node.")
	fs.StringVar(&o.podIPBase, "pod-ip-base", "127.100.0.0", "First address of the loopback /16 block Pod IPs are taken from.")
	fs.StringVar(&o.kruntimes, "kruntimes-apiserver", string(localcluster.KruntimesRequired), "Whether to run kruntimes-apiserver: required, or disabled (Kubernetes alone).")
	fs.StringVar(&o.storage, "kruntimes-storage", "embedded", "kruntimes-apiserver's storage backend: embedded (a file in the state directory), or etcd3 (the cluster's etcd, under /kruntimes).")
	fs.StringArrayVar(&o.kruntimesArgs, "kruntimes-apiserver-arg", nil, "An extra flag of kruntimes-apiserver, e.g. --kruntimes-apiserver-arg=--recovery-heartbeat-grace-period=5s; repeat for more.")
	fs.BoolVar(&o.build, "build", true, "Build the repository binaries container images map to (bin/runtimed, bin/e2e-testserver, …) before starting.")
}

func main() {
	o := &options{}
	fs := pflag.NewFlagSet("localcluster", pflag.ExitOnError)
	o.addFlags(fs)
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("localcluster"))
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o *options) error {
	if o.repoRoot == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if o.repoRoot, err = repobin.RepoRoot(wd); err != nil {
			return err
		}
	}
	if o.kubeconfig == "" {
		o.kubeconfig = filepath.Join(o.repoRoot, ".local", "kubeconfig")
	}
	base := net.ParseIP(o.podIPBase).To4()
	if base == nil || base[0] != 127 {
		return fmt.Errorf("--pod-ip-base %q is not a 127.x.0.0 address", o.podIPBase)
	}
	stateDir := o.stateDir
	if stateDir == "" {
		stateDir = filepath.Join(o.repoRoot, ".local", "cluster")
	}
	// Kubeconfigs written under the state directory name files in it; a
	// relative path there would be read relative to the kubeconfig itself.
	var err error
	if stateDir, err = filepath.Abs(stateDir); err != nil {
		return err
	}
	if o.kubeconfig, err = filepath.Abs(o.kubeconfig); err != nil {
		return err
	}
	// Checked before building: a rebuild would replace binaries that the
	// running cluster's Pods execute.
	if pid, running := localcluster.RunningPID(stateDir); running {
		return fmt.Errorf("%w (%s, pid %s)\nUse the running cluster: export KUBECONFIG=%s",
			localcluster.ErrAlreadyRunning, rel(o.repoRoot, stateDir), pid, rel(o.repoRoot, o.kubeconfig))
	}
	if o.build {
		fmt.Println("==> building repository binaries for container images")
		if err := repobin.Build(ctx, o.repoRoot, localcluster.ImageCommands...); err != nil {
			return fmt.Errorf("building the binaries of container images: %w", err)
		}
	}
	start := time.Now()
	cluster, err := localcluster.Start(ctx, localcluster.Config{
		RepoRoot:         o.repoRoot,
		StateDir:         stateDir,
		KubeconfigPath:   o.kubeconfig,
		NodeName:         o.nodeName,
		PodIPBase:        base,
		Kruntimes:        localcluster.KruntimesMode(o.kruntimes),
		KruntimesStorage: o.storage,
		KruntimesArgs:    o.kruntimesArgs,
		Progress:         os.Stdout,
	})
	if errors.Is(err, localcluster.ErrAlreadyRunning) {
		return fmt.Errorf("%w\nUse the running cluster: export KUBECONFIG=%s", err, rel(o.repoRoot, o.kubeconfig))
	}
	if err != nil {
		return err
	}
	defer func() {
		stopCtx := klog.NewContext(context.Background(), klog.FromContext(ctx))
		cluster.Stop(stopCtx)
		fmt.Println("==> stopped")
	}()

	kc := rel(o.repoRoot, o.kubeconfig)
	fmt.Printf("\nLocal cluster up in %s. kube-apiserver: %s\n\n", time.Since(start).Round(time.Second), cluster.APIServerURL)
	fmt.Printf("  export KUBECONFIG=%s\n", kc)
	fmt.Println("  bin/kubectl get nodes -o wide")
	fmt.Println("  bin/kubectl get pods -A")
	if cluster.KruntimesRunning {
		fmt.Println("  bin/kubectl get apiservice v1alpha1.kruntimes.io")
		fmt.Println("  bin/kubectl get runtimes,runs -A")
		fmt.Println("  bin/kubectl explain run.spec")
	} else {
		fmt.Printf("  (kruntimes-apiserver is not running: %s)\n", firstLine(errors.New(cluster.KruntimesSkipReason)))
	}
	fmt.Printf("  component logs: %s\n\nPress Ctrl-C to stop.\n", rel(o.repoRoot, filepath.Join(cluster.Config().StateDir, "logs")))

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("\n==> shutting down")
			return nil
		case <-ticker.C:
			if err := cluster.Err(); err != nil {
				return fmt.Errorf("a component stopped: %w", err)
			}
		}
	}
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

func firstLine(err error) string {
	s := err.Error()
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}
