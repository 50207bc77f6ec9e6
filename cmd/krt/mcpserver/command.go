package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// MCPProtocolRevision is the newest Model Context Protocol revision the Go
// SDK krt mcp is built on (github.com/modelcontextprotocol/go-sdk, v1.8.0:
// 2026-07-28) implements; it negotiates older ones with older clients.
var MCPProtocolRevision = mcp.SupportedProtocolVersions()[0]

// DefaultToolSelector selects the function Runs krt mcp serves as tools.
const DefaultToolSelector = "kruntimes.io/tool=true"

// DefaultMaxSessionsPerUser is --max-sessions-per-user's default: enough
// for a user's agents and the reconnects of a few, not for a loop that
// opens sessions and leaves them.
const DefaultMaxSessionsPerUser = 8

// mcpOptions are krt mcp's flags, and what Complete makes of them.
type mcpOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

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
	// allowedOrigins are the --allowed-origin values.
	allowedOrigins []string
	// maxSessionsPerUser is --max-sessions-per-user.
	maxSessionsPerUser int
	// serveMetrics is --serve-metrics.
	serveMetrics bool

	// labelSelector is selector, parsed by Complete.
	labelSelector labels.Selector
}

// NewCmdMCP is krt mcp, with flags (kubectl's kubeconfig flags) of the
// root command. An error of Complete, Validate or Run is its RunE's: the
// caller chooses the exit code.
func NewCmdMCP(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &mcpOptions{configFlags: flags, IOStreams: streams}
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
session belongs to the principal (user name, UID and groups) of the token
that created it: a request of the session with a token of another
principal is refused with 403, a refreshed token of the same one keeps
it. What a request does (SelfSubjectAccessReviews, invocations, sandboxes)
acts as that request's token, with the kubeconfig's server and CA, never
the kubeconfig's credentials. The sessions of one principal share one
list and watch of the Runs per namespace, whose cache holds only what the
tools read (no source, env or annotations). That watch, the re-check of
a session's tools after a Run changes, and the deletion of its sandboxes
when it ends act as the principal's newest token: the one token krt mcp
keeps after a request, and only while the principal has a session. The
address is printed on standard error once listening. SIGINT or SIGTERM
stops it.

A request with an Origin header (one a web page sends from a browser) is
refused with 403 unless --allowed-origin names that origin, so that a
page whose host name was rebound to this address (DNS rebinding) cannot
reach it; MCP clients that are not browsers send no Origin. One user (as
the cluster names the token's identity) has at most
--max-sessions-per-user sessions (8) at once: a request that would start
one more is refused with 429 until one ends (DELETE, or
--session-idle-timeout).

With --sandbox-runtime RUNTIME, each session also has the tools
create_sandbox, run_code, run_command, start_command, command_output,
kill_command, write_stdin, write_file, read_file, list_files and
delete_sandbox: a sandbox is a function Run with the built-in handler
kruntimes.sandbox on that Python Runtime, created as the caller (labelled
kruntimes.io/sandbox=true, never listed as a tool), usable only by the
session that created it, and deleted by delete_sandbox, when the session
ends, or after its idle timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	// -n here shadows kubectl's -n of the root command, to take several.
	cmd.Flags().StringSliceVarP(&o.namespaces, "namespace", "n", nil, "The namespaces to serve the Runs of, comma-separated or repeated; the kubeconfig's namespace when unset. With more than one, tools are named NAMESPACE.NAME.")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Serve the Runs of every namespace (the caller must list and watch runs cluster-wide); tools are named NAMESPACE.NAME.")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", DefaultToolSelector, "Label selector of the Runs to serve as tools.")
	cmd.Flags().StringVar(&o.sandbox, "sandbox-runtime", "", "Add the sandbox tools (create_sandbox, run_code, run_command, start_command, command_output, kill_command, write_stdin, write_file, read_file, list_files, delete_sandbox), creating each sandbox on this Python Runtime (capacity.runs 1).")
	cmd.Flags().StringVar(&o.listen, "listen", "", "Serve MCP's streamable HTTP transport on HOST:PORT (path /mcp) instead of stdio; port 0 picks a free one.")
	cmd.Flags().StringVar(&o.tlsCertFile, "tls-cert-file", "", "With --listen: serve HTTPS with this certificate (PEM); required for a non-loopback address.")
	cmd.Flags().StringVar(&o.tlsKeyFile, "tls-private-key-file", "", "With --listen: the private key (PEM) of --tls-cert-file.")
	cmd.Flags().DurationVar(&o.idleTimeout, "session-idle-timeout", 30*time.Minute, "With --listen: close an MCP session that sent no request for this long (the shared watch of the Runs ends with its principal's last session); 0 never.")
	cmd.Flags().StringSliceVar(&o.allowedOrigins, "allowed-origin", nil, "With --listen: an Origin (SCHEME://HOST[:PORT]) whose web pages may send requests, e.g. a browser-based MCP client's; repeatable. A request with any other Origin is refused with 403; one without Origin (not from a browser) is served.")
	cmd.Flags().IntVar(&o.maxSessionsPerUser, "max-sessions-per-user", DefaultMaxSessionsPerUser, "With --listen: the most MCP sessions one user (as the cluster names the bearer token's identity) may have at once; a request that would start one more is refused with 429 until one ends.")
	cmd.Flags().BoolVar(&o.serveMetrics, "serve-metrics", false, "With --listen: also answer Prometheus at "+MetricsPath+" of the same address, without authentication (counts of refused requests by reason; no names).")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "How long one tools/call may take (the invocation's request timeout); the server's default (60s) when 0.")
	return cmd
}

// Complete parses the label selector.
func (o *mcpOptions) Complete() error {
	selector, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("--selector: %w", err)
	}
	o.labelSelector = selector
	return nil
}

// Validate checks the transport's flags, before the kubeconfig is read.
func (o *mcpOptions) Validate() error {
	if o.listen == "" && (o.tlsCertFile != "" || o.tlsKeyFile != "") {
		return errors.New("--tls-cert-file and --tls-private-key-file need --listen")
	}
	if o.serveMetrics && o.listen == "" {
		return errors.New("--serve-metrics needs --listen")
	}
	if o.maxSessionsPerUser < 1 {
		return fmt.Errorf("--max-sessions-per-user %d: want at least 1", o.maxSessionsPerUser)
	}
	if o.listen == "" && len(o.allowedOrigins) > 0 {
		return errors.New("--allowed-origin needs --listen")
	}
	for _, origin := range o.allowedOrigins {
		if err := checkOrigin(origin); err != nil {
			return err
		}
	}
	if o.listen != "" {
		return checkListen(o.listen, o.tlsCertFile, o.tlsKeyFile)
	}
	return nil
}

// Run reads the kubeconfig, resolves the namespaces to serve and serves
// MCP over stdio, or over HTTP with --listen, until ctx ends or SIGINT or
// SIGTERM arrives.
func (o *mcpOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	config, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return err
	}
	namespace, _, err := o.configFlags.ToRawKubeConfigLoader().Namespace()
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
		return serveMCPHTTP(ctx, config, scope, o.labelSelector, o.IOStreams, o)
	}
	return serveStdio(ctx, config, scope, o.labelSelector, o.IOStreams, o)
}
