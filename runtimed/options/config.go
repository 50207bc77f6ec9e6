package options

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/proto/pki"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/runtimed/invoke"
	"kruntimes.io/kruntimes/runtimed/workspace"
)

// Config is what runtimed runs with, built from its Options: the clients,
// the connection to the Runtime Server, the listeners and the invoke
// server's certificates. Run owns it and releases it when it returns.
type Config struct {
	Pod         runtimepod.Pod
	RuntimeName string
	Capacity    int
	Workspace   workspace.Root
	// RuntimeSocket names the Runtime Server in logs and health checks.
	RuntimeSocket string
	// RuntimeServer is the connection to the Runtime Server.
	RuntimeServer *grpc.ClientConn
	// Kube reaches the Kubernetes API (Leases, Events, the Secrets a
	// Run's env names), Kruntimes the kruntimes.io API (Runs).
	Kube      kubernetes.Interface
	Kruntimes versioned.Interface
	// HealthListener serves /healthz and /readyz, and /metrics when
	// Invoke is nil.
	HealthListener net.Listener
	// Invoke serves the apiserver's invocations; nil turns it off.
	Invoke   *InvokeConfig
	Shutdown ShutdownOptions
	// MaxProcs is GOMAXPROCS unless $GOMAXPROCS is set; 0 leaves it to Go.
	MaxProcs int
}

// InvokeConfig is the invoke server's listener, its mutual TLS (reloaded
// until the context given to Options.Config ends) and its deduplication.
type InvokeConfig struct {
	Listener net.Listener
	TLS      *tls.Config
	// MetricsListener serves /metrics with MetricsTLS: the same serving
	// pair and CA, a scraper's client certificate.
	MetricsListener net.Listener
	MetricsTLS      *tls.Config
	// MaxConcurrentStreams is --invoke-max-concurrent-streams.
	MaxConcurrentStreams uint32
	Dedup                invoke.DedupConfig
}

// Config builds runtimed's configuration from validated options. ctx bounds
// the reloading of the invoke server's certificates.
func (o *Options) Config(ctx context.Context) (_ *Config, err error) {
	c := &Config{
		Pod:           runtimepod.Pod{Name: o.Pod.Name, Namespace: o.Pod.Namespace, UID: types.UID(o.Pod.UID)},
		RuntimeName:   o.Pod.RuntimeName,
		Capacity:      o.Pod.Capacity,
		Workspace:     workspace.Root(o.Runtime.WorkspaceDir),
		RuntimeSocket: o.Runtime.Socket,
		Shutdown:      o.Shutdown,
		MaxProcs:      o.MaxProcs,
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	restConfig, err := o.Client.restConfig("runtimed/" + o.Pod.Name)
	if err != nil {
		return nil, err
	}
	if c.Kube, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, err
	}
	if c.Kruntimes, err = versioned.NewForConfig(o.Client.kruntimesConfig(restConfig)); err != nil {
		return nil, err
	}
	path, _ := runtimepod.SocketPath(o.Runtime.Socket)
	if c.RuntimeServer, err = grpc.NewClient("unix://"+path,
		append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...); err != nil {
		return nil, fmt.Errorf("connect to the Runtime Server at %s: %w", o.Runtime.Socket, err)
	}
	if o.Invoke.CertFile != "" {
		if c.Invoke, err = o.Invoke.config(ctx); err != nil {
			return nil, err
		}
	}
	if c.HealthListener, err = net.Listen("tcp", o.HealthAddress); err != nil {
		return nil, fmt.Errorf("listen on %s for /healthz, /readyz and /metrics: %w; pick another --health-address", o.HealthAddress, err)
	}
	return c, nil
}

// close releases the connection and the listeners.
func (c *Config) close() {
	if c.RuntimeServer != nil {
		_ = c.RuntimeServer.Close()
	}
	if c.Invoke != nil {
		_ = c.Invoke.Listener.Close()
		_ = c.Invoke.MetricsListener.Close()
	}
	if c.HealthListener != nil {
		_ = c.HealthListener.Close()
	}
}

func (o *InvokeOptions) config(ctx context.Context) (*InvokeConfig, error) {
	serverTLS, err := pki.ServerTLS(ctx, o.CertFile, o.KeyFile, o.ClientCAFile, invocation.ClientCommonName)
	if err != nil {
		return nil, err
	}
	metricsTLS, err := pki.MetricsServerTLS(ctx, o.CertFile, o.KeyFile, o.ClientCAFile, invocation.MetricsClientCommonName)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s for invocations: %w; pick another --invoke-address", o.Address, err)
	}
	metricsLis, err := net.Listen("tcp", o.MetricsAddress)
	if err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("listen on %s for /metrics: %w; pick another --metrics-address", o.MetricsAddress, err)
	}
	d := o.Dedup
	return &InvokeConfig{Listener: lis, TLS: serverTLS, MetricsListener: metricsLis, MetricsTLS: metricsTLS, MaxConcurrentStreams: o.MaxConcurrentStreams,
		Dedup: invoke.DedupConfig{Window: d.Window, MaxEntries: d.MaxEntries, MaxBytes: d.MaxBytes, MaxPodBytes: d.MaxPodBytes}}, nil
}

// restConfig is the client configuration: --kubeconfig, $KUBECONFIG or the
// Pod's service account, speaking protobuf.
func (o *ClientOptions) restConfig(userAgent string) (*rest.Config, error) {
	loader := clientcmd.NewDefaultClientConfigLoadingRules()
	loader.ExplicitPath = o.Kubeconfig
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loader, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load the Kubernetes client configuration: %w; pass --kubeconfig or run in a Pod with a service account", err)
	}
	restConfig.UserAgent = userAgent
	restConfig.QPS, restConfig.Burst = o.QPS, o.Burst
	// Protobuf on the wire, as Kubernetes' own components: every event of
	// runtimed's watch is decoded, at a tenth of JSON's cost.
	restConfig.ContentType = runtime.ContentTypeProtobuf
	restConfig.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return restConfig, nil
}

// kruntimesConfig is restConfig for the kruntimes.io API: the same
// credentials and limits, at --kruntimes-api-server when it is set, which
// is verified with $KRUNTIMES_API_CA alone.
func (o *ClientOptions) kruntimesConfig(restConfig *rest.Config) *rest.Config {
	if o.KruntimesAPIServer == "" {
		return restConfig
	}
	c := rest.CopyConfig(restConfig)
	c.Host = o.KruntimesAPIServer
	c.TLSClientConfig.CAFile, c.TLSClientConfig.CAData = "", []byte(o.KruntimesAPICA)
	c.TLSClientConfig.ServerName, c.TLSClientConfig.Insecure = "", false
	return c
}
