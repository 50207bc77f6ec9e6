package options

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/version"
)

// Options are runtimed's flags, grouped by what they configure. The
// runtime controller sets --runtime-socket, --workspace-dir, --capacity, the
// invoke and shutdown flags, and the POD_* variables from the downward API.
type Options struct {
	Pod      PodOptions
	Runtime  RuntimeServerOptions
	Client   ClientOptions
	Invoke   InvokeOptions
	Shutdown ShutdownOptions
	// HealthAddress serves /healthz and /readyz, and /metrics when the
	// invoke server is off.
	HealthAddress string
	// MaxProcs is GOMAXPROCS unless $GOMAXPROCS is set; 0 leaves it to Go.
	MaxProcs int
	Logs     *logsapi.LoggingConfiguration
}

// PodOptions name the Pod this runtimed serves: it claims only the Runs
// assigned to this Pod, by name and UID, and at most Capacity at once.
type PodOptions struct {
	Name, Namespace, UID string
	// RuntimeName names the Runtime of this Pod, for logs.
	RuntimeName string
	// Capacity is the Runtime's spec.capacity.runs.
	Capacity int
}

// RuntimeServerOptions say where the Runtime Server listens and what the
// Pod's containers share.
type RuntimeServerOptions struct {
	// Socket is the Runtime Server's unix:// address.
	Socket string
	// WorkspaceDir is the workspace volume, at the same path in both
	// containers.
	WorkspaceDir string
}

// ClientOptions configure runtimed's clients, as component-base's
// ClientConnectionConfiguration does for Kubernetes' components.
type ClientOptions struct {
	Kubeconfig string
	QPS        float32
	Burst      int
	// KruntimesAPIServer, when set, is where runtimed reaches the
	// kruntimes.io API (its Runs: watch, reads, status writes) directly,
	// past kube-apiserver's aggregation proxy, with KruntimesAPICA to
	// verify it.
	KruntimesAPIServer string
	KruntimesAPICA     string
}

// InvokeOptions configure the server of the apiserver's invocations: mutual
// TLS from the three files, which are off together.
type InvokeOptions struct {
	Address string
	// MetricsAddress serves /metrics over the same mutual TLS, to a
	// scraper's client certificate.
	MetricsAddress string
	CertFile       string
	KeyFile        string
	ClientCAFile   string
	// MaxConcurrentStreams bounds the calls in flight on one connection
	// of kruntimes-apiserver's (one per replica): each may hold its input
	// in runtimed, so it bounds their memory; more wait in the apiserver.
	MaxConcurrentStreams uint32
	Dedup                DedupOptions
}

// DedupOptions keep the outcome of an invocation whose ID the caller sent,
// to answer a repeat with it; a Window of 0 turns deduplication off.
// MaxEntries and MaxBytes bound what is kept per function Run, MaxPodBytes
// what all of them keep together.
type DedupOptions struct {
	Window      time.Duration
	MaxEntries  int
	MaxBytes    int64
	MaxPodBytes int64
}

// ShutdownOptions bound the relocation on SIGTERM: Drain is how long a
// function's invocation in flight may finish before it is cancelled and
// the function given back; Timeout bounds the whole relocation.
type ShutdownOptions struct {
	Drain   time.Duration
	Timeout time.Duration
}

// Defaults of the shutdown bounds: together with the invoke server's own
// grace they stay well inside a Pod's default 30 s termination grace. The
// runtime controller passes both, scaled to the template's grace.
const (
	DefaultShutdownDrain   = runtimepod.ShutdownDrain
	DefaultShutdownTimeout = runtimepod.ShutdownTimeout
)

