package invokerouter

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/apiserver/logfanout"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	"kruntimes.io/kruntimes/client/tombstone"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	"kruntimes.io/kruntimes/proto/transport"
)

// goneMemory is how long a removed Pod's UID is remembered: longer than a
// Route takes between reading the cache and asking for the Pod's
// connection, so a Route that raced the removal does not dial a connection
// nobody would close.
const goneMemory = 5 * time.Minute

// runtimedConns keeps one gRPC connection per Runtime Pod, keyed by Pod
// UID, so an invocation pays no connection setup; a connection goes when
// its Pod does, and only its own: Pods of other Runtimes that shared or
// later reuse its IP keep theirs.
type runtimedConns struct {
	tls   *tls.Config
	clock clock.PassiveClock
	// fanout is every client's: the follows of one attempt share one
	// stream, whichever Pod connection they came through.
	fanout *logfanout.Fanout

	mu    sync.Mutex
	conns map[types.UID]*podConn
	// gone holds the UIDs of removed Pods, each until it may be forgotten.
	gone   map[types.UID]time.Time
	closed bool
}

// podConn is the connection to one Pod's runtimed: at the Pod's IP,
// verified for the name of its Runtime's serving certificate.
type podConn struct {
	ip, serverName string
	conn           *grpc.ClientConn
	// client is conn's, made once: an invocation allocates none.
	client *runtimedclient.Client
}

func newRuntimedConns(clientTLS *tls.Config, clk clock.PassiveClock) *runtimedConns {
	return &runtimedConns{tls: clientTLS, clock: clk, fanout: logfanout.New(logfanout.DefaultWindowBytes), conns: map[types.UID]*podConn{}, gone: map[types.UID]time.Time{}}
}

// client returns the client of the runtimed of Pod podUID, at ip, serving
// the Runtime runtime of namespace. A Pod already removed gets none.
func (d *runtimedConns) client(podUID types.UID, ip, namespace, runtime string) (*runtimedclient.Client, error) {
	serverName := invocation.ServerName(namespace, runtime)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch until, gone := d.gone[podUID]; {
	case d.closed:
		return nil, fmt.Errorf("invoke routing is stopping")
	case gone && d.clock.Now().Before(until):
		return nil, fmt.Errorf("Pod %s was removed a moment ago; retry shortly", podUID)
	case gone:
		delete(d.gone, podUID)
	}
	if c, ok := d.conns[podUID]; ok {
		if c.ip == ip && c.serverName == serverName {
			return c.client, nil
		}
		// The Pod has another IP now (its update may not have arrived
		// yet): the old address is someone else's.
		_ = c.conn.Close()
		delete(d.conns, podUID)
	}
	cfg := d.tls.Clone()
	cfg.ServerName = serverName
	conn, err := grpc.NewClient(net.JoinHostPort(ip, strconv.Itoa(runtimepod.RuntimedInvokePort)),
		append(transport.RuntimedDialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
	if err != nil {
		return nil, fmt.Errorf("connect to runtimed at %s: %w", ip, err)
	}
	c := &podConn{ip: ip, serverName: serverName, conn: conn, client: runtimedclient.New(runtimedv1.NewRuntimedClient(conn), d.fanout)}
	d.conns[podUID] = c
	return c.client, nil
}

// warm opens the connection to the runtimed of Pod podUID ahead of its
// first invocation (the TLS handshake included), so the first call to a
// function that just moved there pays no connection setup. A connection
// carries no ownership: every invocation still carries the fencing tuple,
// which runtimed checks.
func (d *runtimedConns) warm(podUID types.UID, ip, namespace, runtime string) {
	if _, err := d.client(podUID, ip, namespace, runtime); err != nil {
		return // removed or stopping: the first invocation says why
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[podUID]; ok {
		c.conn.Connect()
	}
}

// forgetPod closes the connection to a Pod that is gone and remembers its
// UID for goneMemory.
func (d *runtimedConns) forgetPod(obj any) {
	pod, ok := tombstone.As[*corev1.Pod](obj)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeLocked(pod.UID)
	now := d.clock.Now()
	for uid, until := range d.gone {
		if !now.Before(until) {
			delete(d.gone, uid)
		}
	}
	d.gone[pod.UID] = now.Add(goneMemory)
}

// podUpdated closes a Pod's connection when an update changed its IP; the
// next invocation dials the new one.
func (d *runtimedConns) podUpdated(old, cur any) {
	oldPod, ok1 := old.(*corev1.Pod)
	curPod, ok2 := cur.(*corev1.Pod)
	if ok1 && ok2 && oldPod.Status.PodIP != curPod.Status.PodIP {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.closeLocked(curPod.UID)
	}
}

func (d *runtimedConns) closeLocked(uid types.UID) {
	if c, ok := d.conns[uid]; ok {
		_ = c.conn.Close()
		delete(d.conns, uid)
	}
}

// close closes every connection; no other is made afterwards.
func (d *runtimedConns) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for uid := range d.conns {
		d.closeLocked(uid)
	}
}
