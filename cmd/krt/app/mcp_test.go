package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

var validToolName = func(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func TestToolName(t *testing.T) {
	assert.Equal(t, "forecast", ToolName("forecast"))
	assert.Equal(t, "a.b-c", ToolName("a.b-c"), "a DNS subdomain is a valid MCP name as it is")
	exact := strings.Repeat("x", 128)
	assert.Equal(t, exact, ToolName(exact))

	long := strings.Repeat("a", 200)
	other := strings.Repeat("a", 199) + "b"
	for _, name := range []string{long, other, strings.Repeat("a.b-", 63)} {
		got := ToolName(name)
		assert.True(t, validToolName(got), "%q", got)
		assert.Len(t, got, 128)
		assert.Equal(t, got, ToolName(name), "stable")
	}
	assert.NotEqual(t, ToolName(long), ToolName(other), "names sharing their first 119 characters differ by the hash")
	assert.True(t, strings.HasPrefix(ToolName(long), strings.Repeat("a", 119)+"-"))
}

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

func TestAccessCache(t *testing.T) {
	now := time.Unix(1000, 0)
	var asked atomic.Int32
	fail := false
	c := &accessCache{
		now: func() time.Time { return now },
		review: func(_ context.Context, ns, name string) (bool, error) {
			asked.Add(1)
			if fail {
				return false, errors.New("down")
			}
			return name == "yes", nil
		},
	}
	run := func(name string) *v1alpha1.Run {
		return &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	}
	runs := []*v1alpha1.Run{run("yes"), run("no")}
	assert.Equal(t, []bool{true, false}, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 2, asked.Load())
	now = now.Add(29 * time.Second)
	assert.Equal(t, []bool{true, false}, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 2, asked.Load(), "answers are reused within 30 s")
	now = now.Add(time.Second)
	fail = true
	assert.Equal(t, []bool{false, false}, c.allowedAll(context.Background(), runs), "a failed review is not allowed")
	assert.EqualValues(t, 4, asked.Load(), "answers 30 s old are asked again")
	fail = false
	assert.Equal(t, []bool{true, false}, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 6, asked.Load(), "a failed review is not cached")
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

func TestMCPHelpNamesTheProtocolRevision(t *testing.T) {
	assert.Equal(t, "2026-07-28", MCPProtocolRevision, "the newest revision of go-sdk v1.8.0; change the docs with the SDK")
	streams, out, _ := streamsOf("")
	require.Equal(t, ExitOK, Run([]string{"mcp", "--help"}, streams))
	assert.Contains(t, out.String(), "Protocol revision 2026-07-28")
	assert.Contains(t, out.String(), DefaultToolSelector)
	assert.Contains(t, out.String(), "--listen")
	assert.Contains(t, out.String(), "--sandbox-runtime")
}

func TestMayInvoke(t *testing.T) {
	rule := func(verbs, groups, resources, names []string) authorizationv1.ResourceRule {
		return authorizationv1.ResourceRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
	}
	one := []string{"create"}
	group := []string{"kruntimes.io"}
	for _, c := range []struct {
		name  string
		rules []authorizationv1.ResourceRule
		want  bool
	}{
		{"the invoker role", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/invoke"}, nil)}, true},
		{"named", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/invoke"}, []string{"other", "forecast"})}, true},
		{"another name", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/invoke"}, []string{"other"})}, false},
		{"everything (system:masters)", []authorizationv1.ResourceRule{rule([]string{"*"}, []string{"*"}, []string{"*"}, nil)}, true},
		{"*/invoke", []authorizationv1.ResourceRule{rule(one, group, []string{"*/invoke"}, nil)}, true},
		{"runs/* is not RBAC", []authorizationv1.ResourceRule{rule(one, group, []string{"runs/*"}, nil)}, false},
		{"reading only (kruntimes-view)", []authorizationv1.ResourceRule{rule([]string{"get", "list", "watch"}, group, []string{"runs", "runs/status"}, nil)}, false},
		{"runs, not the subresource", []authorizationv1.ResourceRule{rule([]string{"*"}, group, []string{"runs"}, nil)}, false},
		{"another group", []authorizationv1.ResourceRule{rule(one, []string{"example.com"}, []string{"runs/invoke"}, nil)}, false},
		{"none", nil, false},
	} {
		assert.Equal(t, c.want, mayInvoke(c.rules, "forecast"), c.name)
	}
}

// TestAccessCacheRulesReview: more Runs than one round of reviews are
// answered from one SelfSubjectRulesReview when it is complete, and asked
// one by one when it is not.
func TestAccessCacheRulesReview(t *testing.T) {
	var reviews, rulesReviews atomic.Int32
	complete := true
	c := &accessCache{
		now: time.Now,
		review: func(_ context.Context, ns, name string) (bool, error) {
			reviews.Add(1)
			return name == "run-3", nil
		},
		rules: func(_ context.Context, ns string) ([]authorizationv1.ResourceRule, bool, error) {
			rulesReviews.Add(1)
			return []authorizationv1.ResourceRule{{Verbs: []string{"create"}, APIGroups: []string{"kruntimes.io"}, Resources: []string{"runs/invoke"}, ResourceNames: []string{"run-3"}}}, complete, nil
		},
	}
	var runs []*v1alpha1.Run
	for i := range 20 {
		name := fmt.Sprintf("run-%d", i)
		runs = append(runs, &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}})
	}
	want := make([]bool, 20)
	want[3] = true
	assert.Equal(t, want, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 1, rulesReviews.Load())
	assert.EqualValues(t, 0, reviews.Load())
	assert.Equal(t, want, c.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 1, rulesReviews.Load(), "cached")

	c2 := &accessCache{now: time.Now, review: c.review, rules: c.rules}
	complete = false
	assert.Equal(t, want, c2.allowedAll(context.Background(), runs))
	assert.EqualValues(t, 2, rulesReviews.Load())
	assert.EqualValues(t, 20, reviews.Load(), "incomplete rules: a review per Run")

	c3 := &accessCache{now: time.Now, review: c.review, rules: c.rules}
	complete = true
	assert.Equal(t, want[:8], c3.allowedAll(context.Background(), runs[:8]))
	assert.EqualValues(t, 2, rulesReviews.Load(), "one round of reviews is asked directly")
	assert.EqualValues(t, 28, reviews.Load())
}