// NewOptions returns the defaults, the Pod fields read from the downward API.
func NewOptions() *Options {
	logs := logsapi.NewLoggingConfiguration()
	// One JSON object per line is what log collectors parse best; --logging-format=text switches back.
	logs.Format = logsapi.JSONLogFormat
	host := os.Getenv(runtimepod.EnvPodIP)
	if host == "" {
		// Not the network: without a Pod IP, stay on loopback.
		host = "127.0.0.1"
	}
	return &Options{
		Pod: PodOptions{
			Name:        os.Getenv(runtimepod.EnvPodName),
			Namespace:   os.Getenv(runtimepod.EnvPodNamespace),
			UID:         os.Getenv(runtimepod.EnvPodUID),
			RuntimeName: os.Getenv(runtimepod.EnvRuntime),
			Capacity:    1,
		},
		Runtime: RuntimeServerOptions{Socket: runtimepod.RuntimeSocket, WorkspaceDir: runtimepod.WorkspacePath},
		Client: ClientOptions{
			// Every Run costs runtimed two status writes (claim, outcome); at
			// client-go's default of 5 QPS a Pod would finish 2.5 Runs/s.
			QPS:            200,
			Burst:          400,
			KruntimesAPICA: os.Getenv(runtimepod.EnvKruntimesAPICA),
		},
		Invoke: InvokeOptions{
			Address:        net.JoinHostPort(host, strconv.Itoa(runtimepod.RuntimedInvokePort)),
			MetricsAddress: net.JoinHostPort(host, strconv.Itoa(runtimepod.RuntimedMetricsPort)),
			// At most 128 MiB of 1 MiB inputs per apiserver replica, under
			// runtimed's 256Mi memory limit; room for 64 functions busy at
			// once and as many log follows.
			MaxConcurrentStreams: 128,
			// Restate keeps an idempotency key for a day, Lambda Powertools an
			// hour; ten minutes covers a client's retries after a 502 at a
			// bounded cost (at most 1,000 outcomes and 4 MiB per function Run).
			Dedup: DedupOptions{
				Window:     10 * time.Minute,
				MaxEntries: 1000,
				MaxBytes:   4 << 20,
				// Under runtimed's 256Mi memory limit whatever capacity.runs is:
				// 64 Runs at 4 MiB each would need all of it.
				MaxPodBytes: 64 << 20,
			},
		},
		Shutdown:      ShutdownOptions{Drain: DefaultShutdownDrain, Timeout: DefaultShutdownTimeout},
		HealthAddress: net.JoinHostPort(host, strconv.Itoa(runtimepod.RuntimedHealthPort)),
		// A proxy that hands each call from goroutine to goroutine spends
		// less CPU on one thread than waking a second one for every step
		// (BenchmarkInvoke in runtimed/functions, docs/benchmarks.md).
		MaxProcs: 1,
		Logs:     logs,
	}
}

// NewCommand returns the runtimed command, which runs until ctx ends.
func NewCommand(ctx context.Context, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runtimed",
		Short: "Run the Runs assigned to this Runtime Pod on its Runtime Server",
		Long: `runtimed is the per-Pod daemon of a Runtime Pod. It heartbeats a Lease for
its Pod, claims the Runs the scheduler assigned to the Pod, executes task Runs
and registers function Runs on the Runtime Server over a unix socket, and
records what happened in the Runs' status. It serves /healthz and /readyz on
the health port, and /metrics on the metrics port to a scraper's client
certificate (on the health port when the invoke server is off).`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("runtimed takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			ctx := klog.NewContext(c.Context(), klog.Background().WithName("runtimed"))
			// What the Config starts (certificate reloads) serves parts
			// that run on past SIGTERM, until this Pod's functions are
			// given back: it stops when Run returns, not with ctx.
			configCtx, stopConfig := context.WithCancel(context.WithoutCancel(ctx))
			defer stopConfig()
			config, err := o.Config(configCtx)
			if err != nil {
				return err
			}
			return config.Run(ctx)
		},
		SilenceUsage: true,
		Version:      version.Get().String(),
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	return cmd
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Runtime.AddFlags(fs)
	o.Pod.AddFlags(fs)
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, "Address serving /healthz and /readyz over plain HTTP (and /metrics when the invoke server is off); defaults to $"+runtimepod.EnvPodIP+" (or 127.0.0.1) on the health port.")
	o.Client.AddFlags(fs)
	o.Invoke.AddFlags(fs)
	// Accepted and ignored for one release, so that a runtimed whose Pod
	// template an older runtime controller wrote still starts
	// (docs/deploy.md, "Removed flags"): kruntimes-apiserver writes
	// status.endpoint (its --invoke-endpoint flags).
	for _, name := range []string{"endpoint-base", "endpoint-ca-file"} {
		fs.String(name, "", "Ignored.")
		_ = fs.MarkDeprecated(name, "it has no effect (kruntimes-apiserver's --invoke-endpoint flags set status.endpoint) and will be removed in the next release")
	}
	fs.IntVar(&o.MaxProcs, "gomaxprocs", o.MaxProcs, "Most threads executing Go code at once (GOMAXPROCS), unless $GOMAXPROCS is set; 0 leaves it to Go, which takes the CPUs the container may use.")
	o.Shutdown.AddFlags(fs)
	logsapi.AddFlags(o.Logs, fs)
}

// AddFlags registers the Pod's flags.
func (o *PodOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Capacity, "capacity", o.Capacity, "Number of Runs this Pod holds at once (the Runtime's spec.capacity.runs); runtimed never runs more.")
	fs.StringVar(&o.Name, "pod-name", o.Name, "Name of this Pod; defaults to $"+runtimepod.EnvPodName+" from the downward API.")
	fs.StringVar(&o.Namespace, "pod-namespace", o.Namespace, "Namespace of this Pod and of the Runs it executes; defaults to $"+runtimepod.EnvPodNamespace+".")
	fs.StringVar(&o.UID, "pod-uid", o.UID, "UID of this Pod: only Runs whose status.assignedPodUID matches are claimed; defaults to $"+runtimepod.EnvPodUID+".")
	fs.StringVar(&o.RuntimeName, "runtime-name", o.RuntimeName, "Name of the Runtime of this Pod, for logs; defaults to $"+runtimepod.EnvRuntime+".")
}

