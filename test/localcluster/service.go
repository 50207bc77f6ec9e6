package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// serviceProbePeriod is how often the front probes each replica's /readyz,
// as a kubelet's readiness probe would (at a far shorter period).
const serviceProbePeriod = 250 * time.Millisecond

// serviceProbeFailureThreshold is how many probes in a row must go
// unanswered before a replica that was ready is taken out, as a kubelet's
// failureThreshold (3 by default): one slow answer on a busy machine does
// not empty the Service. A replica that answers "not ready", or whose port
// refuses connections, is taken out at once.
const serviceProbeFailureThreshold = 3

// serviceFront stands in for a ClusterIP Service in front of the
// kruntimes-apiserver replicas, which the local cluster has no kube-proxy
// for: it hands each new TCP connection to the next replica whose /readyz
// answered 200 at the last probe, and copies bytes both ways. TLS passes
// through, so the aggregator verifies the replica's own serving
// certificate. Like a Service, it never moves a connection: one that a
// replica closes stays closed, and the client opens a new one.
type serviceFront struct {
	listener net.Listener
	backends []string
	probe    *http.Client

	mu    sync.Mutex
	ready []bool
	// unanswered counts each replica's probes in a row that got no answer.
	unanswered []int
	next       int

	wg sync.WaitGroup
}

// startServiceFront listens on address and forwards to backends (host:port
// each), probing https://<backend>/readyz with tlsConfig until ctx ends.
func startServiceFront(ctx context.Context, address string, backends []string, tlsConfig *tls.Config) (*serviceFront, error) {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	f := &serviceFront{
		listener:   listener,
		backends:   backends,
		ready:      make([]bool, len(backends)),
		unanswered: make([]int, len(backends)),
		probe: &http.Client{Timeout: serviceProbePeriod * 4, Transport: &http.Transport{
			TLSClientConfig: tlsConfig, DisableKeepAlives: true,
		}},
	}
	f.probeAll(ctx)
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		ticker := time.NewTicker(serviceProbePeriod)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				f.probeAll(ctx)
			}
		}
	}()
	go func() {
		defer f.wg.Done()
		f.serve(ctx)
	}()
	go func() {
		<-ctx.Done()
		_ = listener.Close()
	}()
	return f, nil
}

// Addr is where the front listens.
func (f *serviceFront) Addr() string { return f.listener.Addr().String() }

// wait returns once the front stopped after its context ended.
func (f *serviceFront) wait() { f.wg.Wait() }

func (f *serviceFront) probeAll(ctx context.Context) {
	var wg sync.WaitGroup
	results := make([]probeResult, len(f.backends))
	for i, backend := range f.backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = f.readyz(ctx, backend)
		}()
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, result := range results {
		switch result {
		case probeReady:
			f.ready[i], f.unanswered[i] = true, 0
		case probeNotReady:
			f.ready[i], f.unanswered[i] = false, 0
		case probeUnanswered:
			f.unanswered[i]++
			if f.unanswered[i] >= serviceProbeFailureThreshold {
				f.ready[i] = false
			}
		}
	}
}

type probeResult int

const (
	probeReady probeResult = iota
	// probeNotReady: the replica answered other than 200, or its port
	// refused the connection (no process listens).
	probeNotReady
	// probeUnanswered: no answer in time, or another failure.
	probeUnanswered
)

func (f *serviceFront) readyz(ctx context.Context, backend string) probeResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+backend+"/readyz", nil)
	if err != nil {
		return probeUnanswered
	}
	resp, err := f.probe.Do(req)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return probeNotReady
	}
	if err != nil {
		return probeUnanswered
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return probeNotReady
	}
	return probeReady
}

// pick returns the next ready backend, round robin; false when none is.
func (f *serviceFront) pick() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range f.backends {
		i := f.next
		f.next = (f.next + 1) % len(f.backends)
		if f.ready[i] {
			return f.backends[i], true
		}
	}
	return "", false
}

func (f *serviceFront) serve(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		conn, err := f.listener.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				logger.Error(err, "Service front stopped accepting")
			}
			return
		}
		backend, ok := f.pick()
		if !ok {
			// A Service without ready endpoints: the connection is refused.
			_ = conn.Close()
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			forward(ctx, conn, backend)
		}()
	}
}

// forward copies conn to and from a new connection to backend until
// either side closes (or ctx ends).
func forward(ctx context.Context, conn net.Conn, backend string) {
	defer conn.Close()
	dialer := net.Dialer{Timeout: 2 * time.Second}
	upstream, err := dialer.DialContext(ctx, "tcp", backend)
	if err != nil {
		return
	}
	defer upstream.Close()
	stop := context.AfterFunc(ctx, func() {
		_ = conn.Close()
		_ = upstream.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Pass the close on, so each side sees the other hang up.
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go copyHalf(upstream, conn)
	go copyHalf(conn, upstream)
	<-done
	<-done
}
