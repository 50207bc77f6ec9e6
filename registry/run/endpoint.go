package run

import (
	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
)

// Endpoint is what this server advertises in status.endpoint of a Ready
// function Run. The runs/status strategy writes it over whatever a status
// writer sent, so no runtimed can point callers at a URL of its own.
type Endpoint struct {
	// Base is the scheme and authority callers reach runs/invoke at:
	// kube-apiserver's for the aggregated entry point, this server's
	// Service for the direct one.
	Base string
	// CABundle is the PEM bundle that verifies Base's serving certificate;
	// empty when callers already trust it (the cluster's root).
	CABundle []byte
}

// of returns the endpoint of run.
func (e Endpoint) of(run *kruntimes.Run) *kruntimes.RunEndpoint {
	return &kruntimes.RunEndpoint{
		Protocol: kruntimes.RunEndpointProtocolHTTPS,
		URL:      invocation.EndpointURL(e.Base, run.Namespace, run.Name, string(run.UID)),
		CABundle: e.CABundle,
	}
}