// AddFlags registers the Runtime Server's flags.
func (o *RuntimeServerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Socket, "runtime-socket", o.Socket, "Address of the Runtime Server, a unix:// socket shared with the runtime container.")
	fs.StringVar(&o.WorkspaceDir, "workspace-dir", o.WorkspaceDir, "Workspace volume shared with the runtime container at the same path; each Run gets <dir>/<run UID>.")
}

// AddFlags registers the client flags.
func (o *ClientOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "Requests per second runtimed may send to the Kubernetes API; the API server's priority and fairness still applies.")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Burst of requests runtimed may send to the Kubernetes API above --kube-api-qps.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig to reach the Kubernetes API; when empty, $KUBECONFIG and then the in-cluster configuration are used.")
	fs.StringVar(&o.KruntimesAPIServer, "kruntimes-api-server", o.KruntimesAPIServer, "https://host[:port] of kruntimes-apiserver's own Service: runtimed reaches the kruntimes.io API there directly, with the same token, instead of through kube-apiserver's aggregation proxy; Leases and Events stay on the Kubernetes API. Needs $"+runtimepod.EnvKruntimesAPICA+", the PEM bundle that verifies that server. Empty: through the Kubernetes API.")
}

// AddFlags registers the invoke server's flags.
func (o *InvokeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Address, "invoke-address", o.Address, "Address serving the apiserver's invocations (gRPC with mutual TLS); defaults to $"+runtimepod.EnvPodIP+" (or 127.0.0.1) on the invoke port.")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "Address serving /metrics over HTTPS with the invoke server's certificate, to a client certificate of CommonName "+invocation.MetricsClientCommonName+" signed by --invoke-client-ca-file; defaults to $"+runtimepod.EnvPodIP+" (or 127.0.0.1) on the metrics port. Without the invoke server's files, /metrics is on --health-address instead.")
	fs.StringVar(&o.CertFile, "invoke-tls-cert-file", o.CertFile, "Serving certificate of the invoke server, reloaded when the file changes; the invoke server is off without it.")
	fs.StringVar(&o.KeyFile, "invoke-tls-key-file", o.KeyFile, "Key of --invoke-tls-cert-file.")
	fs.StringVar(&o.ClientCAFile, "invoke-client-ca-file", o.ClientCAFile, "CA whose client certificate for kruntimes-apiserver the invoke server accepts, reloaded when the file changes.")
	fs.Uint32Var(&o.MaxConcurrentStreams, "invoke-max-concurrent-streams", o.MaxConcurrentStreams, "Most invocations and log follows in flight at once on one connection of kruntimes-apiserver (it keeps one per replica); each may hold up to 1 MiB of input in runtimed, and more wait in kruntimes-apiserver. Raise it with --capacity above 64.")
	d := &o.Dedup
	fs.DurationVar(&d.Window, "invoke-dedup-window", d.Window, "How long the outcome of an invocation whose ID the caller sent (X-Kruntime-Invocation-ID) is kept: a repeat within it is answered with that outcome without running the handler again, and a repeat while it runs waits for it. Kept per registration: a new attempt, a new Runtime Server registration or a runtimed restart starts empty. 0 turns deduplication off.")
	fs.IntVar(&d.MaxEntries, "invoke-dedup-max-entries", d.MaxEntries, "Most outcomes kept per function Run for --invoke-dedup-window; the oldest go first.")
	fs.Int64Var(&d.MaxBytes, "invoke-dedup-max-bytes", d.MaxBytes, "Most bytes of outcomes kept per function Run for --invoke-dedup-window; the oldest go first, and one larger outcome is kept alone.")
	fs.Int64Var(&d.MaxPodBytes, "invoke-dedup-max-pod-bytes", d.MaxPodBytes, "Most bytes of outcomes kept for all the function Runs of this Pod together (within each one's --invoke-dedup-max-bytes); the oldest of any go first, and one larger outcome is kept alone.")
}

// AddFlags registers the shutdown flags.
func (o *ShutdownOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Drain, "shutdown-drain-timeout", o.Drain, "On SIGTERM, how long an invocation in flight may finish before it is cancelled and its function is given back to be placed on another Pod (same attempt).")
	fs.DurationVar(&o.Timeout, "shutdown-timeout", o.Timeout, "On SIGTERM, the longest runtimed spends giving back this Pod's functions; keep it below the Pod's terminationGracePeriodSeconds. A function not given back by then is recovered once the Pod is gone, which spends an attempt.")
}

