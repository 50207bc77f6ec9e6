package options

import (
	"context"
	"flag"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/version"
)

// defaultHealthAddress is where kruntimes-controllers serves /healthz and
// /metrics unless told otherwise.
const defaultHealthAddress = ":10262"

// Options are the flags of kruntimes-controllers.
type Options struct {
	// Kubeconfig reaches the cluster; empty uses the in-cluster
	// ServiceAccount.
	Kubeconfig string
	// KruntimesKubeconfig reaches the kruntimes.io API; empty uses
	// Kubeconfig's, through kube-apiserver's aggregation.
	KruntimesKubeconfig string
	// HealthAddress serves /healthz and /metrics over plain HTTP; empty
	// serves neither.
	HealthAddress string
	Controllers   *ControllersOptions
}

// NewOptions returns the defaults: in-cluster clients, health on :10262.
func NewOptions() *Options {
	return &Options{HealthAddress: defaultHealthAddress, Controllers: NewControllersOptions()}
}

// NewCommand returns the kruntimes-controllers command, which runs until ctx
// ends.
func NewCommand(ctx context.Context, o *Options) *cobra.Command {
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
			if err := o.Validate(args); err != nil {
				return err
			}
			return o.Run(c.Context())
		},
		SilenceUsage: true,
		Version:      version.Get().String(),
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cmd.Flags().AddGoFlagSet(klogFlags)
	return cmd
}

// AddFlags registers every flag on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"Kubeconfig of the cluster; empty uses the in-cluster ServiceAccount.")
	fs.StringVar(&o.KruntimesKubeconfig, "kruntimes-kubeconfig", o.KruntimesKubeconfig,
		"Kubeconfig that reaches the kruntimes.io API; empty uses the cluster's, through kube-apiserver's aggregation.")
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress,
		"Address serving /healthz and /metrics over plain HTTP; empty serves neither.")
	fs.StringVar(&o.Controllers.RuntimedCAFile, "runtimed-ca-file", o.Controllers.RuntimedCAFile,
		"The kruntimes CA of the invoke hop: with it Runtime Pods mount their invoke Secret (runtime-<name>-tls) and can be invoked.")
	o.Controllers.AddFlags(fs)
	o.Controllers.AddManagerFlags(fs)
	// Accepted and ignored for one release, so that a kruntimes-controllers
	// started with it still starts (docs/deploy.md, "Removed flags"):
	// kruntimes-apiserver's flag of that name is status.endpoint's one source.
	fs.String("invoke-endpoint-base", "", "Ignored.")
	_ = fs.MarkDeprecated("invoke-endpoint-base", "it has no effect (kruntimes-apiserver's --invoke-endpoint-base sets status.endpoint) and will be removed in the next release")
}

// Validate checks the flags and that no argument was given.
func (o *Options) Validate(args []string) error {
	var errs []error
	if len(args) > 0 {
		errs = append(errs, fmt.Errorf("kruntimes-controllers takes no arguments, got %q", args))
	}
	errs = append(errs, o.Controllers.Validate()...)
	return utilerrors.NewAggregate(errs)
}

// Config loads the client configs and the runtimed CA into the manager's
// configuration.
func (o *Options) Config() (manager.Config, error) {
	kube, err := loadConfig(o.Kubeconfig)
	if err != nil {
		return manager.Config{}, fmt.Errorf("loading the cluster's client config: %w", err)
	}
	kruntimes := kube
	if o.KruntimesKubeconfig != "" {
		if kruntimes, err = loadConfig(o.KruntimesKubeconfig); err != nil {
			return manager.Config{}, fmt.Errorf("loading --kruntimes-kubeconfig: %w", err)
		}
	}
	return o.Controllers.Config(kube, kruntimes)
}

// Run serves health and metrics and runs the controllers while this replica
// leads, until ctx ends.
func (o *Options) Run(ctx context.Context) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	m, err := manager.New(cfg)
	if err != nil {
		return err
	}
	if o.HealthAddress != "" {
		if err := serveHealth(ctx, o.HealthAddress); err != nil {
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
