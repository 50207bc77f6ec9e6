package invokerouter

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/runtimepod"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	"kruntimes.io/kruntimes/proto/transport"
)

// runtimedConns keeps one gRPC connection per runtimed, so an invocation
// pays no connection setup; a connection goes when its Pod does.
type runtimedConns struct {
	tls *tls.Config

	mu    sync.Mutex
	conns map[connKey]*grpc.ClientConn
}

// connKey is one runtimed: the Pod IP and the name its serving certificate
// is verified for, which is its Runtime's.
type connKey struct {
	ip, serverName string
}

func newRuntimedConns(clientTLS *tls.Config) *runtimedConns {
	return &runtimedConns{tls: clientTLS, conns: map[connKey]*grpc.ClientConn{}}
}

// client returns the client of the runtimed at ip serving the Runtime
// runtime of namespace.
func (d *runtimedConns) client(ip, namespace, runtime string) (runtimedv1.RuntimedClient, error) {
	key := connKey{ip: ip, serverName: invocation.ServerName(namespace, runtime)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if conn, ok := d.conns[key]; ok {
		return runtimedv1.NewRuntimedClient(conn), nil
	}
	cfg := d.tls.Clone()
	cfg.ServerName = key.serverName
	conn, err := grpc.NewClient(net.JoinHostPort(ip, strconv.Itoa(runtimepod.RuntimedInvokePort)),
		append(transport.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
	if err != nil {
		return nil, fmt.Errorf("connect to runtimed at %s: %w", ip, err)
	}
	d.conns[key] = conn
	return runtimedv1.NewRuntimedClient(conn), nil
}

// forgetPod closes the connections to a Pod that is gone or lost its IP.
func (d *runtimedConns) forgetPod(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Status.PodIP == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, conn := range d.conns {
		if key.ip == pod.Status.PodIP {
			_ = conn.Close()
			delete(d.conns, key)
		}
	}
}

// close closes every connection.
func (d *runtimedConns) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, conn := range d.conns {
		_ = conn.Close()
		delete(d.conns, key)
	}
}

// podUpdated closes the connections of a Pod's old IP when an update
// changed it.
func (d *runtimedConns) podUpdated(old, cur any) {
	oldPod, ok1 := old.(*corev1.Pod)
	curPod, ok2 := cur.(*corev1.Pod)
	if ok1 && ok2 && oldPod.Status.PodIP != curPod.Status.PodIP {
		d.forgetPod(oldPod)
	}
}
