package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Check is one named readiness or liveness check; nil means healthy.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// checkTimeout bounds one check so a hung dependency fails /readyz rather
// than hanging the kubelet's probe.
const checkTimeout = 2 * time.Second

// Handler returns the mux with /healthz (liveness) and /readyz
// (readiness), and with metrics also /metrics.
func Handler(liveness, readiness []Check, metrics bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", checksHandler(liveness))
	mux.Handle("/readyz", checksHandler(readiness))
	if metrics {
		mux.Handle("/metrics", legacyregistry.Handler())
	}
	return mux
}

// MetricsHandler returns the mux with /metrics alone.
func MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	return mux
}

func checksHandler(checks []Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		var report strings.Builder
		failed := false
		for _, c := range checks {
			if err := c.Check(ctx); err != nil {
				failed = true
				fmt.Fprintf(&report, "[-]%s failed: %v\n", c.Name, err)
				continue
			}
			fmt.Fprintf(&report, "[+]%s ok\n", c.Name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			report.WriteString("check failed\n")
		} else {
			report.WriteString("ok\n")
		}
		_, _ = w.Write([]byte(report.String()))
	})
}

// Serve serves handler on lis until ctx ends, and closes lis.
func Serve(ctx context.Context, lis net.Listener, handler http.Handler) error {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	klog.FromContext(ctx).Info("Serving health or metrics", "address", lis.Addr().String())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", lis.Addr(), err)
	}
	return nil
}
