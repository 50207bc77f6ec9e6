package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

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
	raw := result.Output.Raw
	if len(raw) == 0 {
		raw = []byte("null") // the handler returned nothing
	}
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
