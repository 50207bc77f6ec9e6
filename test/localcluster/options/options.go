package options

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/test/localcluster"
	"kruntimes.io/kruntimes/test/localcluster/realnode"
	"kruntimes.io/kruntimes/test/repobin"
)

// Options are the flags of localcluster.
type Options struct {
	RepoRoot   string
	StateDir   string
	Kubeconfig string
	NodeName   string
	PodIPBase  string
	Kruntimes  string
	Storage    string
	// Replicas is the number of kruntimes-apiserver processes.
	Replicas int
	// RuntimedAPI is how runtimed reaches the kruntimes.io API: direct or
	// aggregated.
	RuntimedAPI string
	// KruntimesArgs are extra flags of kruntimes-apiserver.
	KruntimesArgs []string
	Build         bool
	// Node is what runs Pods: process or containerd.
	Node string
	// PodCIDR is the real node's Pod network.
	PodCIDR string

	// Out receives the progress and how to use the cluster.
	Out io.Writer
}

// NewOptions returns the defaults: the repository above the working
// directory, kruntimes-apiserver required on its embedded storage.
func NewOptions(out io.Writer) *Options {
	return &Options{
		NodeName:    localcluster.DefaultNodeName,
		PodIPBase:   "127.100.0.0",
		Kruntimes:   string(localcluster.KruntimesRequired),
		Storage:     "embedded",
		Replicas:    1,
		RuntimedAPI: "direct",
		Build:       true,
		Node:        string(localcluster.NodeProcess),
		PodCIDR:     realnode.DefaultPodCIDR,
		Out:         out,
	}
}

// NewCommand returns the localcluster command, which runs the cluster until
// ctx ends.
func NewCommand(ctx context.Context, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "localcluster",
		Short: "Run the kruntimes local cluster in the foreground",
		Long: `localcluster runs etcd, kube-apiserver, kube-controller-manager, a local
node agent and kruntimes-apiserver behind a real APIService on this machine,
bound to loopback, until SIGINT or SIGTERM (see docs/local-cluster.md).`,
		RunE: func(c *cobra.Command, args []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(args); err != nil {
				return err
			}
			return o.Run(klog.NewContext(c.Context(), klog.Background().WithName("localcluster")))
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cmd.Flags().AddGoFlagSet(klogFlags)
	return cmd
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RepoRoot, "repo-root", o.RepoRoot, "Repository checkout whose bin/ and artifacts/ are used. Defaults to the kruntimes module above the working directory.")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "Directory for etcd data, certificates, logs and Pod directories. Defaults to <repo-root>/.local/cluster.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig-out", o.Kubeconfig, "Where to write the cluster-admin kubeconfig. Defaults to <repo-root>/.local/kubeconfig.")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of the local Node.")
	fs.StringVar(&o.PodIPBase, "pod-ip-base", o.PodIPBase, "First address of the loopback /16 block Pod IPs are taken from.")
	fs.StringVar(&o.Kruntimes, "kruntimes-apiserver", o.Kruntimes, "How to run kruntimes-apiserver: required (a host process), chart (helm upgrade --install of charts/kruntimes: the chart's Deployment, Service, PVC, RBAC and APIService; needs bin/helm), or disabled (Kubernetes alone).")
	fs.StringVar(&o.Storage, "kruntimes-storage", o.Storage, "kruntimes-apiserver's storage backend: embedded (a file in the state directory), or etcd3 (the cluster's etcd, under /kruntimes).")
	fs.IntVar(&o.Replicas, "kruntimes-apiserver-replicas", o.Replicas, "How many kruntimes-apiserver processes to run, behind a Service front that hands each new connection to the next one whose /readyz passes; more than 1 needs --kruntimes-storage=etcd3. The hosted controllers elect one leader among them.")
	fs.StringVar(&o.RuntimedAPI, "runtimed-api", o.RuntimedAPI, "How Runtime Pods' runtimed reach the kruntimes.io API: direct (kruntimes-apiserver, or its Service front, as in-cluster Pods reach its Service; kruntimes-apiserver --runtimed-kruntimes-api-server) or aggregated (through kube-apiserver).")
	fs.StringArrayVar(&o.KruntimesArgs, "kruntimes-apiserver-arg", o.KruntimesArgs, "An extra flag of kruntimes-apiserver, e.g. --kruntimes-apiserver-arg=--recovery-heartbeat-grace-period=5s; repeat for more.")
	fs.StringVar(&o.Node, "node", o.Node, "What runs Pods: process (the node agent: each container a host process, no root needed) or containerd (a real node, as root: kubelet, containerd and runc, kube-scheduler, kube-proxy, a CNI bridge of the cluster's own; needs hack/build-node.sh).")
	fs.StringVar(&o.PodCIDR, "pod-cidr", o.PodCIDR, "The real node's Pod network (--node=containerd); its first address is the bridge's and the Node's.")
	fs.BoolVar(&o.Build, "build", o.Build, "Build the repository binaries container images map to (bin/runtimed, bin/e2e-testserver, …) before starting.")
}

