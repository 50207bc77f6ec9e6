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
	// Endpoint chooses what status.endpoint advertises.
	Endpoint *EndpointOptions
}

// NewInvokeOptions returns the defaults: invoke off until the files are set.
func NewInvokeOptions() *InvokeOptions {
	return &InvokeOptions{MaxTimeout: invocation.DefaultMaxTimeout, Endpoint: NewEndpointOptions()}
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
	errs = append(errs, o.Endpoint.Validate()...)
	return errs
}

// Config builds the invoke configuration; the certificates are reloaded
// until ctx ends. coreAPI is nil without a cluster; aggregatedBase is
// --invoke-endpoint-base.
func (o *InvokeOptions) Config(ctx context.Context, coreAPI *rest.Config, aggregatedBase string) (apiserver.InvokeConfig, error) {
	cfg := apiserver.InvokeConfig{MaxTimeout: o.MaxTimeout}
	endpoint, err := o.Endpoint.Config(aggregatedBase)
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
