package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

func textOf(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	require.Len(t, r.Content, 1)
	text, ok := r.Content[0].(*mcp.TextContent)
	require.True(t, ok, "%T", r.Content[0])
	return text.Text
}

func statusErr(code int32, reason metav1.StatusReason, message string, details *metav1.StatusDetails) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message, Details: details}}
}

func TestCallResult(t *testing.T) {
	t.Run("an object is structured content and text", func(t *testing.T) {
		r := callResult(&v1alpha1.InvokeResult{Output: runtime.RawExtension{Raw: []byte(`{"city":"Oslo"}`)}}, nil, "id")
		assert.False(t, r.IsError)
		assert.Equal(t, json.RawMessage(`{"city":"Oslo"}`), r.StructuredContent)
		assert.Equal(t, `{"city":"Oslo"}`, textOf(t, r))
	})
	t.Run("anything else is text only", func(t *testing.T) {
		for raw, text := range map[string]string{`[1,2]`: `[1,2]`, `"hi"`: `"hi"`, ``: `null`} {
			r := callResult(&v1alpha1.InvokeResult{Output: runtime.RawExtension{Raw: []byte(raw)}}, nil, "id")
			assert.False(t, r.IsError)
			assert.Nil(t, r.StructuredContent, raw)
			assert.Equal(t, text, textOf(t, r))
		}
	})
	t.Run("a handler error", func(t *testing.T) {
		r := callResult(&v1alpha1.InvokeResult{InvocationID: "inv-1", Error: &v1alpha1.InvokeError{Type: "ValueError", Message: "no good"}}, nil, "inv-1")
		assert.True(t, r.IsError)
		assert.Equal(t, "the function ran and failed (invocation inv-1): ValueError: no good", textOf(t, r))
	})

	cases := []struct {
		name string
		err  error
		want []string
	}{
		{"429", apierrors.NewTooManyRequests("an invocation is in flight", 1),
			[]string{"the function did not run", "busy", "may be made again after 1 s"}},
		{"kruntimes' 503 with Retry-After", statusErr(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "not Ready", &metav1.StatusDetails{RetryAfterSeconds: 5}),
			[]string{"the function did not run", "unavailable", "after 5 s"}},
		{"a proxy's plain 503", statusErr(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "", nil),
			[]string{"the outcome is unknown", "may have run", "not re-sent"}},
		{"502", statusErr(http.StatusBadGateway, metav1.StatusReasonUnknown, "the connection broke", &metav1.StatusDetails{}),
			[]string{"the outcome is unknown", "may have run", "not re-sent"}},
		{"504", statusErr(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "deadline", &metav1.StatusDetails{}),
			[]string{"the outcome is unknown", "timed out", "not re-sent"}},
		{"a broken connection", errors.New("unexpected EOF"),
			[]string{"the outcome is unknown"}},
		{"schema violations", statusErr(http.StatusBadRequest, metav1.StatusReasonBadRequest, "the input does not match", &metav1.StatusDetails{Causes: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueRequired, Message: "Required value", Field: "input.city"},
			{Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: 40: days in body should be less than or equal to 16", Field: "input.days"},
		}}), []string{"do not match the tool's input schema", "did not run", "\n- city: Required value", "\n- days: Invalid value: 40"}},
		{"404", apierrors.NewNotFound(v1alpha1.Resource("runs"), "forecast"),
			[]string{"did not run", "gone"}},
		{"403", apierrors.NewForbidden(v1alpha1.Resource("runs"), "forecast", errors.New("no")),
			[]string{"did not run", "may not invoke"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := callResult(nil, c.err, "inv-2")
			assert.True(t, r.IsError)
			assert.Nil(t, r.StructuredContent)
			text := textOf(t, r)
			for _, w := range c.want {
				assert.Contains(t, text, w)
			}
		})
	}
}

