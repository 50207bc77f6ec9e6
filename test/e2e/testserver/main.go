// Command e2e-testserver is the small HTTP server the e2e suite runs in Pods
// on the local node (image ".../e2e-testserver"). It listens on the Pod IP,
// answers /healthz and /readyz, greets on /, and logs every request to stdout
// so that kubectl logs has something to show.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

func main() {
	var listen, touch string
	fs := pflag.NewFlagSet("e2e-testserver", pflag.ExitOnError)
	fs.StringVar(&listen, "listen", "", "Address to listen on. Defaults to $POD_IP:8080, or 127.0.0.1:8080 without POD_IP.")
	fs.StringVar(&touch, "touch", "", "A file to create at start, e.g. in a shared volume; empty creates none.")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])
	if listen == "" {
		host := os.Getenv("POD_IP")
		if host == "" {
			host = "127.0.0.1"
		}
		listen = net.JoinHostPort(host, "8080")
	}
	if touch != "" {
		if err := os.WriteFile(touch, []byte(os.Getenv("POD_NAME")+"\n"), 0o644); err != nil {
			klog.Background().Error(err, "Creating --touch file")
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("e2e-testserver")
	if err := serve(klog.NewContext(ctx, logger), listen); err != nil {
		logger.Error(err, "Serving")
		os.Exit(1)
	}
}

func serve(ctx context.Context, listen string) error {
	logger := klog.FromContext(ctx)
	pod := os.Getenv("POD_NAME")
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", pod)
	})
	server := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Plain stdout lines: what kubectl logs shows.
			fmt.Printf("request %s %s from %s\n", r.Method, r.URL.Path, r.RemoteAddr)
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Printf("e2e-testserver %s listening on %s\n", pod, l.Addr())
	errCh := make(chan error, 1)
	go func() { errCh <- server.Serve(l) }()
	select {
	case err := <-errCh:
		return err
	case <-ctx.Done():
	}
	fmt.Println("e2e-testserver received SIGTERM, shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Shutting down")
	}
	return nil
}
