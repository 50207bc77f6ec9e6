package options

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/controllers/manager"
	"kruntimes.io/kruntimes/controllers/recovery"
	runtimecontroller "kruntimes.io/kruntimes/controllers/runtime"
	"kruntimes.io/kruntimes/proto/pki"
)

// ControllersOptions are the settings of the kruntimes controllers (runtime,
// scheduler, recovery, gc), whichever binary runs them.
type ControllersOptions struct {
	// Manager holds the leader election, the workers and the heartbeat
	// grace period; Config adds the clients and the runtimed TLS.
	Manager manager.Config
	// RuntimedCAFile is the kruntimes CA of the invoke hop: with it Runtime
	// Pods mount their invoke Secret, and with RuntimedCAKeyFile as well the
	// runtime controller issues and renews those Secrets.
	RuntimedCAFile, RuntimedCAKeyFile string
	// RuntimedKruntimesAPIServer and RuntimedKruntimesAPICAFile, when set,
	// make runtimed reach this API directly.
	RuntimedKruntimesAPIServer, RuntimedKruntimesAPICAFile string
}

// NewControllersOptions returns the defaults: leader election on, the
// manager's default workers.
func NewControllersOptions() *ControllersOptions {
	return &ControllersOptions{Manager: manager.NewConfig()}
}

// AddFlags registers the settings every binary running the controllers
// takes. --runtimed-ca-file is left to the caller: kruntimes-apiserver
// shares it with its own invoke client.
func (o *ControllersOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Manager.HeartbeatGracePeriod, "recovery-heartbeat-grace-period", o.Manager.HeartbeatGracePeriod,
		"How long a Runtime Pod's runtimed heartbeat may stay stale, after its Lease expired, before recovery deletes the Pod and moves its Runs to other Pods (as kube-controller-manager's --node-monitor-grace-period does for a Node).")
	fs.StringVar(&o.RuntimedCAKeyFile, "runtimed-ca-key-file", o.RuntimedCAKeyFile,
		"Key of --runtimed-ca-file: with it the runtime controller issues and renews each Runtime's invoke Secret (runtime-<name>-tls); without it those Secrets must be provided (e.g. by cert-manager).")
	fs.StringVar(&o.RuntimedKruntimesAPIServer, "runtimed-kruntimes-api-server", o.RuntimedKruntimesAPIServer,
		"https://host[:port] of kruntimes-apiserver's own Service (e.g. https://kruntimes-apiserver.kruntimes-system.svc): Runtime Pods' runtimed reach the kruntimes.io API there directly, with their Pod-bound token, instead of through kube-apiserver's aggregation proxy. Needs --runtimed-kruntimes-api-ca-file. Changing either rolls every Runtime's Pods.")
	fs.StringVar(&o.RuntimedKruntimesAPICAFile, "runtimed-kruntimes-api-ca-file", o.RuntimedKruntimesAPICAFile,
		"PEM bundle that verifies kruntimes-apiserver's serving certificate at --runtimed-kruntimes-api-server; given to runtimed in its Pod spec.")
}

// AddManagerFlags registers the leader election and the workers, which
// kruntimes-controllers exposes; hosted in kruntimes-apiserver, the
// controllers keep their default workers (see AddLeaderElectionFlags).
func (o *ControllersOptions) AddManagerFlags(fs *pflag.FlagSet) {
	o.AddLeaderElectionFlags(fs)
	fs.IntVar(&o.Manager.RuntimeWorkers, "runtime-workers", o.Manager.RuntimeWorkers, "Runtimes reconciled concurrently.")
	fs.IntVar(&o.Manager.SchedulerWorkers, "scheduler-workers", o.Manager.SchedulerWorkers,
		"Runs scheduled concurrently; choosing a Pod is serialized, binding is not.")
	fs.IntVar(&o.Manager.RecoveryWorkers, "recovery-workers", o.Manager.RecoveryWorkers, "Runs of lost Runtime Pods recovered concurrently.")
	fs.IntVar(&o.Manager.GCWorkers, "gc-workers", o.Manager.GCWorkers, "Expired Runs deleted concurrently.")
}