// Complete finds the repository and makes the paths under it absolute:
// kubeconfigs written under the state directory name files in it, and a
// relative path there would be read relative to the kubeconfig itself.
func (o *Options) Complete() error {
	if o.RepoRoot == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if o.RepoRoot, err = repobin.RepoRoot(wd); err != nil {
			return err
		}
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig = filepath.Join(o.RepoRoot, ".local", "kubeconfig")
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(o.RepoRoot, ".local", "cluster")
	}
	var err error
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return err
	}
	o.Kubeconfig, err = filepath.Abs(o.Kubeconfig)
	return err
}

// Validate checks the flags and that no argument was given.
func (o *Options) Validate(args []string) error {
	var errs []error
	if len(args) > 0 {
		errs = append(errs, fmt.Errorf("localcluster takes no arguments, got %q", args))
	}
	switch {
	case o.Replicas < 1:
		errs = append(errs, fmt.Errorf("--kruntimes-apiserver-replicas must be at least 1, got %d", o.Replicas))
	case o.Replicas > 1 && o.Storage != "etcd3":
		errs = append(errs, fmt.Errorf("--kruntimes-apiserver-replicas=%d needs --kruntimes-storage=etcd3: the embedded backend's data file has one writer", o.Replicas))
	}
	if o.RuntimedAPI != "direct" && o.RuntimedAPI != "aggregated" {
		errs = append(errs, fmt.Errorf("--runtimed-api must be direct or aggregated, got %q", o.RuntimedAPI))
	}
	switch localcluster.KruntimesMode(o.Kruntimes) {
	case localcluster.KruntimesRequired, localcluster.KruntimesDisabled:
	case localcluster.KruntimesChart:
		if o.Replicas != 1 || o.Storage != "embedded" {
			errs = append(errs, fmt.Errorf("--kruntimes-apiserver=chart installs the chart's defaults: one replica on embedded storage"))
		}
	default:
		errs = append(errs, fmt.Errorf("--kruntimes-apiserver must be required, chart or disabled, got %q", o.Kruntimes))
	}
	switch localcluster.NodeMode(o.Node) {
	case localcluster.NodeProcess:
	case localcluster.NodeContainerd:
		if localcluster.KruntimesMode(o.Kruntimes) == localcluster.KruntimesChart && len(o.KruntimesArgs) > 0 {
			errs = append(errs, fmt.Errorf("--kruntimes-apiserver=chart on --node=containerd installs the chart's defaults: no --kruntimes-apiserver-arg"))
		}
		if _, cidr, err := net.ParseCIDR(o.PodCIDR); err != nil || cidr.IP.To4() == nil {
			errs = append(errs, fmt.Errorf("--pod-cidr %q is not an IPv4 CIDR", o.PodCIDR))
		}
	default:
		errs = append(errs, fmt.Errorf("--node must be process or containerd, got %q", o.Node))
	}
	if base := net.ParseIP(o.PodIPBase).To4(); base == nil || base[0] != 127 {
		errs = append(errs, fmt.Errorf("--pod-ip-base %q is not a 127.x.0.0 address", o.PodIPBase))
	}
	return errors.Join(errs...)
}

