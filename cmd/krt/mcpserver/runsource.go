package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

// runSource lists and watches the selected Runs of each watched namespace,
// once for all the sessions that share it (over HTTP, those of one
// principal), and keeps of each Run only what the tools read.
type runSource struct {
	watches  []*runWatch
	listers  []listersv1alpha1.RunLister
	selector labels.Selector
	scope    toolScope

	ctx    context.Context
	cancel context.CancelFunc
	// informers counts the running informers; stop waits for them.
	informers sync.WaitGroup

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

// newRunSource builds the watches; nothing is asked of the cluster before
// start.
func newRunSource(client versioned.Interface, scope toolScope, selector labels.Selector) *runSource {
	ctx, cancel := context.WithCancel(context.Background())
	s := &runSource{selector: selector, scope: scope, ctx: ctx, cancel: cancel, synced: make(chan struct{})}
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
		// Set before the informer runs, so its cache never holds a Run's
		// source or env.
		_ = informer.SetTransform(toolFields)
		s.watches = append(s.watches, &runWatch{namespace: namespace, runs: runs, informer: informer})
		s.listers = append(s.listers, listersv1alpha1.NewRunLister(informer.GetIndexer()))
	}
	return s
}

// toolFields keeps of a Run what tools read (name, UID, generation,
// deletion, the function's handler, description and schemas, the
// conditions); its source, env and annotations (kubectl apply's copy of
// the whole object among them) are never held.
func toolFields(obj any) (any, error) {
	run, ok := obj.(*v1alpha1.Run)
	if !ok {
		return obj, nil
	}
	return &v1alpha1.Run{
		TypeMeta: run.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         run.Namespace,
			Name:              run.Name,
			UID:               run.UID,
			ResourceVersion:   run.ResourceVersion,
			Generation:        run.Generation,
			CreationTimestamp: run.CreationTimestamp,
			DeletionTimestamp: run.DeletionTimestamp,
			Labels:            run.Labels,
		},
		Spec: v1alpha1.RunSpec{
			Runtime: run.Spec.Runtime,
			Mode:    v1alpha1.RunMode{Function: run.Spec.Mode.Function},
		},
		Status: v1alpha1.RunStatus{Conditions: run.Status.Conditions},
	}, nil
}

// start lists and watches the Runs, once.
func (s *runSource) start() {
	s.startOnce.Do(func() {
		go func() {
			defer close(s.synced)
			s.err = s.runWatches()
		}()
	})
}

// failed says whether the first lists failed; a session that starts later
// had better have a source of its own.
func (s *runSource) failed() bool {
	select {
	case <-s.synced:
		return s.err != nil
	default:
		return false
	}
}

// runWatches starts the watches and waits for their first lists. Each
// namespace is listed once first: a caller that may not list its Runs gets
// the apiserver's answer instead of a watch retrying forever. Of several
// namespaces, one the caller may not list is skipped and said on standard
// error; the source fails only when it may list none.
func (s *runSource) runWatches() error {
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
func (s *runSource) waitSynced(ctx context.Context) error {
	select {
	case <-s.synced:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onChange calls changed after each change of a watched Run, until remove
// is called.
func (s *runSource) onChange(changed func()) (remove func(), err error) {
	var registered []cache.ResourceEventHandlerRegistration
	remove = func() {
		for i, reg := range registered {
			_ = s.watches[i].informer.RemoveEventHandler(reg)
		}
	}
	for _, w := range s.watches {
		reg, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed() },
			UpdateFunc: func(any, any) { changed() },
			DeleteFunc: func(any) { changed() },
		})
		if err != nil {
			remove()
			return nil, err
		}
		registered = append(registered, reg)
	}
	return remove, nil
}

// stop ends the watches and waits for them.
func (s *runSource) stop() {
	s.cancel()
	// A source never started has nothing to wait for.
	s.startOnce.Do(func() {
		s.err = errors.New("the watch of the Runs ended")
		close(s.synced)
	})
	<-s.synced
	s.informers.Wait()
}

// sharedRunSources are the runSources of krt mcp --listen, one per
// principal while it has sessions: a principal's sessions share its
// watches and the cluster sends each Run once per principal, not once per
// session. Sharing goes no further than a principal, because what a watch
// holds is what its principal may list.
type sharedRunSources struct {
	newSource func(token *heldToken) (*runSource, error)

	mu          sync.Mutex
	byPrincipal map[string]*sharedRunSource
}

type sharedRunSource struct {
	source   *runSource
	token    *heldToken
	sessions int
}

// acquire is the source of id's principal, made for it when it has none
// (or its source failed), acting as id's token from now on; release ends
// the caller's share.
func (s *sharedRunSources) acquire(id *identity) (source *runSource, token *heldToken, release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shared, ok := s.byPrincipal[id.principal]
	if !ok || shared.source.failed() {
		token := &heldToken{}
		source, err := s.newSource(token)
		if err != nil {
			return nil, nil, nil, err
		}
		shared = &sharedRunSource{source: source, token: token}
		if s.byPrincipal == nil {
			s.byPrincipal = map[string]*sharedRunSource{}
		}
		s.byPrincipal[id.principal] = shared
	}
	shared.token.set(id.token)
	shared.sessions++
	var once sync.Once
	return shared.source, shared.token, func() {
		once.Do(func() { s.release(id.principal, shared) })
	}, nil
}

func (s *sharedRunSources) release(principal string, shared *sharedRunSource) {
	s.mu.Lock()
	shared.sessions--
	last := shared.sessions == 0
	if last {
		if s.byPrincipal[principal] == shared {
			delete(s.byPrincipal, principal)
		}
		// Nothing acts as the principal any more: the token goes before
		// the watch ends, so no one sees the watch gone and the token kept.
		shared.token.set("")
	}
	s.mu.Unlock()
	if last {
		shared.source.stop()
	}
}

// sawToken makes the newest authenticated token of id's principal the one
// its watches and its sessions' work outside of a request act as.
func (s *sharedRunSources) sawToken(id *identity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if shared, ok := s.byPrincipal[id.principal]; ok {
		shared.token.set(id.token)
	}
}

// count is how many sources run, for tests.
func (s *sharedRunSources) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byPrincipal)
}

// heldToken is the newest bearer token of one principal: what its watches
// list and watch with, and what its sessions act as outside of a request
// (a change of the Runs, ending a session's sandboxes). It is the only
// place krt mcp --listen keeps a caller's token after the caller's
// request, and only while the principal has a session.
type heldToken struct {
	mu    sync.Mutex
	token string
}

func (h *heldToken) set(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.token = token
}

func (h *heldToken) get() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.token
}

type requestTokenKey struct{}

// withRequestToken makes what ctx is for act as the token of the MCP
// request it serves.
func withRequestToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, requestTokenKey{}, token)
}

// heldConfig reaches the cluster of base (its server and TLS trust, none
// of its credentials) as the token of the MCP request a call is made for,
// or, outside of one, as held's.
func heldConfig(base *rest.Config, held *heldToken) *rest.Config {
	config := rest.AnonymousClientConfig(base)
	config.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &requestBearer{held: held, next: next}
	})
	return config
}

type requestBearer struct {
	held *heldToken
	next http.RoundTripper
}

func (b *requestBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	token, ok := r.Context().Value(requestTokenKey{}).(string)
	if !ok {
		token = b.held.get()
	}
	r = r.Clone(r.Context())
	// Once the principal's last session ended there is none to send.
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return b.next.RoundTrip(r)
}