// AddLeaderElectionFlags registers the --leader-elect* flags, which every
// binary running the controllers takes: replicas of kruntimes-apiserver
// elect the one that runs them.
func (o *ControllersOptions) AddLeaderElectionFlags(fs *pflag.FlagSet) {
	le := &o.Manager.LeaderElection
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
}

// Validate checks the settings; manager.New checks the rest.
func (o *ControllersOptions) Validate() []error {
	var errs []error
	if o.Manager.HeartbeatGracePeriod < recovery.MinHeartbeatGracePeriod {
		errs = append(errs, fmt.Errorf("--recovery-heartbeat-grace-period must be at least %s, got %s: it separates runtimed stopping its invocations when its Lease lapses from recovery moving its functions, and must cover clock skew between the nodes",
			recovery.MinHeartbeatGracePeriod, o.Manager.HeartbeatGracePeriod))
	}
	if err := o.Manager.LeaderElection.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.RuntimedCAKeyFile != "" && o.RuntimedCAFile == "" {
		errs = append(errs, errors.New("--runtimed-ca-key-file needs --runtimed-ca-file"))
	}
	if (o.RuntimedKruntimesAPIServer == "") != (o.RuntimedKruntimesAPICAFile == "") {
		errs = append(errs, errors.New("--runtimed-kruntimes-api-server and --runtimed-kruntimes-api-ca-file go together: runtimed must be able to verify the server it reaches"))
	} else if u, err := url.Parse(o.RuntimedKruntimesAPIServer); o.RuntimedKruntimesAPIServer != "" &&
		(err != nil || u.Scheme != "https" || u.Host == "" || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "") {
		errs = append(errs, fmt.Errorf("--runtimed-kruntimes-api-server must be https://host[:port] with no path, got %q", o.RuntimedKruntimesAPIServer))
	}
	return errs
}

// Config is the manager's configuration with its clients: kube reaches the
// cluster, kruntimes the kruntimes.io API. It reads the runtimed CA.
func (o *ControllersOptions) Config(kube, kruntimes *rest.Config) (manager.Config, error) {
	cfg := o.Manager
	cfg.KubeConfig, cfg.KruntimesConfig = kube, kruntimes
	tls, err := o.runtimedTLS()
	if err != nil {
		return cfg, err
	}
	cfg.RuntimedTLS = tls
	if o.RuntimedKruntimesAPIServer != "" {
		ca, err := os.ReadFile(o.RuntimedKruntimesAPICAFile)
		if err != nil {
			return cfg, fmt.Errorf("read --runtimed-kruntimes-api-ca-file: %w", err)
		}
		if block, _ := pem.Decode(ca); block == nil {
			return cfg, fmt.Errorf("--runtimed-kruntimes-api-ca-file %s holds no PEM certificate", o.RuntimedKruntimesAPICAFile)
		}
		cfg.RuntimedKruntimesAPI = &runtimecontroller.KruntimesAPI{Server: o.RuntimedKruntimesAPIServer, CA: ca}
	}
	return cfg, nil
}

// runtimedTLS reads the kruntimes CA for Runtime Pods: the Pods mount their
// invoke Secret when RuntimedCAFile is set, and the runtime controller
// issues those Secrets when RuntimedCAKeyFile is set too.
func (o *ControllersOptions) runtimedTLS() (*runtimecontroller.RuntimedTLS, error) {
	if o.RuntimedCAFile == "" {
		return nil, nil
	}
	if o.RuntimedCAKeyFile == "" {
		return &runtimecontroller.RuntimedTLS{}, nil
	}
	certPEM, err := os.ReadFile(o.RuntimedCAFile)
	if err != nil {
		return nil, fmt.Errorf("read --runtimed-ca-file: %w", err)
	}
	keyPEM, err := os.ReadFile(o.RuntimedCAKeyFile)
	if err != nil {
		return nil, fmt.Errorf("read --runtimed-ca-key-file: %w", err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the kruntimes CA in %s and %s: %w", o.RuntimedCAFile, o.RuntimedCAKeyFile, err)
	}
	return &runtimecontroller.RuntimedTLS{Issuer: ca}, nil
}
