package options

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apiserver"
	"kruntimes.io/kruntimes/proto/pki"
)

// InvokeOptions configure runs/invoke: how this server dials the runtimed
// that owns a Run, and how long an invocation may take.
type InvokeOptions struct {
	// ClientCertFile and ClientKeyFile are this server's client pair for
	// runtimed (CommonName kruntimes-apiserver); CAFile is the kruntimes CA
	// that signs runtimed serving certificates. All are reloaded when they
	// change.
	ClientCertFile, ClientKeyFile, CAFile string
	// MaxTimeout bounds every invocation.
	MaxTimeout time.Duration
	// WaitForReady is how long an invocation of a function on its way to
	// Ready waits for it.
	WaitForReady time.Duration
	// Endpoint chooses what status.endpoint advertises.
	Endpoint *EndpointOptions
}

// DefaultWaitForReady covers a function's move to another Pod in a Runtime
// rollout (drain, give-back, placement, registration: 1–5 s measured),
// so that its callers see a slower answer instead of a 503.
const DefaultWaitForReady = 10 * time.Second

// maxWaitForReady keeps a wait well inside kube-apiserver's 60 s request
// timeout for aggregated APIs; a request waits half of its time at most.
const maxWaitForReady = 30 * time.Second

// NewInvokeOptions returns the defaults: invoke off until the files are set.
func NewInvokeOptions() *InvokeOptions {
	return &InvokeOptions{MaxTimeout: invocation.DefaultMaxTimeout, WaitForReady: DefaultWaitForReady, Endpoint: NewEndpointOptions()}
}

// AddFlags registers the invoke flags.
func (o *InvokeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ClientCertFile, "runtimed-client-cert-file", o.ClientCertFile,
		"Client certificate (CommonName "+invocation.ClientCommonName+", signed by --runtimed-ca-file) this server presents to runtimed to invoke functions; reloaded when it changes. Without it runs/invoke answers 503.")
	fs.StringVar(&o.ClientKeyFile, "runtimed-client-key-file", o.ClientKeyFile, "Key of --runtimed-client-cert-file.")
	fs.StringVar(&o.CAFile, "runtimed-ca-file", o.CAFile,
		"The kruntimes CA bundle runtimed serving certificates are verified against; reloaded when it changes.")
	fs.DurationVar(&o.MaxTimeout, "invoke-max-timeout", o.MaxTimeout,
		"Longest an invocation may run, whatever its request's timeout; keep it below kube-apiserver's request timeout for aggregated APIs (60s).")
	fs.DurationVar(&o.WaitForReady, "invoke-wait-for-ready", o.WaitForReady,
		"How long an invocation of a function on its way to Ready (just created, being scheduled, registering, moving to another Pod in a rollout or a recovery) waits for it before it is answered 503 with Retry-After; at most half of the request's timeout, and 0 answers at once. The handler has not run while it waits. A Run the scheduler parked (no such Runtime, no free slot) is answered at once.")
	o.Endpoint.AddFlags(fs)
}

// Validate checks the flags.
func (o *InvokeOptions) Validate() []error {
	var errs []error
	if noCert := o.ClientCertFile == ""; noCert != (o.ClientKeyFile == "") || noCert != (o.CAFile == "") {
		errs = append(errs, fmt.Errorf("--runtimed-client-cert-file, --runtimed-client-key-file and --runtimed-ca-file go together: set all three, or none to turn runs/invoke off"))
	}
	if o.MaxTimeout <= 0 || o.MaxTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("--invoke-max-timeout must be between 0 and 1h, got %s", o.MaxTimeout))
	}
	if o.WaitForReady < 0 || o.WaitForReady > maxWaitForReady {
		errs = append(errs, fmt.Errorf("--invoke-wait-for-ready must be between 0 and %s, got %s", maxWaitForReady, o.WaitForReady))
	}
	errs = append(errs, o.Endpoint.Validate()...)
	return errs
}

// Config builds the invoke configuration; the certificates are reloaded
// until ctx ends. coreAPI is nil without a cluster.
func (o *InvokeOptions) Config(ctx context.Context, coreAPI *rest.Config) (apiserver.InvokeConfig, error) {
	cfg := apiserver.InvokeConfig{MaxTimeout: o.MaxTimeout, WaitForReady: o.WaitForReady}
	endpoint, err := o.Endpoint.Config()
	if err != nil {
		return cfg, err
	}
	cfg.Endpoint = endpoint
	if coreAPI != nil {
		kube, err := kubernetes.NewForConfig(coreAPI)
		if err != nil {
			return cfg, err
		}
		cfg.Router.Kube = kube
	}
	if o.ClientCertFile != "" {
		clientTLS, err := pki.ClientTLS(ctx, o.ClientCertFile, o.ClientKeyFile, o.CAFile)
		if err != nil {
			return cfg, err
		}
		cfg.Router.ClientTLS = clientTLS
	}
	return cfg, nil
}
