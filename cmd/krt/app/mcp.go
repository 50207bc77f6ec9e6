package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/version"
)

// MCPProtocolRevision is the newest Model Context Protocol revision the Go
// SDK krt mcp is built on (github.com/modelcontextprotocol/go-sdk, v1.8.0:
// 2026-07-28) implements; it negotiates older ones with older clients.
var MCPProtocolRevision = mcp.SupportedProtocolVersions()[0]

// DefaultToolSelector selects the function Runs krt mcp serves as tools.
const DefaultToolSelector = "kruntimes.io/tool=true"

// accessTTL bounds how long an answer of a SelfSubjectAccessReview is
// reused.
const accessTTL = 30 * time.Second

// maxToolNameLen is MCP's bound on a tool name.
const maxToolNameLen = 128

type mcpOptions struct {
	// namespaces are the values of -n (each may list several,
	// comma-separated); allNamespaces is -A.
	namespaces    []string
	allNamespaces bool
	selector      string
	timeout       time.Duration
	listen        string
	sandbox       string
	tlsCertFile   string
	tlsKeyFile    string
	idleTimeout   time.Duration
}

func newMCPCommand(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, code *int) *cobra.Command {
	o := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp [-n NAMESPACE[,NAMESPACE...] | -A] [-l SELECTOR] [--listen HOST:PORT]",
		Short: "Serve the Ready function Runs of one or more namespaces as Model Context Protocol tools, over stdio or HTTP",
		Long: `Serve the Ready function Runs of a namespace that match the label selector
(default ` + DefaultToolSelector + `) and that you may invoke (create runs/invoke,
asked with a SelfSubjectAccessReview per Run, cached 30s) as Model Context
Protocol tools, over stdio (JSON-RPC on standard input and output), as the
identity of your kubeconfig. Protocol revision ` + MCPProtocolRevision + ` (the newest the
official Go SDK implements; older revisions are negotiated).

Each tool is named after its Run: the Run's name when it is at most 128
characters, else its first 119 characters, "-" and 8 hex digits of the
name's SHA-256.

-n may name several namespaces (-n a,b or -n a -n b), and -A serves all
of them (one watch of the whole cluster's Runs, so the caller needs list
and watch of runs in every namespace). Then each tool is named
NAMESPACE.NAME instead (a namespace has no "."), shortened the same way
when longer than 128 characters, so names never collide across
namespaces. A namespace the caller may not list Runs in is skipped (and
said on standard error) when several are named.

A tool's description is spec.mode.function.description, its
inputSchema spec.mode.function.schema.input ({"type":"object"} when unset),
its outputSchema schema.output. The list follows a watch of the Runs, and
notifications/tools/list_changed is sent when it changes.

tools/call invokes the Run once (its UID as precondition, a fresh
invocation ID) and never re-sends it. The output is structuredContent (when
a JSON object) and text. Every failure is a result with isError: the
handler's error; the arguments breaking the input schema (did not run);
busy or unavailable (did not run, retry after N s); timed out or outcome
unknown (may have run). Logs go to standard error.

With --listen HOST:PORT, krt mcp serves MCP's streamable HTTP transport at
http://HOST:PORT/mcp instead (https with --tls-cert-file and
--tls-private-key-file; a listen address that is not loopback is refused
without them). Every request must carry "Authorization: Bearer TOKEN", a
Kubernetes token (e.g. kubectl create token SERVICEACCOUNT), and is
answered 401 without one or when the cluster does not accept it. Each MCP
session acts as the token that created it: its own watch of the Runs,
SelfSubjectAccessReviews and invocations, made with the kubeconfig's
server and CA and that token, never the kubeconfig's credentials. A
request of a session with a different token is refused with 403 (a new
token, e.g. a refreshed one, starts a new session). The address is printed
on standard error once listening. SIGINT or SIGTERM stops it.

With --sandbox-runtime RUNTIME, each session also has the tools
create_sandbox, run_code, run_command, write_file, read_file, list_files
and delete_sandbox: a sandbox is a function Run with the built-in handler
kruntimes.sandbox on that Python Runtime, created as the caller (labelled
kruntimes.io/sandbox=true, never listed as a tool), usable only by the
session that created it, and deleted by delete_sandbox, when the session
ends, or after its idle timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := serveMCP(cmd.Context(), flags, streams, o); err != nil {
				*code = ExitError
				return err
			}
			return nil
		},
	}
	// -n here shadows kubectl's -n of the root command, to take several.
	cmd.Flags().StringSliceVarP(&o.namespaces, "namespace", "n", nil, "The namespaces to serve the Runs of, comma-separated or repeated; the kubeconfig's namespace when unset. With more than one, tools are named NAMESPACE.NAME.")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Serve the Runs of every namespace (the caller must list and watch runs cluster-wide); tools are named NAMESPACE.NAME.")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", DefaultToolSelector, "Label selector of the Runs to serve as tools.")
	cmd.Flags().StringVar(&o.sandbox, "sandbox-runtime", "", "Add the sandbox tools (create_sandbox, run_code, run_command, write_file, read_file, list_files, delete_sandbox), creating each sandbox on this Python Runtime (capacity.runs 1).")
	cmd.Flags().StringVar(&o.listen, "listen", "", "Serve MCP's streamable HTTP transport on HOST:PORT (path /mcp) instead of stdio; port 0 picks a free one.")
	cmd.Flags().StringVar(&o.tlsCertFile, "tls-cert-file", "", "With --listen: serve HTTPS with this certificate (PEM); required for a non-loopback address.")
	cmd.Flags().StringVar(&o.tlsKeyFile, "tls-private-key-file", "", "With --listen: the private key (PEM) of --tls-cert-file.")
	cmd.Flags().DurationVar(&o.idleTimeout, "session-idle-timeout", 30*time.Minute, "With --listen: close an MCP session that sent no request for this long (its watch ends with it); 0 never.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "How long one tools/call may take (the invocation's request timeout); the server's default (60s) when 0.")
	return cmd
}

func serveMCP(ctx context.Context, flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, o *mcpOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	selector, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("--selector: %w", err)
	}
	if o.listen == "" && (o.tlsCertFile != "" || o.tlsKeyFile != "") {
		return errors.New("--tls-cert-file and --tls-private-key-file need --listen")
	}
	if o.listen != "" {
		if err := checkListen(o.listen, o.tlsCertFile, o.tlsKeyFile); err != nil {
			return err
		}
	}
	config, err := flags.ToRESTConfig()
	if err != nil {
		return err
	}
	namespace, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	scope, err := newToolScope(o.namespaces, o.allNamespaces, namespace)
	if err != nil {
		return err
	}
	if o.sandbox != "" && scope.qualified() {
		return fmt.Errorf("--sandbox-runtime needs a single namespace (-n NAMESPACE), the one sandboxes are created in; %s were given", scope)
	}
	// SIGINT or SIGTERM end the sessions, which deletes their sandboxes.
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if o.listen != "" {
		return serveMCPHTTP(ctx, config, scope, selector, streams, o)
	}
	session, err := newMCPSession(ctx, config, scope, selector, o, nil)
	if err != nil {
		return err
	}
	defer session.stop()
	session.start()
	if err := session.waitSynced(ctx); err != nil {
		return err
	}
	fmt.Fprintf(streams.ErrOut, "krt mcp: serving the Ready function Runs of %s matching %q over stdio (MCP %s)\n", scope, selector.String(), MCPProtocolRevision)
	err = session.server.Run(ctx, &mcp.IOTransport{Reader: readCloser{streams.In}, Writer: writeCloser{streams.Out}})
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed)) {
		return nil
	}
	return err
}

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

type readCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (writeCloser) Close() error                  { return nil }

// ToolName is the MCP tool name of the Run called runName: the name itself
// when it fits MCP's 128 characters (a Run's name, a DNS subdomain, uses
// only characters MCP allows: a-z, 0-9, "-" and "."), else its first 119
// characters, "-" and the first 8 hex digits of the name's SHA-256. Names
// are unique in a namespace; two Runs of one namespace share a tool name
// only if one is named exactly like the other's shortened name (or by a
// 32-bit hash collision), and then toolSet serves only one of them.
func ToolName(runName string) string {
	if len(runName) <= maxToolNameLen {
		return runName
	}
	sum := sha256.Sum256([]byte(runName))
	return runName[:maxToolNameLen-9] + "-" + hex.EncodeToString(sum[:4])
}

// servedTool is what the server holds for one tool.
type servedTool struct {
	uid types.UID
	// generation changes when the spec does (it is immutable, but a Run
	// deleted and created again has a new UID anyway).
	generation int64
}

// toolSet keeps the server's tools equal to the Ready, selected Runs the
// caller may invoke.
type toolSet struct {
	server *mcp.Server
	// listers hold the watched Runs, one per watch.
	listers []listersv1alpha1.RunLister
	client  typedv1alpha1.KruntimesV1alpha1Interface
	access  *accessCache
	scope   toolScope
	timeout time.Duration

	// warnings is where a Run that cannot be served is reported;
	// os.Stderr when nil.
	warnings io.Writer

	mu     sync.Mutex
	served map[string]servedTool // by tool name
	// hidden are the Runs not served for another's tool name, each
	// reported once while it stays hidden.
	hidden map[types.UID]bool
}

func (s *toolSet) warningsTo() io.Writer {
	if s.warnings == nil {
		return os.Stderr
	}
	return s.warnings
}

// isTool says whether run is served: a function Run that is not a sandbox
// (the sandbox tools serve those), Ready, not being deleted.
func isTool(run *v1alpha1.Run) bool {
	return run.Spec.Mode.Function != nil && run.Spec.Mode.Function.Handler != SandboxHandler && run.DeletionTimestamp == nil &&
		apimeta.IsStatusConditionTrue(run.Status.Conditions, lifecycle.ConditionReady)
}

func (s *toolSet) sync(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var candidates []*v1alpha1.Run
	for _, lister := range s.listers {
		all, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		for _, run := range all {
			if isTool(run) {
				candidates = append(candidates, run)
			}
		}
	}
	// In order, so that which of two Runs sharing a tool name is served
	// does not change from one sync to the next.
	sort.Slice(candidates, func(i, j int) bool {
		a, b := candidates[i], candidates[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	allowed := s.access.allowedAll(ctx, candidates)
	want := map[string]*v1alpha1.Run{}
	hidden := map[types.UID]bool{}
	for i, run := range candidates {
		if !allowed[i] {
			continue
		}
		name := s.scope.toolName(run.Namespace, run.Name)
		if first, ok := want[name]; ok {
			// The Run whose name is the tool name as it is keeps it over
			// one whose shortened name it merely equals.
			served, hiddenRun := first, run
			if !s.scope.shortened(run.Namespace, run.Name) && s.scope.shortened(first.Namespace, first.Name) {
				served, hiddenRun = run, first
			}
			if !s.hidden[hiddenRun.UID] {
				fmt.Fprintf(s.warningsTo(), "krt mcp: not serving the Run %s/%s: its tool name %s is the one of %s/%s\n", hiddenRun.Namespace, hiddenRun.Name, name, served.Namespace, served.Name)
			}
			hidden[hiddenRun.UID] = true
			run = served
		}
		want[name] = run
	}
	s.hidden = hidden
	var gone []string
	for name := range s.served {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		sort.Strings(gone)
		s.server.RemoveTools(gone...)
		for _, name := range gone {
			delete(s.served, name)
		}
	}
	for name, run := range want {
		now := servedTool{uid: run.UID, generation: run.Generation}
		if s.served[name] == now {
			continue
		}
		s.server.AddTool(toolOf(name, run), s.handler(run.Namespace, run.Name, run.UID))
		s.served[name] = now
	}
}

// toolOf describes run as the MCP tool name.
func toolOf(name string, run *v1alpha1.Run) *mcp.Tool {
	fn := run.Spec.Mode.Function
	tool := &mcp.Tool{
		Name:        name,
		Description: fn.Description,
		InputSchema: json.RawMessage(`{"type":"object"}`),
	}
	if tool.Description == "" {
		tool.Description = fmt.Sprintf("Invokes the function Run %s/%s.", run.Namespace, run.Name)
	}
	if fn.Schema != nil {
		if fn.Schema.Input != nil && len(fn.Schema.Input.Raw) > 0 {
			tool.InputSchema = json.RawMessage(fn.Schema.Input.Raw)
		}
		if fn.Schema.Output != nil && len(fn.Schema.Output.Raw) > 0 {
			tool.OutputSchema = json.RawMessage(fn.Schema.Output.Raw)
		}
	}
	return tool
}

// handler invokes the Run namespace/name with UID uid once per call.
func (s *toolSet) handler(namespace, name string, uid types.UID) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		input := []byte("{}")
		if req.Params != nil && len(req.Params.Arguments) > 0 && string(req.Params.Arguments) != "null" {
			input = req.Params.Arguments
		}
		id := string(uuid.NewUUID())
		result, err := s.client.Runs(namespace).Invoke(ctx, name, input, typedv1alpha1.InvokeOptions{UID: uid, Timeout: s.timeout, InvocationID: id})
		return callResult(result, err, id), nil
	}
}

// callResult maps an invocation's result or error to a tools/call result.
func callResult(result *v1alpha1.InvokeResult, err error, id string) *mcp.CallToolResult {
	if err != nil {
		return errorResult(invokeErrorText(err, id))
	}
	if result.Error != nil {
		return errorResult(fmt.Sprintf("the function ran and failed (invocation %s): %s: %s", result.InvocationID, result.Error.Type, result.Error.Message))
	}
	raw := outputOf(result.Output.Raw)
	out := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}
	if isJSONObject(raw) {
		out.StructuredContent = json.RawMessage(raw)
	}
	return out
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func isJSONObject(raw []byte) bool {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	return strings.HasPrefix(s, "{") && json.Valid(raw)
}

// invokeErrorText says what an error of Invoke means for the caller: did the
// function run, may it be called again, and when.
func invokeErrorText(err error, id string) string {
	switch typedv1alpha1.ClassifyInvokeError(err) {
	case typedv1alpha1.InvokeNotRun:
		why := "unavailable (not Ready, recovering or unreachable)"
		if apierrors.IsTooManyRequests(err) {
			why = "busy: another invocation is in flight"
		}
		retry := ""
		if seconds, ok := apierrors.SuggestsClientDelay(err); ok && seconds > 0 {
			retry = fmt.Sprintf(" after %d s", seconds)
		}
		return fmt.Sprintf("the function did not run: it is %s; the same call may be made again%s (invocation %s): %v", why, retry, id, err)
	case typedv1alpha1.InvokeTimedOut:
		return fmt.Sprintf("the outcome is unknown: the function timed out and was stopped at its deadline, and may have run in part or in full; it was not re-sent (invocation %s): %v", id, err)
	case typedv1alpha1.InvokeOutcomeUnknown:
		return fmt.Sprintf("the outcome is unknown: the call was sent and no answer says what happened, so the function may have run; it was not re-sent (invocation %s): %v", id, err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		if st.Code == http.StatusBadRequest && st.Details != nil && len(st.Details.Causes) > 0 {
			var b strings.Builder
			b.WriteString("the arguments do not match the tool's input schema, and the function did not run; fix these and call again:")
			for _, c := range st.Details.Causes {
				field := strings.TrimPrefix(strings.TrimPrefix(c.Field, "input"), ".")
				if field == "" {
					field = "(the arguments)"
				}
				fmt.Fprintf(&b, "\n- %s: %s", field, c.Message)
			}
			return b.String()
		}
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("the function did not run: its Run is gone or was created again under the name (list the tools again): %s", st.Message)
		}
		if apierrors.IsForbidden(err) {
			return fmt.Sprintf("the function did not run: you may not invoke it: %s", st.Message)
		}
	}
	return fmt.Sprintf("the call was refused, and the function did not run: %v", err)
}

// accessReviewer says whether the caller may create runs/invoke on the Run
// name in namespace.
type accessReviewer func(ctx context.Context, namespace, name string) (bool, error)

func ssarReviewer(kube kubernetes.Interface) accessReviewer {
	return func(ctx context.Context, namespace, name string) (bool, error) {
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace:   namespace,
				Verb:        "create",
				Group:       v1alpha1.SchemeGroupVersion.Group,
				Resource:    "runs",
				Subresource: "invoke",
				Name:        name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return review.Status.Allowed, nil
	}
}

type accessAnswer struct {
	allowed bool
	at      time.Time
}

// rulesReviewer answers which resource rules the caller has in namespace
// (a SelfSubjectRulesReview), and whether they are complete: every
// authorizer of the cluster could list what it allows.
type rulesReviewer func(ctx context.Context, namespace string) (rules []authorizationv1.ResourceRule, complete bool, err error)

func ssrrReviewer(kube kubernetes.Interface) rulesReviewer {
	return func(ctx context.Context, namespace string) ([]authorizationv1.ResourceRule, bool, error) {
		review, err := kube.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, false, err
		}
		st := review.Status
		return st.ResourceRules, !st.Incomplete && st.EvaluationError == "", nil
	}
}

// mayInvoke says whether rules allow create runs/invoke on the Run name,
// matching as RBAC does: "*" for any verb, group or resource, "*/invoke"
// for the subresource of any resource, no resourceNames for every name.
func mayInvoke(rules []authorizationv1.ResourceRule, name string) bool {
	has := func(set []string, values ...string) bool {
		for _, v := range set {
			for _, want := range values {
				if v == want {
					return true
				}
			}
		}
		return false
	}
	for _, r := range rules {
		if has(r.Verbs, "*", "create") && has(r.APIGroups, "*", v1alpha1.SchemeGroupVersion.Group) &&
			has(r.Resources, "*", "runs/invoke", "*/invoke") && (len(r.ResourceNames) == 0 || has(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// reviewsPerRound is how many SelfSubjectAccessReviews are in flight at
// once; more Runs to ask about than that are answered from one
// SelfSubjectRulesReview when the cluster's rules are complete.
const reviewsPerRound = 8

// accessCache keeps each Run's answer for accessTTL.
type accessCache struct {
	review accessReviewer
	// rules, when set, answers for many Runs at once.
	rules rulesReviewer
	now   func() time.Time

	mu      sync.Mutex
	answers map[types.UID]accessAnswer
}

// allowedAll answers for each of runs (of any namespaces), asking at most
// 8 reviews at once (or one rules review per namespace with more to ask).
// A review that fails counts as not allowed and is not cached.
func (c *accessCache) allowedAll(ctx context.Context, runs []*v1alpha1.Run) []bool {
	out := make([]bool, len(runs))
	now := c.now()
	c.mu.Lock()
	if c.answers == nil {
		c.answers = map[types.UID]accessAnswer{}
	}
	askIn := map[string][]int{} // by namespace
	keep := map[types.UID]bool{}
	for i, run := range runs {
		keep[run.UID] = true
		if a, ok := c.answers[run.UID]; ok && now.Sub(a.at) < accessTTL {
			out[i] = a.allowed
			continue
		}
		askIn[run.Namespace] = append(askIn[run.Namespace], i)
	}
	for uid := range c.answers {
		if !keep[uid] {
			delete(c.answers, uid)
		}
	}
	c.mu.Unlock()

	// Many Runs of a namespace to ask about (a new session, or every
	// 30 s): one SelfSubjectRulesReview instead of a review per Run, when
	// the cluster's authorizers can list all they allow (RBAC can; a
	// webhook cannot, and then each Run is asked about).
	var ask []int
	for namespace, indexes := range askIn {
		if len(indexes) <= reviewsPerRound || c.rules == nil {
			ask = append(ask, indexes...)
			continue
		}
		rules, complete, err := c.rules(ctx, namespace)
		if err != nil {
			fmt.Fprintf(os.Stderr, "krt mcp: SelfSubjectRulesReview of namespace %s: %v\n", namespace, err)
		}
		if err != nil || !complete {
			ask = append(ask, indexes...)
			continue
		}
		c.mu.Lock()
		for _, i := range indexes {
			out[i] = mayInvoke(rules, runs[i].Name)
			c.answers[runs[i].UID] = accessAnswer{allowed: out[i], at: now}
		}
		c.mu.Unlock()
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, reviewsPerRound)
	for _, i := range ask {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			run := runs[i]
			allowed, err := c.review(ctx, run.Namespace, run.Name)
			if err != nil {
				fmt.Fprintf(os.Stderr, "krt mcp: SelfSubjectAccessReview of runs/invoke %s/%s: %v\n", run.Namespace, run.Name, err)
				return
			}
			out[i] = allowed
			c.mu.Lock()
			c.answers[run.UID] = accessAnswer{allowed: allowed, at: now}
			c.mu.Unlock()
		}(i)
	}
	wg.Wait()
	return out
}
