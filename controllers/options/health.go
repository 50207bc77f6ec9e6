package options

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/component-base/metrics/legacyregistry"
)

// healthShutdownTimeout bounds how long a probe or scrape in flight may
// finish once the controllers stop.
const healthShutdownTimeout = 5 * time.Second

// healthHandler answers liveness probes on /healthz and exposes the
// controllers' metrics on /metrics, from the pieces kube-controller-manager's
// base handler is made of (k8s.io/controller-manager/app.NewBaseHandler).
func healthHandler() http.Handler {
	paths := mux.NewPathRecorderMux("kruntimes-controllers")
	healthz.InstallHandler(paths, healthz.PingHealthz)
	paths.Handle("/metrics", legacyregistry.Handler())
	return paths
}

// serveHealth serves healthHandler on address until ctx ends. It is plain
// HTTP, as --health-address promises, so that kubelet probes and scrapers
// need no credentials; it serves nothing but health and metrics.
func serveHealth(ctx context.Context, address string) error {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listening on --health-address %s: %w", address, err)
	}
	serving := &genericapiserver.DeprecatedInsecureServingInfo{Listener: l, Name: "health and metrics"}
	return serving.Serve(healthHandler(), healthShutdownTimeout, ctx.Done())
}