// Validate says what is wrong with the flags and how to fix it; it changes
// nothing.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.Runtime.Validate()...)
	errs = append(errs, o.Pod.Validate()...)
	errs = append(errs, o.Client.Validate()...)
	errs = append(errs, o.Invoke.Validate()...)
	if o.MaxProcs < 0 {
		errs = append(errs, fmt.Errorf("--gomaxprocs must not be negative, got %d", o.MaxProcs))
	}
	errs = append(errs, o.Shutdown.Validate()...)
	if _, _, err := net.SplitHostPort(o.HealthAddress); err != nil {
		errs = append(errs, fmt.Errorf("--health-address must be host:port: %w", err))
	}
	return errors.Join(errs...)
}

// Validate checks the Runtime Server's flags.
func (o *RuntimeServerOptions) Validate() []error {
	var errs []error
	if _, err := runtimepod.SocketPath(o.Socket); err != nil {
		errs = append(errs, fmt.Errorf("--runtime-socket %w", err))
	}
	if !filepath.IsAbs(o.WorkspaceDir) {
		errs = append(errs, fmt.Errorf("--workspace-dir must be an absolute path, got %q", o.WorkspaceDir))
	}
	return errs
}

// Validate checks the Pod's flags.
func (o *PodOptions) Validate() []error {
	var errs []error
	if o.Capacity < 1 || o.Capacity > validation.MaxRunsPerPod {
		errs = append(errs, fmt.Errorf("--capacity must be between 1 and %d, got %d", validation.MaxRunsPerPod, o.Capacity))
	}
	for _, f := range []struct{ flag, env, value string }{
		{"--pod-name", runtimepod.EnvPodName, o.Name},
		{"--pod-namespace", runtimepod.EnvPodNamespace, o.Namespace},
		{"--pod-uid", runtimepod.EnvPodUID, o.UID},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required; set it or $%s from the downward API", f.flag, f.env))
		}
	}
	return errs
}

// Validate checks the client flags.
func (o *ClientOptions) Validate() []error {
	if o.KruntimesAPIServer == "" {
		return nil
	}
	var errs []error
	if u, err := url.Parse(o.KruntimesAPIServer); err != nil || u.Scheme != "https" || u.Host == "" || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" {
		errs = append(errs, fmt.Errorf("--kruntimes-api-server must be https://host[:port] with no path, got %q", o.KruntimesAPIServer))
	}
	if o.KruntimesAPICA == "" {
		errs = append(errs, fmt.Errorf("--kruntimes-api-server needs $%s, the PEM bundle that verifies kruntimes-apiserver's serving certificate", runtimepod.EnvKruntimesAPICA))
	}
	return errs
}

// Validate checks the invoke server's flags.
func (o *InvokeOptions) Validate() []error {
	var errs []error
	if noCert := o.CertFile == ""; noCert != (o.KeyFile == "") || noCert != (o.ClientCAFile == "") {
		errs = append(errs, fmt.Errorf("--invoke-tls-cert-file, --invoke-tls-key-file and --invoke-client-ca-file go together: set all three, or none to turn invoke off"))
	}
	if _, _, err := net.SplitHostPort(o.Address); err != nil {
		errs = append(errs, fmt.Errorf("--invoke-address must be host:port: %w", err))
	}
	if _, _, err := net.SplitHostPort(o.MetricsAddress); err != nil {
		errs = append(errs, fmt.Errorf("--metrics-address must be host:port: %w", err))
	}
	if o.MaxConcurrentStreams < 1 {
		errs = append(errs, fmt.Errorf("--invoke-max-concurrent-streams must be at least 1, got %d", o.MaxConcurrentStreams))
	}
	d := o.Dedup
	if d.Window < 0 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-window must not be negative (0 turns deduplication off), got %s", d.Window))
	}
	if d.MaxEntries < 1 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-max-entries must be at least 1, got %d", d.MaxEntries))
	}
	if d.MaxBytes < 1 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-max-bytes must be at least 1, got %d", d.MaxBytes))
	}
	if d.MaxPodBytes < 1 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-max-pod-bytes must be at least 1, got %d", d.MaxPodBytes))
	}
	return errs
}

// Validate checks the shutdown bounds.
func (o *ShutdownOptions) Validate() []error {
	if o.Drain < 0 || o.Timeout < o.Drain {
		return []error{fmt.Errorf("--shutdown-timeout (%s) must be at least --shutdown-drain-timeout (%s), which must not be negative: "+
			"giving back a function takes its drain, an unregister and a status write", o.Timeout, o.Drain)}
	}
	return nil
}
