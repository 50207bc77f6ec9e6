package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/version"
)

// mcpSession is one MCP server and what feeds its tools, acting as one
// identity: its own watches of the Runs, its own SelfSubjectAccessReviews
// and invocations. krt mcp over stdio has one; over HTTP each MCP session
// has its own, acting as the bearer token that created it.
type mcpSession struct {
	server   *mcp.Server
	tools    *toolSet
	watches  []*runWatch
	selector labels.Selector
	scope    toolScope

	ctx    context.Context
	cancel context.CancelFunc
	// informers counts the running informers; stop waits for them.
	informers sync.WaitGroup

	// sandboxes are the sandbox Runs this session created (nil without
	// --sandbox-runtime).
	sandboxes *sandboxes

	startOnce sync.Once
	synced    chan struct{} // closed when the watches have listed, or failed (err)
	err       error
}

// runWatch lists and watches the selected Runs of one namespace (of all
// with metav1.NamespaceAll).
type runWatch struct {
	namespace string
	runs      typedv1alpha1.RunInterface
	informer  cache.SharedIndexInformer
}

func (w *runWatch) String() string {
	if w.namespace == metav1.NamespaceAll {
		return "all namespaces"
	}
	return "namespace " + w.namespace
}

// newMCPSession builds a session acting as config's identity. Nothing is
// asked of the cluster before start. opts may be nil.
func newMCPSession(parent context.Context, config *rest.Config, scope toolScope, selector labels.Selector, o *mcpOptions, opts *mcp.ServerOptions) (*mcpSession, error) {
	config = rest.CopyConfig(config)
	// client-go's default limit (5 requests/s, bursts of 10) would hold
	// an agent's 11th call in a second back by 200 ms; the apiserver's
	// priority and fairness protects the cluster.
	config.QPS, config.Burst = 50, 100
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	// The SelfSubjectAccessReviews of a tools/list come in bursts (one per
	// Run not asked in the last 30 s: 500 Runs are 500 reviews), which
	// client-go's limit would spread over seconds; they are bounded by the
	// 8 in flight instead.
	reviews := rest.CopyConfig(config)
	reviews.QPS = -1
	kube, err := kubernetes.NewForConfig(reviews)
	if err != nil {
		return nil, err
	}
	var watches []*runWatch
	var listers []listersv1alpha1.RunLister
	for _, namespace := range scope.watched() {
		runs := client.KruntimesV1alpha1().Runs(namespace)
		informer := cache.NewSharedIndexInformer(plainListWatch{&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
				lo.LabelSelector = selector.String()
				return runs.List(ctx, lo)
			},
			WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
				lo.LabelSelector = selector.String()
				return runs.Watch(ctx, lo)
			},
		}}, &v1alpha1.Run{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		watches = append(watches, &runWatch{namespace: namespace, runs: runs, informer: informer})
		listers = append(listers, listersv1alpha1.NewRunLister(informer.GetIndexer()))
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "krt", Version: version.Get().String()}, opts)
	ctx, cancel := context.WithCancel(parent)
	s := &mcpSession{
		server: server,
		tools: &toolSet{
			server:  server,
			listers: listers,
			client:  client.KruntimesV1alpha1(),
			access:  &accessCache{review: ssarReviewer(kube), rules: ssrrReviewer(kube), now: time.Now},
			scope:   scope,
			timeout: o.timeout,
			served:  map[string]servedTool{},
		},
		watches:  watches,
		selector: selector,
		scope:    scope,
		ctx:      ctx,
		cancel:   cancel,
		synced:   make(chan struct{}),
	}
	if o.sandbox != "" {
		// serveMCP refuses --sandbox-runtime with more than one namespace.
		namespace := scope.namespaces[0]
		s.sandboxes = &sandboxes{
			runs:      client.KruntimesV1alpha1().Runs(namespace),
			runtimes:  client.KruntimesV1alpha1().Runtimes(namespace),
			runtime:   o.sandbox,
			namespace: namespace,
			owned:     map[string]types.UID{},
		}
		addSandboxTools(server, s.sandboxes)
	}
	// tools/list re-checks what the caller may invoke (answers older than
	// 30 s are asked again) before the SDK lists the tools; it waits for
	// the watches' first lists.
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" || method == "tools/call" {
				s.start()
				if err := s.waitSynced(ctx); err != nil {
					return nil, err
				}
			}
			if method == "tools/list" {
				s.tools.sync(ctx)
			}
			return next(ctx, method, req)
		}
	})
	return s, nil
}

// start lists and watches the Runs (once) and keeps the tools in step.
func (s *mcpSession) start() {
	s.startOnce.Do(func() {
		changed := make(chan struct{}, 1)
		poke := func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
		for _, w := range s.watches {
			if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { poke() },
				UpdateFunc: func(any, any) { poke() },
				DeleteFunc: func(any) { poke() },
			}); err != nil {
				s.err = err
				close(s.synced)
				return
			}
		}
		go func() {
			defer close(s.synced)
			if s.err = s.runWatches(); s.err != nil {
				return
			}
			s.tools.sync(s.ctx)
			go func() {
				for {
					select {
					case <-s.ctx.Done():
						return
					case <-changed:
						s.tools.sync(s.ctx)
					}
				}
			}()
		}()
	})
}

// runWatches starts the watches and waits for their first lists. Each
// namespace is listed once first: a caller that may not list its Runs gets
// the apiserver's answer instead of a watch retrying forever. Of several
// namespaces, one the caller may not list is skipped and said on standard
// error; the session fails only when it may list none.
func (s *mcpSession) runWatches() error {
	var running []*runWatch
	var forbidden []error
	for _, w := range s.watches {
		_, err := w.runs.List(s.ctx, metav1.ListOptions{LabelSelector: s.selector.String(), Limit: 1})
		if err != nil {
			err = fmt.Errorf("list the Runs of %s: %w", w, err)
			if !s.scope.qualified() || !apierrors.IsForbidden(err) {
				return err
			}
			fmt.Fprintf(os.Stderr, "krt mcp: skipping %s, whose Runs the caller may not list: %v\n", w, err)
			forbidden = append(forbidden, err)
			continue
		}
		running = append(running, w)
	}
	if len(running) == 0 {
		return errors.Join(forbidden...)
	}
	for _, w := range running {
		s.informers.Add(1)
		go func() {
			defer s.informers.Done()
			w.informer.RunWithContext(s.ctx)
		}()
	}
	for _, w := range running {
		if !cache.WaitForCacheSync(s.ctx.Done(), w.informer.HasSynced) {
			return fmt.Errorf("list the Runs of %s: %w", w, s.ctx.Err())
		}
	}
	return nil
}

// plainListWatch lists and then watches the Runs, instead of client-go's
// streaming list (a watch that sends the initial state as events): against
// kruntimes-apiserver the first tools/list of a session with 500 Runs took
// 2.4 s with the stream and 1.3 s with a list (docs/benchmarks.md).
type plainListWatch struct{ *cache.ListWatch }

func (plainListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// waitSynced waits until the first lists of the Runs are in.
func (s *mcpSession) waitSynced(ctx context.Context) error {
	select {
	case <-s.synced:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop deletes the session's sandboxes, ends the watches and waits for
// them.
func (s *mcpSession) stop() {
	if s.sandboxes != nil {
		s.sandboxes.removeAll()
	}
	s.cancel()
	// A session never started has nothing to wait for.
	s.startOnce.Do(func() {
		s.err = errors.New("the session ended")
		close(s.synced)
	})
	<-s.synced
	s.informers.Wait()
}
