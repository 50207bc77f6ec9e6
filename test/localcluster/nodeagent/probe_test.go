package nodeagent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func listenerPort(t *testing.T, addr net.Addr) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr.String())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return int32(p)
}

func TestProbeOnce(t *testing.T) {
	httpServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(httpServer.Close)
	httpPort := listenerPort(t, httpServer.Listener.Addr())

	grpcListener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	grpcServer := grpc.NewServer()
	healthServer := health.NewServer()
	healthServer.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	healthServer.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	go func() { _ = grpcServer.Serve(grpcListener) }()
	t.Cleanup(grpcServer.Stop)
	grpcPort := listenerPort(t, grpcListener.Addr())

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := listenerPort(t, closed.Addr())
	closed.Close()

	tests := []struct {
		name    string
		handler corev1.ProbeHandler
		wantErr bool
	}{
		{"HTTP 200 passes", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(httpPort)}}, false},
		{"HTTP 503 fails", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/bad", Port: intstr.FromInt32(httpPort)}}, true},
		{"HTTP on a named port resolves it", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}, false},
		{"unknown named port fails", corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("nope")}}, true},
		{"TCP to a listener passes", corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(httpPort)}}, false},
		{"TCP to a closed port fails", corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(closedPort)}}, true},
		{"gRPC SERVING passes", corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: grpcPort, Service: ptr.To("up")}}, false},
		{"gRPC NOT_SERVING fails", corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: grpcPort, Service: ptr.To("down")}}, true},
		{"exec exit 0 passes", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, false},
		{"exec exit 1 fails", corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &podRunner{podIP: "127.0.0.1", dir: t.TempDir(), pod: &corev1.Pod{}}
			c := &containerRunner{pod: p, spec: corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort}}}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := c.probeOnce(ctx, &corev1.Probe{ProbeHandler: tc.handler, TimeoutSeconds: 2})
			if tc.wantErr {
				assert.Error(t, err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
