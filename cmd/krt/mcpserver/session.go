package mcpserver

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/version"
)

// mcpSession is one MCP server and what feeds its tools, acting as one
// identity: the watches of the Runs of its runSource, its own
// SelfSubjectAccessReviews and invocations. krt mcp over stdio has one;
// over HTTP each MCP session has its own, sharing the runSource of its
// principal, each call acting as the token of the request that makes it.
type mcpSession struct {
	server *mcp.Server
	tools  *toolSet
	source *runSource
	// release ends the session's share of source.
	release func()

	ctx    context.Context
	cancel context.CancelFunc
	// removeHandlers ends the session's handlers of source's changes.
	removeHandlers func()
	// syncing ends when the session's loop of tool syncs does.
	syncing sync.WaitGroup

	// sandboxes are the sandbox Runs this session created (nil without
	// --sandbox-runtime).
	sandboxes *sandboxes

	startOnce sync.Once
	synced    chan struct{} // closed when the source has listed, or failed (err)
	err       error
}

// newMCPSession builds a session acting as config's identity, on the
// Runs of source (its own when nil, ended with it; else release ends its
// share). Nothing is asked of the cluster before start. opts may be nil.
func newMCPSession(parent context.Context, config *rest.Config, source *runSource, release func(), scope toolScope, selector labels.Selector, o *mcpOptions, opts *mcp.ServerOptions) (*mcpSession, error) {
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
	if source == nil {
		source = newRunSource(client, scope, selector)
		release = source.stop
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "krt", Version: version.Get().String()}, opts)
	ctx, cancel := context.WithCancel(parent)
	s := &mcpSession{
		server: server,
		tools: &toolSet{
			server:  server,
			listers: source.listers,
			client:  client.KruntimesV1alpha1(),
			access:  &accessCache{review: ssarReviewer(kube), rules: ssrrReviewer(kube), now: time.Now},
			scope:   scope,
			timeout: o.timeout,
			served:  map[string]servedTool{},
		},
		source:  source,
		release: release,
		ctx:     ctx,
		cancel:  cancel,
		synced:  make(chan struct{}),
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
	// the watches' first lists. Over HTTP, what a request does acts as the
	// request's token.
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if extra := req.GetExtra(); extra != nil && extra.Header != nil {
				if token, ok := bearerTokenOf(extra.Header); ok {
					ctx = withRequestToken(ctx, token)
				}
			}
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

// start lists and watches the Runs (once, for every session of the
// source) and keeps the tools in step.
func (s *mcpSession) start() {
	s.startOnce.Do(func() {
		changed := make(chan struct{}, 1)
		remove, err := s.source.onChange(func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		if err != nil {
			s.err = err
			close(s.synced)
			return
		}
		s.removeHandlers = remove
		s.source.start()
		s.syncing.Add(1)
		go func() {
			defer s.syncing.Done()
			// The tools are in before a call waiting for synced goes on.
			if s.err = s.source.waitSynced(s.ctx); s.err == nil {
				s.tools.sync(s.ctx)
			}
			close(s.synced)
			if s.err != nil {
				return
			}
			for {
				select {
				case <-s.ctx.Done():
					return
				case <-changed:
					s.tools.sync(s.ctx)
				}
			}
		}()
	})
}

// waitSynced waits until the first lists of the Runs are in.
func (s *mcpSession) waitSynced(ctx context.Context) error {
	select {
	case <-s.synced:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop deletes the session's sandboxes, ends its share of the watches and
// waits for its loop.
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
	s.syncing.Wait()
	if s.removeHandlers != nil {
		s.removeHandlers()
	}
	s.release()
}
