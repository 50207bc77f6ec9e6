package invoke

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
)

// Config wires the invoke subresource.
type Config struct {
	// Runs is this server's runs storage.
	Runs RunSource
	// Kube reaches the cluster's Pods; nil turns invoke off (a standalone
	// server has no Pods).
	Kube kubernetes.Interface
	// ClientTLS dials runtimed (invoke.ClientTLS); nil turns invoke off.
	ClientTLS *tls.Config
	// MaxTimeout bounds every invocation; invocation.DefaultMaxTimeout when zero.
	MaxTimeout time.Duration
}

// REST serves runs/invoke.
type REST struct {
	cache      *ownershipCache
	conns      *runtimedConns
	maxTimeout time.Duration
	// off says why invoke is turned off; empty when it is on.
	off string
}

var (
	_ rest.Connecter = &REST{}
	_ rest.Storage   = &REST{}
)

// NewREST returns the subresource; call Start before serving.
func NewREST(cfg Config) *REST {
	registerMetrics()
	r := &REST{maxTimeout: cfg.MaxTimeout}
	if r.maxTimeout <= 0 {
		r.maxTimeout = invocation.DefaultMaxTimeout
	}
	switch {
	case cfg.Kube == nil:
		r.off = "invoke needs the cluster's Pods, and this server runs without a cluster (--standalone)"
		return r
	case cfg.ClientTLS == nil:
		r.off = "invoke is not configured: kruntimes-apiserver has no client certificate for runtimed (--runtimed-client-cert-file)"
		return r
	}
	r.cache = newOwnershipCache(cfg.Runs, cfg.Kube)
	r.conns = newRuntimedConns(cfg.ClientTLS)
	_, _ = r.cache.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: r.conns.podUpdated,
		DeleteFunc: r.conns.forgetPod,
	})
	return r
}

// Start fills the ownership cache and keeps it current until ctx ends.
func (r *REST) Start(ctx context.Context) {
	if r.cache == nil {
		klog.FromContext(ctx).Info("runs/invoke is off", "why", r.off)
		return
	}
	go func() {
		if r.cache.run(ctx) {
			klog.FromContext(ctx).Info("runs/invoke ownership cache synced")
		}
		<-ctx.Done()
		r.conns.close()
	}()
}

// New returns the kind of what an invocation answers.
func (r *REST) New() runtime.Object { return &kruntimes.InvokeResult{} }

// Destroy does nothing: Start's context stops everything.
func (r *REST) Destroy() {}

// ConnectMethods implements rest.Connecter: an invocation is a POST.
func (r *REST) ConnectMethods() []string { return []string{http.MethodPost} }

// NewConnectOptions implements rest.Connecter: ?uid= and ?timeout=.
func (r *REST) NewConnectOptions() (runtime.Object, bool, string) {
	return &kruntimes.RunInvokeOptions{}, false, ""
}

// Connect implements rest.Connecter.
func (r *REST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	options, _ := opts.(*kruntimes.RunInvokeOptions)
	if options == nil {
		options = &kruntimes.RunInvokeOptions{}
	}
	// The namespace is on ctx, not on the request the handler serves.
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	return &handler{rest: r, namespace: namespace, name: name, uid: types.UID(options.UID), responder: responder}, nil
}
