package options

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/runtimepod"
)

// Options are runtimed's flags. The runtime controller sets
// --runtime-socket, --workspace-dir and --capacity, and the POD_* variables
// from the downward API.
type Options struct {
	RuntimeSocket string
	WorkspaceDir  string
	Capacity      int
	PodName       string
	PodNamespace  string
	PodUID        string
	HealthAddress string
	Kubeconfig    string
	// KruntimesAPIServer, when set, is where runtimed reaches the kruntimes.io
	// API (its Runs: watch, reads, status writes) directly, past
	// kube-apiserver's aggregation proxy, with KruntimesAPICA to verify it.
	KruntimesAPIServer string
	KruntimesAPICA     string
	KubeAPIQPS         float32
	KubeAPIBurst       int
	// RuntimeName names the Runtime of this Pod, for logs.
	RuntimeName string
	// InvokeAddress serves the apiserver's invocations with mutual TLS from
	// the three files; empty files turn the invoke server off.
	InvokeAddress      string
	InvokeCertFile     string
	InvokeKeyFile      string
	InvokeClientCAFile string
	// InvokeDedupWindow keeps the outcome of an invocation whose ID the
	// caller sent, to answer a repeat with it; 0 turns deduplication off.
	// InvokeDedupMaxEntries and InvokeDedupMaxBytes bound what is kept per
	// function Run, InvokeDedupMaxPodBytes what all of them keep together.
	InvokeDedupWindow      time.Duration
	InvokeDedupMaxEntries  int
	InvokeDedupMaxBytes    int64
	InvokeDedupMaxPodBytes int64
	// MaxProcs is GOMAXPROCS unless $GOMAXPROCS is set; 0 leaves it to Go.
	MaxProcs int
	// ShutdownDrain is how long, on SIGTERM, a function's invocation in
	// flight may finish before it is cancelled and the function given back
	// for relocation; ShutdownTimeout bounds the whole relocation.
	ShutdownDrain   time.Duration
	ShutdownTimeout time.Duration
	Logs            *logsapi.LoggingConfiguration
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
		RuntimeSocket:  runtimepod.RuntimeSocket,
		WorkspaceDir:   runtimepod.WorkspacePath,
		Capacity:       1,
		PodName:        os.Getenv(runtimepod.EnvPodName),
		PodNamespace:   os.Getenv(runtimepod.EnvPodNamespace),
		PodUID:         os.Getenv(runtimepod.EnvPodUID),
		HealthAddress:  net.JoinHostPort(host, strconv.Itoa(runtimepod.RuntimedHealthPort)),
		RuntimeName:    os.Getenv(runtimepod.EnvRuntime),
		KruntimesAPICA: os.Getenv(runtimepod.EnvKruntimesAPICA),
		InvokeAddress:  net.JoinHostPort(host, strconv.Itoa(runtimepod.RuntimedInvokePort)),
		// Every Run costs runtimed two status writes (claim, outcome); at
		// client-go's default of 5 QPS a Pod would finish 2.5 Runs/s.
		KubeAPIQPS:   200,
		KubeAPIBurst: 400,
		// Restate keeps an idempotency key for a day, Lambda Powertools an
		// hour; ten minutes covers a client's retries after a 502 at a
		// bounded cost (at most 1,000 outcomes and 4 MiB per function Run).
		InvokeDedupWindow:     10 * time.Minute,
		InvokeDedupMaxEntries: 1000,
		InvokeDedupMaxBytes:   4 << 20,
		// Under runtimed's 256Mi memory limit whatever capacity.runs is:
		// 64 Runs at 4 MiB each would need all of it.
		InvokeDedupMaxPodBytes: 64 << 20,
		// A proxy that hands each call from goroutine to goroutine spends
		// less CPU on one thread than waking a second one for every step
		// (BenchmarkInvoke in runtimed/functions, docs/benchmarks.md).
		MaxProcs:        1,
		ShutdownDrain:   DefaultShutdownDrain,
		ShutdownTimeout: DefaultShutdownTimeout,
		Logs:            logs,
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.RuntimeSocket, "runtime-socket", o.RuntimeSocket, "Address of the Runtime Server, a unix:// socket shared with the runtime container.")
	fs.StringVar(&o.WorkspaceDir, "workspace-dir", o.WorkspaceDir, "Workspace volume shared with the runtime container at the same path; each Run gets <dir>/<run UID>.")
	fs.IntVar(&o.Capacity, "capacity", o.Capacity, "Number of Runs this Pod holds at once (the Runtime's spec.capacity.runs); runtimed never runs more.")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "Name of this Pod; defaults to $"+runtimepod.EnvPodName+" from the downward API.")
	fs.StringVar(&o.PodNamespace, "pod-namespace", o.PodNamespace, "Namespace of this Pod and of the Runs it executes; defaults to $"+runtimepod.EnvPodNamespace+".")
	fs.StringVar(&o.PodUID, "pod-uid", o.PodUID, "UID of this Pod: only Runs whose status.assignedPodUID matches are claimed; defaults to $"+runtimepod.EnvPodUID+".")
	fs.StringVar(&o.HealthAddress, "health-address", o.HealthAddress, "Address serving /healthz, /readyz and /metrics; defaults to $"+runtimepod.EnvPodIP+" (or 127.0.0.1) on the health port.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Requests per second runtimed may send to the Kubernetes API; the API server's priority and fairness still applies.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of requests runtimed may send to the Kubernetes API above --kube-api-qps.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig to reach the Kubernetes API; when empty, $KUBECONFIG and then the in-cluster configuration are used.")
	fs.StringVar(&o.KruntimesAPIServer, "kruntimes-api-server", o.KruntimesAPIServer, "https://host[:port] of kruntimes-apiserver's own Service: runtimed reaches the kruntimes.io API there directly, with the same token, instead of through kube-apiserver's aggregation proxy; Leases and Events stay on the Kubernetes API. Needs $"+runtimepod.EnvKruntimesAPICA+", the PEM bundle that verifies that server. Empty: through the Kubernetes API.")
	fs.StringVar(&o.RuntimeName, "runtime-name", o.RuntimeName, "Name of the Runtime of this Pod, for logs; defaults to $"+runtimepod.EnvRuntime+".")
	fs.StringVar(&o.InvokeAddress, "invoke-address", o.InvokeAddress, "Address serving the apiserver's invocations (gRPC with mutual TLS); defaults to $"+runtimepod.EnvPodIP+" (or 127.0.0.1) on the invoke port.")
	fs.StringVar(&o.InvokeCertFile, "invoke-tls-cert-file", o.InvokeCertFile, "Serving certificate of the invoke server, reloaded when the file changes; the invoke server is off without it.")
	fs.StringVar(&o.InvokeKeyFile, "invoke-tls-key-file", o.InvokeKeyFile, "Key of --invoke-tls-cert-file.")
	fs.StringVar(&o.InvokeClientCAFile, "invoke-client-ca-file", o.InvokeClientCAFile, "CA whose client certificate for kruntimes-apiserver the invoke server accepts, reloaded when the file changes.")
	// Accepted and ignored for one release, so that a runtimed whose Pod
	// template an older runtime controller wrote still starts
	// (docs/deploy.md, "Removed flags"): kruntimes-apiserver writes
	// status.endpoint (its --invoke-endpoint flags).
	for _, name := range []string{"endpoint-base", "endpoint-ca-file"} {
		fs.String(name, "", "Ignored.")
		_ = fs.MarkDeprecated(name, "it has no effect (kruntimes-apiserver's --invoke-endpoint flags set status.endpoint) and will be removed in the next release")
	}
	fs.DurationVar(&o.InvokeDedupWindow, "invoke-dedup-window", o.InvokeDedupWindow, "How long the outcome of an invocation whose ID the caller sent (X-Kruntime-Invocation-ID) is kept: a repeat within it is answered with that outcome without running the handler again, and a repeat while it runs waits for it. Kept per registration: a new attempt, a new Runtime Server registration or a runtimed restart starts empty. 0 turns deduplication off.")
	fs.IntVar(&o.InvokeDedupMaxEntries, "invoke-dedup-max-entries", o.InvokeDedupMaxEntries, "Most outcomes kept per function Run for --invoke-dedup-window; the oldest go first.")
	fs.Int64Var(&o.InvokeDedupMaxBytes, "invoke-dedup-max-bytes", o.InvokeDedupMaxBytes, "Most bytes of outcomes kept per function Run for --invoke-dedup-window; the oldest go first, and one larger outcome is kept alone.")
	fs.Int64Var(&o.InvokeDedupMaxPodBytes, "invoke-dedup-max-pod-bytes", o.InvokeDedupMaxPodBytes, "Most bytes of outcomes kept for all the function Runs of this Pod together (within each one's --invoke-dedup-max-bytes); the oldest of any go first, and one larger outcome is kept alone.")
	fs.IntVar(&o.MaxProcs, "gomaxprocs", o.MaxProcs, "Most threads executing Go code at once (GOMAXPROCS), unless $GOMAXPROCS is set; 0 leaves it to Go, which takes the CPUs the container may use.")
	fs.DurationVar(&o.ShutdownDrain, "shutdown-drain-timeout", o.ShutdownDrain, "On SIGTERM, how long an invocation in flight may finish before it is cancelled and its function is given back to be placed on another Pod (same attempt).")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "On SIGTERM, the longest runtimed spends giving back this Pod's functions; keep it below the Pod's terminationGracePeriodSeconds. A function not given back by then is recovered once the Pod is gone, which spends an attempt.")
	logsapi.AddFlags(o.Logs, fs)
}

