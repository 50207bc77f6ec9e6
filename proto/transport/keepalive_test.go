package transport_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	"kruntimes.io/kruntimes/proto/transport"
)

// runtimed answers "quick" at once and holds any other invocation until
// its call ends; it counts what it received.
type runtimed struct {
	runtimedv1.UnimplementedRuntimedServer
	received atomic.Int32
	holding  chan struct{}
}

func (r *runtimed) Invoke(ctx context.Context, req *runtimedv1.InvokeRequest) (*runtimedv1.InvokeResponse, error) {
	r.received.Add(1)
	if req.GetInvocationId() == "quick" {
		return &runtimedv1.InvokeResponse{InvocationId: "quick"}, nil
	}
	r.holding <- struct{}{}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// silentProxy forwards loopback TCP to target until silence is turned on;
// from then on it reads and drops every byte, answers nothing, and holds
// new connections open without forwarding them: a node that powered off
// or was cut off, as seen from the apiserver (no reset, no FIN).
type silentProxy struct {
	lis    net.Listener
	target string
	silent atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &silentProxy{lis: lis, target: target}
	go p.accept()
	t.Cleanup(func() {
		_ = lis.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *silentProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *silentProxy) accept() {
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.track(client)
		if p.silent.Load() {
			go func() { _, _ = io.Copy(io.Discard, client) }()
			continue
		}
		backend, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(backend)
		go p.pipe(backend, client)
		go p.pipe(client, backend)
	}
}

// pipe copies from src to dst until silence, then drops what src sends.
func (p *silentProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestKeepaliveFindsASilentRuntimed: with RuntimedDialOptions, a runtimed
// that goes silent mid-invocation costs the invocation in flight an
// Unavailable within the keepalive bound (not its whole deadline), and the
// next invocation is refused without being sent (no peer: the apiserver's
// 503 + Retry-After) within the connect bound.
func TestKeepaliveFindsASilentRuntimed(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	server := &runtimed{holding: make(chan struct{}, 1)}
	gs := grpc.NewServer(transport.RuntimedServerOptions()...)
	runtimedv1.RegisterRuntimedServer(gs, server)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })

	proxy := newSilentProxy(t, lis.Addr().String())
	conn, err := grpc.NewClient(proxy.lis.Addr().String(), append(transport.RuntimedDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := runtimedv1.NewRuntimedClient(conn)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = client.Invoke(ctx, &runtimedv1.InvokeRequest{InvocationId: "quick"})
	require.NoError(t, err, "the connection works through the proxy")

	inFlight := make(chan error, 1)
	go func() {
		_, err := client.Invoke(ctx, &runtimedv1.InvokeRequest{InvocationId: "slow"})
		inFlight <- err
	}()
	select {
	case <-server.holding:
	case <-ctx.Done():
		t.Fatal("the slow invocation never reached runtimed")
	}
	proxy.silent.Store(true)
	silenced := time.Now()

	bound := transport.KeepaliveTime + transport.KeepaliveTimeout + 5*time.Second
	select {
	case err := <-inFlight:
		took := time.Since(silenced)
		assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.Less(t, took, bound, "found within the keepalive bound")
		t.Logf("the invocation in flight ended %s after runtimed went silent: %v", took.Round(time.Millisecond), err)
	case <-time.After(bound):
		t.Fatalf("the invocation in flight was still waiting %s after runtimed went silent", bound)
	}

	received := server.received.Load()
	var sentTo peer.Peer
	nextStarted := time.Now()
	_, err = client.Invoke(ctx, &runtimedv1.InvokeRequest{InvocationId: "next"}, grpc.Peer(&sentTo))
	took := time.Since(nextStarted)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Nil(t, sentTo.Addr, "the next invocation was never sent: the apiserver answers 503 + Retry-After")
	assert.Less(t, took, transport.ConnectTimeout+5*time.Second, "refused within the connect bound")
	assert.Equal(t, received, server.received.Load(), "runtimed received nothing more")
	t.Logf("the next invocation was refused after %s: %v", took.Round(time.Millisecond), err)
	assert.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
}