// Config is the cluster the flags describe.
func (o *Options) Config() localcluster.Config {
	return localcluster.Config{
		RepoRoot:                   o.RepoRoot,
		StateDir:                   o.StateDir,
		KubeconfigPath:             o.Kubeconfig,
		NodeName:                   o.NodeName,
		PodIPBase:                  net.ParseIP(o.PodIPBase).To4(),
		Kruntimes:                  localcluster.KruntimesMode(o.Kruntimes),
		KruntimesStorage:           o.Storage,
		KruntimesArgs:              o.KruntimesArgs,
		KruntimesReplicas:          o.Replicas,
		RuntimedThroughAggregation: o.RuntimedAPI == "aggregated",
		Progress:                   o.Out,
		Node:                       localcluster.NodeMode(o.Node),
		PodCIDR:                    o.PodCIDR,
	}
}

// Run builds the binaries images map to, starts the cluster, says how to
// use it, and stops it when ctx ends or a component stops.
func (o *Options) Run(ctx context.Context) error {
	// Checked before building: a rebuild would replace binaries that the
	// running cluster's Pods execute.
	if pid, running := localcluster.RunningPID(o.StateDir); running {
		return fmt.Errorf("%w (%s, pid %s)\nUse the running cluster: export KUBECONFIG=%s",
			localcluster.ErrAlreadyRunning, o.rel(o.StateDir), pid, o.rel(o.Kubeconfig))
	}
	if o.Build {
		fmt.Fprintln(o.Out, "==> building repository binaries for container images")
		if err := repobin.Build(ctx, o.RepoRoot, localcluster.ImageCommands...); err != nil {
			return fmt.Errorf("building the binaries of container images: %w", err)
		}
	}
	start := time.Now()
	cluster, err := localcluster.Start(ctx, o.Config())
	if errors.Is(err, localcluster.ErrAlreadyRunning) {
		return fmt.Errorf("%w\nUse the running cluster: export KUBECONFIG=%s", err, o.rel(o.Kubeconfig))
	}
	if err != nil {
		return err
	}
	defer func() {
		stopCtx := klog.NewContext(context.Background(), klog.FromContext(ctx))
		cluster.Stop(stopCtx)
		fmt.Fprintln(o.Out, "==> stopped")
	}()
	o.printUsage(cluster, time.Since(start))

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(o.Out, "\n==> shutting down")
			return nil
		case <-ticker.C:
			if err := cluster.Err(); err != nil {
				return fmt.Errorf("a component stopped: %w", err)
			}
		}
	}
}

// printUsage says how to reach the cluster that came up in took.
func (o *Options) printUsage(cluster *localcluster.Cluster, took time.Duration) {
	fmt.Fprintf(o.Out, "\nLocal cluster up in %s. kube-apiserver: %s\n\n", took.Round(time.Second), cluster.APIServerURL)
	fmt.Fprintf(o.Out, "  export KUBECONFIG=%s\n", o.rel(o.Kubeconfig))
	fmt.Fprintln(o.Out, "  bin/kubectl get nodes -o wide")
	fmt.Fprintln(o.Out, "  bin/kubectl get pods -A")
	if cluster.KruntimesRunning {
		fmt.Fprintln(o.Out, "  bin/kubectl get apiservice v1alpha1.kruntimes.io")
		if cluster.Config().Kruntimes == localcluster.KruntimesChart {
			fmt.Fprintf(o.Out, "  KUBECONFIG=%s bin/helm status %s -n %s\n", o.rel(o.Kubeconfig), localcluster.ChartRelease, localcluster.KruntimesNamespace)
			fmt.Fprintf(o.Out, "  bin/kubectl get deploy,pods,svc,endpointslices,pvc -n %s\n", localcluster.KruntimesNamespace)
		}
		fmt.Fprintln(o.Out, "  bin/kubectl get runtimes,runs -A")
		fmt.Fprintln(o.Out, "  bin/kubectl explain run.spec")
	} else {
		fmt.Fprintf(o.Out, "  (kruntimes-apiserver is not running: %s)\n", firstLine(cluster.KruntimesSkipReason))
	}
	fmt.Fprintf(o.Out, "  component logs: %s\n\nPress Ctrl-C to stop.\n", o.rel(filepath.Join(cluster.Config().StateDir, "logs")))
}

// rel is path relative to the repository, as a user in it would type it.
func (o *Options) rel(path string) string {
	if r, err := filepath.Rel(o.RepoRoot, path); err == nil {
		return r
	}
	return path
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
