package options

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	runregistry "kruntimes.io/kruntimes/registry/run"
)

// Entry points status.endpoint may advertise.
const (
	EndpointAggregated = "aggregated"
	EndpointDirect     = "direct"
)

// EndpointOptions choose the URL (and CA) Ready function Runs advertise in
// status.endpoint. They are its one source: the runs/status strategy writes
// it, whatever a status writer sends, and nothing of it reaches a Runtime
// Pod, so changing them rolls no Pod.
type EndpointOptions struct {
	// Mode is EndpointAggregated or EndpointDirect.
	Mode string
	// AggregatedBase is kube-apiserver as callers reach it.
	AggregatedBase string
	// DirectBase is this server's Service as callers reach it.
	DirectBase string
	// DirectCAFile verifies DirectBase's serving certificate; it becomes
	// status.endpoint.caBundle. Required with EndpointDirect.
	DirectCAFile string
}

// NewEndpointOptions returns the default: the aggregated entry point.
func NewEndpointOptions() *EndpointOptions {
	return &EndpointOptions{Mode: EndpointAggregated, AggregatedBase: invocation.DefaultAggregatedBase, DirectBase: invocation.DefaultDirectBase}
}

// AddFlags registers the endpoint flags.
func (o *EndpointOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Mode, "invoke-endpoint", o.Mode,
		"The entry point Ready function Runs advertise in status.endpoint: \"aggregated\" (through kube-apiserver, at --invoke-endpoint-base, audited and flow-controlled by kube-apiserver too) or \"direct\" (this server's Service at --invoke-direct-endpoint-base, audited and flow-controlled by this server only). Both entry points serve runs/invoke either way.")
	fs.StringVar(&o.AggregatedBase, "invoke-endpoint-base", o.AggregatedBase,
		"Scheme and host of the Kubernetes API as clients reach it, which Ready function Runs advertise in status.endpoint.url with --invoke-endpoint=aggregated; "+invocation.DefaultAggregatedBase+" when empty.")
	fs.StringVar(&o.DirectBase, "invoke-direct-endpoint-base", o.DirectBase,
		"Scheme and host of this server's Service as callers inside the cluster reach it, for --invoke-endpoint=direct.")
	fs.StringVar(&o.DirectCAFile, "invoke-direct-endpoint-ca-file", o.DirectCAFile,
		"PEM bundle that verifies this server's serving certificate under --invoke-direct-endpoint-base; copied into status.endpoint.caBundle. Required with --invoke-endpoint=direct.")
}

// Validate checks the flags.
func (o *EndpointOptions) Validate() []error {
	var errs []error
	switch o.Mode {
	case EndpointAggregated:
		if o.AggregatedBase != "" {
			if err := validateBase(o.AggregatedBase); err != nil {
				errs = append(errs, fmt.Errorf("--invoke-endpoint-base: %w", err))
			}
		}
	case EndpointDirect:
		if o.DirectCAFile == "" {
			errs = append(errs, fmt.Errorf("--invoke-endpoint=direct needs --invoke-direct-endpoint-ca-file: callers must be able to verify this server"))
		}
		if err := validateBase(o.DirectBase); err != nil {
			errs = append(errs, fmt.Errorf("--invoke-direct-endpoint-base: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("--invoke-endpoint must be %q or %q, got %q", EndpointAggregated, EndpointDirect, o.Mode))
	}
	return errs
}

// Config returns the endpoint Ready function Runs advertise.
func (o *EndpointOptions) Config() (runregistry.Endpoint, error) {
	if o.Mode != EndpointDirect {
		base := o.AggregatedBase
		if base == "" {
			base = invocation.DefaultAggregatedBase
		}
		return runregistry.Endpoint{Base: strings.TrimSuffix(base, "/")}, nil
	}
	ca, err := os.ReadFile(o.DirectCAFile)
	if err != nil {
		return runregistry.Endpoint{}, fmt.Errorf("--invoke-direct-endpoint-ca-file: %w", err)
	}
	if len(ca) > validation.MaxEndpointCABytes {
		return runregistry.Endpoint{}, fmt.Errorf("--invoke-direct-endpoint-ca-file %s has %d bytes; status.endpoint.caBundle holds at most %d", o.DirectCAFile, len(ca), validation.MaxEndpointCABytes)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return runregistry.Endpoint{}, fmt.Errorf("--invoke-direct-endpoint-ca-file %s holds no PEM certificate", o.DirectCAFile)
	}
	return runregistry.Endpoint{Base: strings.TrimSuffix(o.DirectBase, "/"), CABundle: ca}, nil
}

func validateBase(base string) error {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.TrimSuffix(u.Path, "/") != "" {
		return fmt.Errorf("must be https://host[:port] with no path, got %q", base)
	}
	return nil
}
