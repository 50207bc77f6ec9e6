package nodeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"k8s.io/klog/v2"
)

// logFollowPoll is how often a followed log is checked for new output.
const logFollowPoll = 200 * time.Millisecond

// startKubeletAPI serves the part of the kubelet API that kube-apiserver
// proxies to: /containerLogs for kubectl logs, and /healthz. Only clients
// with a certificate from ClientCAFile and a CN in AllowedClients get in.
func (a *Agent) startKubeletAPI(ctx context.Context) (*http.Server, error) {
	cert, err := tls.LoadX509KeyPair(a.cfg.ServingCert, a.cfg.ServingKey)
	if err != nil {
		return nil, fmt.Errorf("loading kubelet serving certificate: %w", err)
	}
	caPEM, err := os.ReadFile(a.cfg.ClientCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificates in %s", a.cfg.ClientCAFile)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", a.serveContainerLogs)
	server := &http.Server{
		Handler: a.authorizeClient(mux),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			MinVersion:   tls.VersionTLS12,
		},
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a.cfg.KubeletPort)))
	if err != nil {
		return nil, fmt.Errorf("kubelet API: %w", err)
	}
	go func() {
		if err := server.ServeTLS(listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Kubelet API stopped")
		}
	}()
	return server, nil
}

func (a *Agent) authorizeClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 ||
			!slices.Contains(a.cfg.AllowedClients, r.TLS.PeerCertificates[0].Subject.CommonName) {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) findContainer(namespace, pod, container string) (*containerRunner, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.runners {
		p := r.currentPod()
		if p.Namespace != namespace || p.Name != pod {
			continue
		}
		for _, c := range append(append([]*containerRunner{}, r.containers...), r.initContainers...) {
			if c.spec.Name == container {
				return c, nil
			}
		}
		return nil, fmt.Errorf("container %q not found in pod %s/%s", container, namespace, pod)
	}
	return nil, fmt.Errorf("pod %s/%s is not running on this node", namespace, pod)
}

// serveContainerLogs implements GET /containerLogs/{ns}/{pod}/{container}
// with the query parameters kube-apiserver passes: follow, previous,
// tailLines and limitBytes.
func (a *Agent) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	c, err := a.findContainer(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	previous := q.Get("previous") == "true"
	follow := q.Get("follow") == "true" && !previous
	path, finished, err := c.currentLog(previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	if n, err := strconv.Atoi(q.Get("tailLines")); err == nil && n >= 0 {
		if err := seekTailLines(f, n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	var out io.Writer = w
	if n, err := strconv.ParseInt(q.Get("limitBytes"), 10, 64); err == nil && n > 0 {
		out = &limitedWriter{w: w, left: n}
	}
	w.Header().Set("Content-Type", "text/plain")
	flusher, _ := w.(http.Flusher)
	for {
		if _, err := io.Copy(out, f); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow || finished() {
			// One more copy catches output written just before exit.
			_, _ = io.Copy(out, f)
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(logFollowPoll):
		}
	}
}

// seekTailLines positions f at the start of its last n lines.
func seekTailLines(f *os.File, n int) error {
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	pos := len(data)
	if n == 0 {
		_, err = f.Seek(int64(pos), io.SeekStart)
		return err
	}
	lines := 0
	pos = 0
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			lines++
			if lines == n {
				pos = i + 1
				break
			}
		}
	}
	_, err = f.Seek(int64(pos), io.SeekStart)
	return err
}

type limitedWriter struct {
	w    io.Writer
	left int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}