// TestToolSetSync: the server's tools are the Ready function Runs the
// reviewer allows, with their descriptions and schemas, listed through the
// SDK's own client over its in-memory transport.
func TestToolSetSync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ready := []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue}}
	function := func(name string, conditions []metav1.Condition) *v1alpha1.Run {
		return &v1alpha1.Run{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec:       v1alpha1.RunSpec{Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "h.h"}}},
			Status:     v1alpha1.RunStatus{Conditions: conditions},
		}
	}
	typed := function("typed", ready)
	typed.Spec.Mode.Function.Description = "Typed."
	typed.Spec.Mode.Function.Schema = &v1alpha1.FunctionSchema{
		Input:  &runtime.RawExtension{Raw: []byte(`{"type":"object","required":["a"]}`)},
		Output: &runtime.RawExtension{Raw: []byte(`{"type":"object"}`)},
	}
	task := function("task", ready)
	task.Spec.Mode.Function = nil
	for _, run := range []*v1alpha1.Run{typed, function("plain", ready), function("denied", ready), function("starting", nil), task} {
		require.NoError(t, indexer.Add(run))
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "krt", Version: "test"}, nil)
	tools := &toolSet{
		server:  server,
		listers: []listersv1alpha1.RunLister{listersv1alpha1.NewRunLister(indexer)},
		access: &accessCache{now: time.Now, review: func(_ context.Context, ns, name string) (bool, error) {
			return name != "denied", nil
		}},
		scope:  toolScope{namespaces: []string{"ns"}},
		served: map[string]servedTool{},
	}
	tools.sync(ctx)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
	}
	require.Len(t, byName, 2, "only the Ready function Runs the caller may invoke")
	require.Contains(t, byName, "typed")
	require.Contains(t, byName, "plain")
	assert.Equal(t, "Typed.", byName["typed"].Description)
	in, _ := json.Marshal(byName["typed"].InputSchema)
	assert.JSONEq(t, `{"type":"object","required":["a"]}`, string(in))
	out, _ := json.Marshal(byName["typed"].OutputSchema)
	assert.JSONEq(t, `{"type":"object"}`, string(out))
	in, _ = json.Marshal(byName["plain"].InputSchema)
	assert.JSONEq(t, `{"type":"object"}`, string(in))
	assert.Nil(t, byName["plain"].OutputSchema)

	require.NoError(t, indexer.Delete(typed))
	tools.sync(ctx)
	res, err = cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.Len(t, res.Tools, 1)
	assert.Equal(t, "plain", res.Tools[0].Name)
}

// TestToolSetSyncNamespaces: serving several namespaces, a Run name that is
// in both is two tools, NAMESPACE.NAME each, called in its own namespace;
// each namespace's reviews are its own; of two Runs sharing a tool name,
// the one named so verbatim is served.
func TestToolSetSyncNamespaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ready := []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue}}
	function := func(ns, name string) *v1alpha1.Run {
		return &v1alpha1.Run{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)},
			Spec:       v1alpha1.RunSpec{Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "h.h"}}},
			Status:     v1alpha1.RunStatus{Conditions: ready},
		}
	}
	// A Run named exactly like the shortened tool name of another, which
	// sorts before it (so is seen first).
	long := strings.Repeat("x", 117) + "-0" + strings.Repeat("y", 40)
	impostor := QualifiedToolName("a", long)[len("a."):]
	require.Less(t, long, impostor, "the shortened one is seen first")
	a := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	b := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, run := range []*v1alpha1.Run{function("a", "forecast"), function("a", "secret"), function("a", long), function("a", impostor)} {
		require.NoError(t, a.Add(run))
	}
	require.NoError(t, b.Add(function("b", "forecast")))
	server := mcp.NewServer(&mcp.Implementation{Name: "krt", Version: "test"}, nil)
	var warnings strings.Builder
	tools := &toolSet{
		server:  server,
		listers: []listersv1alpha1.RunLister{listersv1alpha1.NewRunLister(a), listersv1alpha1.NewRunLister(b)},
		access: &accessCache{now: time.Now, review: func(_ context.Context, ns, name string) (bool, error) {
			return !(ns == "a" && name == "secret"), nil
		}},
		scope:    toolScope{namespaces: []string{"a", "b"}},
		served:   map[string]servedTool{},
		warnings: &warnings,
	}
	tools.sync(ctx)
	tools.sync(ctx)
	assert.Equal(t, "krt mcp: not serving the Run a/"+long+": its tool name a."+impostor+" is the one of a/"+impostor+"\n", warnings.String(),
		"the hidden Run is reported once, not at every sync")
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
	}
	assert.Len(t, byName, 3)
	assert.Contains(t, byName, "a.forecast")
	assert.Contains(t, byName, "b.forecast")
	assert.NotContains(t, byName, "a.secret", "a's reviewer says no")
	require.Contains(t, byName, "a."+impostor)
	assert.Equal(t, "Invokes the function Run a/"+impostor+".", byName["a."+impostor].Description, "the Run named verbatim keeps the name")
	assert.Equal(t, "Invokes the function Run b/forecast.", byName["b.forecast"].Description)
}

func TestSandboxRunIsNotATool(t *testing.T) {
	ready := []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue}}
	run := &v1alpha1.Run{
		Spec:   v1alpha1.RunSpec{Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "tools.forecast"}}},
		Status: v1alpha1.RunStatus{Conditions: ready},
	}
	assert.True(t, isTool(run))
	run.Spec.Mode.Function.Handler = SandboxHandler
	assert.False(t, isTool(run), "the sandbox tools serve sandboxes")
}