// Validate says what is wrong with the flags and how to fix it.
func (o *Options) Validate() error {
	var errs []error
	if _, err := runtimepod.SocketPath(o.RuntimeSocket); err != nil {
		errs = append(errs, fmt.Errorf("--runtime-socket %w", err))
	}
	if !filepath.IsAbs(o.WorkspaceDir) {
		errs = append(errs, fmt.Errorf("--workspace-dir must be an absolute path, got %q", o.WorkspaceDir))
	}
	if o.Capacity < 1 || o.Capacity > validation.MaxRunsPerPod {
		errs = append(errs, fmt.Errorf("--capacity must be between 1 and %d, got %d", validation.MaxRunsPerPod, o.Capacity))
	}
	for _, f := range []struct{ flag, env, value string }{
		{"--pod-name", runtimepod.EnvPodName, o.PodName},
		{"--pod-namespace", runtimepod.EnvPodNamespace, o.PodNamespace},
		{"--pod-uid", runtimepod.EnvPodUID, o.PodUID},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required; set it or $%s from the downward API", f.flag, f.env))
		}
	}
	if o.KruntimesAPIServer != "" {
		if u, err := url.Parse(o.KruntimesAPIServer); err != nil || u.Scheme != "https" || u.Host == "" || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("--kruntimes-api-server must be https://host[:port] with no path, got %q", o.KruntimesAPIServer))
		}
		if o.KruntimesAPICA == "" {
			errs = append(errs, fmt.Errorf("--kruntimes-api-server needs $%s, the PEM bundle that verifies kruntimes-apiserver's serving certificate", runtimepod.EnvKruntimesAPICA))
		}
	}
	if noCert := o.InvokeCertFile == ""; noCert != (o.InvokeKeyFile == "") || noCert != (o.InvokeClientCAFile == "") {
		errs = append(errs, fmt.Errorf("--invoke-tls-cert-file, --invoke-tls-key-file and --invoke-client-ca-file go together: set all three, or none to turn invoke off"))
	}
	if _, _, err := net.SplitHostPort(o.InvokeAddress); err != nil {
		errs = append(errs, fmt.Errorf("--invoke-address must be host:port: %w", err))
	}
	if o.InvokeDedupWindow < 0 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-window must not be negative (0 turns deduplication off), got %s", o.InvokeDedupWindow))
	}
	if o.InvokeDedupMaxEntries < 1 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-max-entries must be at least 1, got %d", o.InvokeDedupMaxEntries))
	}
	if o.InvokeDedupMaxBytes < 1 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-max-bytes must be at least 1, got %d", o.InvokeDedupMaxBytes))
	}
	if o.InvokeDedupMaxPodBytes < 1 {
		errs = append(errs, fmt.Errorf("--invoke-dedup-max-pod-bytes must be at least 1, got %d", o.InvokeDedupMaxPodBytes))
	}
	if o.MaxProcs < 0 {
		errs = append(errs, fmt.Errorf("--gomaxprocs must not be negative, got %d", o.MaxProcs))
	}
	if o.ShutdownDrain < 0 || o.ShutdownTimeout < o.ShutdownDrain {
		errs = append(errs, fmt.Errorf("--shutdown-timeout (%s) must be at least --shutdown-drain-timeout (%s), which must not be negative: "+
			"giving back a function takes its drain, an unregister and a status write", o.ShutdownTimeout, o.ShutdownDrain))
	}
	if _, _, err := net.SplitHostPort(o.HealthAddress); err != nil {
		errs = append(errs, fmt.Errorf("--health-address must be host:port: %w", err))
	}
	return errors.Join(errs...)
}
