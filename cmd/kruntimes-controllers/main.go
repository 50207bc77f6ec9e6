package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/version"
)

// options are the flags of kruntimes-controllers.
type options struct {
	kubeconfig          string
	kruntimesKubeconfig string
	healthAddress       string
	runtimedCAFile      string
	runtimedCAKeyFile   string
	config              manager.Config
}

func newOptions() *options {
	return &options{healthAddress: ":10262", config: manager.NewConfig()}
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig,
		"Kubeconfig of the cluster; empty uses the in-cluster ServiceAccount.")
	fs.StringVar(&o.kruntimesKubeconfig, "kruntimes-kubeconfig", o.kruntimesKubeconfig,
		"Kubeconfig that reaches the kruntimes.io API; empty uses the cluster's, through kube-apiserver's aggregation.")
	fs.StringVar(&o.healthAddress, "health-address", o.healthAddress,
		"Address serving /healthz and /metrics over plain HTTP; empty serves neither.")
	le := &o.config.LeaderElection
	fs.BoolVar(&le.Enabled, "leader-elect", le.Enabled,
		"Elect one leader among replicas to run the controllers; turn off only for a single replica.")
	fs.StringVar(&le.Namespace, "leader-elect-resource-namespace", le.Namespace, "Namespace of the leader election Lease.")
	fs.StringVar(&le.Name, "leader-elect-resource-name", le.Name,
		"Name of the leader election Lease; kruntimes-apiserver hosting the controllers competes for the same one.")
	fs.DurationVar(&le.LeaseDuration, "leader-elect-lease-duration", le.LeaseDuration,
		"How long a non-leader waits after the last renewal before taking over.")
	fs.DurationVar(&le.RenewDeadline, "leader-elect-renew-deadline", le.RenewDeadline,
		"How long the leader keeps retrying a renewal before it stops leading; less than the lease duration.")
	fs.DurationVar(&le.RetryPeriod, "leader-elect-retry-period", le.RetryPeriod,
		"How often replicas try to acquire or renew the Lease.")
	fs.IntVar(&o.config.RuntimeWorkers, "runtime-workers", o.config.RuntimeWorkers, "Runtimes reconciled concurrently.")
	fs.IntVar(&o.config.SchedulerWorkers, "scheduler-workers", o.config.SchedulerWorkers,
		"Runs scheduled concurrently; choosing a Pod is serialized, binding is not.")
	fs.IntVar(&o.config.RecoveryWorkers, "recovery-workers", o.config.RecoveryWorkers, "Runs of lost Runtime Pods recovered concurrently.")
	fs.DurationVar(&o.config.HeartbeatGracePeriod, "recovery-heartbeat-grace-period", o.config.HeartbeatGracePeriod,
		"How long a Runtime Pod's runtimed heartbeat may stay stale, after its Lease expired, before recovery deletes the Pod and moves its Runs to other Pods (as kube-controller-manager's --node-monitor-grace-period does for a Node).")
	fs.IntVar(&o.config.GCWorkers, "gc-workers", o.config.GCWorkers, "Expired Runs deleted concurrently.")
	fs.StringVar(&o.runtimedCAFile, "runtimed-ca-file", o.runtimedCAFile,
		"The kruntimes CA of the invoke hop: with it Runtime Pods mount their invoke Secret (runtime-<name>-tls) and can be invoked.")
	fs.StringVar(&o.runtimedCAKeyFile, "runtimed-ca-key-file", o.runtimedCAKeyFile,
		"Key of --runtimed-ca-file: with it the runtime controller issues and renews those Secrets; without it they must be provided (e.g. by cert-manager).")
	fs.StringVar(&o.config.EndpointBase, "invoke-endpoint-base", o.config.EndpointBase,
		"Scheme and host of the Kubernetes API as clients reach it, which Ready function Runs advertise in status.endpoint.url; https://kubernetes.default.svc when empty.")
}

func (o *options) run(ctx context.Context) error {
	kube, err := loadConfig(o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading the cluster's client config: %w", err)
	}
	o.config.KubeConfig, o.config.KruntimesConfig = kube, kube
	if o.kruntimesKubeconfig != "" {
		if o.config.KruntimesConfig, err = loadConfig(o.kruntimesKubeconfig); err != nil {
			return fmt.Errorf("loading --kruntimes-kubeconfig: %w", err)
		}
	}
	if o.config.RuntimedTLS, err = manager.LoadRuntimedTLS(o.runtimedCAFile, o.runtimedCAKeyFile); err != nil {
		return err
	}
	m, err := manager.New(o.config)
	if err != nil {
		return err
	}
	if o.healthAddress != "" {
		if err := serveHealth(ctx, o.healthAddress); err != nil {
			return err
		}
	}
	return m.Run(ctx)
}

func loadConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

// serveHealth answers liveness probes and exposes the controllers' metrics.
func serveHealth(ctx context.Context, address string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", legacyregistry.Handler())
	l, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listening on --health-address %s: %w", address, err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving health and metrics")
		}
	}()
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	return nil
}

func newCommand(ctx context.Context) *cobra.Command {
	o := newOptions()
	cmd := &cobra.Command{
		Use:   "kruntimes-controllers",
		Short: "Run the kruntimes controllers: Runtime pools, the Run scheduler, recovery and Run TTL cleanup",
		Long: `kruntimes-controllers reconciles Runtimes into Deployments with the runtimed
sidecar, schedules Pending Runs onto Runtime Pods with a fresh heartbeat and
free capacity, recovers the Runs of Runtime Pods that are lost (gone,
deleting, or silent past --recovery-heartbeat-grace-period), and deletes
finished Runs after their TTL. kruntimes-apiserver
runs the same controllers in-process unless started with --controllers=false;
both compete for one leader Lease, so either or both are safe.`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kruntimes-controllers takes no arguments, got %q", args)
			}
			return o.run(c.Context())
		},
		SilenceUsage: true,
		Version:      version.Get().String(),
	}
	cmd.SetContext(ctx)
	o.addFlags(cmd.Flags())
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cmd.Flags().AddGoFlagSet(klogFlags)
	return cmd
}

func main() {
	os.Exit(cli.Run(newCommand(genericapiserver.SetupSignalContext())))
}
