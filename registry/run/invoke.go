package run

import (
	"context"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/toolschema"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

// Router finds the runtimed that owns a function Run, as a
// ConnectionInfoGetter finds a Pod's kubelet for pods/exec. It answers from
// memory: no storage read and no Kubernetes API call per invocation.
type Router interface {
	// Route says where an invocation of the Run namespace/name goes; uid,
	// when set, must be the Run's. Its errors are API errors, and nothing
	// ran when it returns one: NotFound (no such Run, or uid names an
	// earlier one), BadRequest (a task Run), Conflict (the Run ended or is
	// being deleted), NotImplemented (invoke is off), ServiceUnavailable
	// (not Ready, being recovered, or routing is starting; marked
	// runtimedclient.ErrBecomingReady for a function Run on its way to
	// Ready).
	Route(ctx context.Context, namespace, name string, uid types.UID) (*Route, error)
}

// A RouteWaiter is a Router that tells when a Run's route may have changed,
// so that an invocation of a function on its way to Ready waits for it
// instead of answering 503 at once.
type RouteWaiter interface {
	// RouteChanged returns a channel closed at the router's next change of
	// the Run namespace/name (a task Run's too) or of a Runtime Pod, and a
	// func that gives the channel up.
	RouteChanged(namespace, name string) (changed <-chan struct{}, stop func())
}

// Route is where one invocation goes: the owning runtimed, and the fencing
// tuple it checks against its own live registration.
type Route struct {
	RunUID  types.UID
	Attempt int32
	PodUID  types.UID
	// Deadline is when the Run's spec.timeout ends; zero when it has none.
	Deadline time.Time
	// Runtimed is the client of the runtimed in the owning Pod.
	Runtimed runtimedclient.Interface
	// Input validates the invocation's body before dispatch: the Run's
	// compiled spec.mode.function.schema.input, nil when it has none.
	Input *toolschema.Validator
}

// InvokeREST serves runs/invoke: the function's JSON input in, the
// handler's InvokeResult or a metav1.Status that says whether it ran out.
type InvokeREST struct {
	router Router
	// maxTimeout bounds every invocation, whatever its request asks.
	maxTimeout time.Duration
	// waitForReady is how long an invocation of a function on its way to
	// Ready waits for it; zero answers 503 at once.
	waitForReady time.Duration
	// waiting bounds the invocations that wait at once for one Run.
	waiting *waitingInvocations
}

var (
	_ rest.Connecter = &InvokeREST{}
	_ rest.Storage   = &InvokeREST{}
)

// InvokeSettings bound runs/invoke's invocations.
type InvokeSettings struct {
	// MaxTimeout bounds every invocation, whatever its request asks;
	// invocation.DefaultMaxTimeout when zero.
	MaxTimeout time.Duration
	// WaitForReady is how long an invocation of a function on its way to
	// Ready (runtimedclient.ErrBecomingReady, or its runtimed refused it before it
	// started) waits for the Run to be routable, at most half of the
	// request's time; zero answers 503 + Retry-After at once.
	WaitForReady time.Duration
	// MaxWaitingPerRun bounds the invocations that wait at once for one
	// Run, each holding its input; one more is answered 429 + Retry-After
	// at once. DefaultMaxWaitingPerRun when zero.
	MaxWaitingPerRun int
}

// DefaultMaxWaitingPerRun is InvokeSettings.MaxWaitingPerRun's default:
// a function's callers retry while it registers, and each waiting one
// holds up to invocation.MaxInputBytes here.
const DefaultMaxWaitingPerRun = 32

// newInvokeREST serves runs/invoke over router.
func newInvokeREST(router Router, settings InvokeSettings) *InvokeREST {
	registerInvokeMetrics()
	if settings.MaxTimeout <= 0 {
		settings.MaxTimeout = invocation.DefaultMaxTimeout
	}
	if settings.MaxWaitingPerRun <= 0 {
		settings.MaxWaitingPerRun = DefaultMaxWaitingPerRun
	}
	return &InvokeREST{router: router, maxTimeout: settings.MaxTimeout, waitForReady: max(settings.WaitForReady, 0),
		waiting: &waitingInvocations{max: settings.MaxWaitingPerRun, byRun: map[string]int{}}}
}

// New returns the kind of what an invocation answers.
func (r *InvokeREST) New() runtime.Object { return &kruntimes.InvokeResult{} }

// Destroy does nothing: the router is stopped by whoever started it.
func (r *InvokeREST) Destroy() {}

// ConnectMethods implements rest.Connecter: an invocation is a POST.
func (r *InvokeREST) ConnectMethods() []string { return []string{http.MethodPost} }

// NewConnectOptions implements rest.Connecter: ?uid= and ?timeout=.
func (r *InvokeREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &kruntimes.RunInvokeOptions{}, false, ""
}

// Connect implements rest.Connecter.
func (r *InvokeREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	options, _ := opts.(*kruntimes.RunInvokeOptions)
	if options == nil {
		options = &kruntimes.RunInvokeOptions{}
	}
	// The namespace is on ctx, not on the request the handler serves.
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	return &invokeHandler{
		router: r.router, maxTimeout: r.maxTimeout, waitForReady: r.waitForReady, waiting: r.waiting,
		namespace: namespace, name: name, uid: types.UID(options.UID), responder: responder,
	}, nil
}

// waitingInvocations counts, by Run, the invocations that wait for it to
// become Ready, within a bound.
type waitingInvocations struct {
	mu    sync.Mutex
	max   int
	byRun map[string]int
}

// take counts one more waiting for the Run key, unless max already wait.
func (w *waitingInvocations) take(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byRun[key] >= w.max {
		return false
	}
	w.byRun[key]++
	return true
}

// give counts one fewer waiting for the Run key.
func (w *waitingInvocations) give(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byRun[key] <= 1 {
		delete(w.byRun, key)
		return
	}
	w.byRun[key]--
}
