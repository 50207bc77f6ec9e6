package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	listersv1alpha1 "kruntimes.io/kruntimes/client/listers/kruntimes/v1alpha1"
)

func TestNewToolScope(t *testing.T) {
	for _, tc := range []struct {
		name      string
		values    []string
		all       bool
		want      toolScope
		qualified bool
		err       string
	}{
		{name: "no -n serves the kubeconfig's namespace, names unqualified", want: toolScope{namespaces: []string{"default-ns"}}},
		{name: "one -n serves it, names unqualified", values: []string{"a"}, want: toolScope{namespaces: []string{"a"}}},
		{name: "comma-separated and repeated -n are merged, sorted, without duplicates", values: []string{"b,a", "c", "a"}, want: toolScope{namespaces: []string{"a", "b", "c"}}, qualified: true},
		{name: "-n a,a is one namespace", values: []string{"a,a"}, want: toolScope{namespaces: []string{"a"}}},
		{name: "-A serves all, names qualified", all: true, want: toolScope{all: true}, qualified: true},
		{name: "-A with -n is refused", values: []string{"a"}, all: true, err: "-A (--all-namespaces) and -n cannot be used together"},
		{name: "an empty namespace is refused", values: []string{"a,"}, err: "an empty namespace"},
		{name: "a name that is no namespace is refused", values: []string{"a.b"}, err: "a.b is not a namespace name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newToolScope(tc.values, tc.all, "default-ns")
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.qualified, got.qualified())
		})
	}
	all := toolScope{all: true}
	assert.Equal(t, []string{metav1.NamespaceAll}, all.watched(), "-A is one cluster-wide watch")
}

func TestQualifiedToolName(t *testing.T) {
	one := toolScope{namespaces: []string{"team-a"}}
	several := toolScope{namespaces: []string{"team-a", "team-b"}}
	assert.Equal(t, "forecast", one.toolName("team-a", "forecast"), "one namespace: names as they always were")
	assert.Equal(t, "team-a.forecast", several.toolName("team-a", "forecast"))
	assert.Equal(t, "team-a.a.b", several.toolName("team-a", "a.b"), "the first dot ends the namespace")
	assert.NotEqual(t, several.toolName("team-a", "x"), several.toolName("team-b", "x"), "one name in two namespaces")

	// The longest namespace and names that share their first 119
	// characters once qualified: shortened, valid, stable, and apart.
	ns := strings.Repeat("n", 63)
	long := strings.Repeat("r", 200)
	for _, name := range []string{long, long + "x", strings.Repeat("a.b-", 50)} {
		got := QualifiedToolName(ns, name)
		assert.True(t, validToolName(got), "%q", got)
		assert.Len(t, got, 128)
		assert.True(t, strings.HasPrefix(got, ns+"."), "a shortened name keeps its namespace")
		assert.Equal(t, got, QualifiedToolName(ns, name), "stable")
	}
	assert.NotEqual(t, QualifiedToolName(ns, long), QualifiedToolName(ns, long+"x"))
	otherNS := strings.Repeat("n", 62) + "m"
	assert.NotEqual(t, QualifiedToolName(ns, long), QualifiedToolName(otherNS, long))
	assert.True(t, several.shortened(ns, long))
	assert.False(t, several.shortened("a", "b"))
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

// TestAccessCacheNamespaces: Runs of several namespaces are reviewed each in
// its own namespace, with one rules review per namespace that has many.
func TestAccessCacheNamespaces(t *testing.T) {
	var asked []string
	c := &accessCache{
		now: time.Now,
		review: func(_ context.Context, ns, name string) (bool, error) {
			return ns == "small" && name == "run-1", nil
		},
		rules: func(_ context.Context, ns string) ([]authorizationv1.ResourceRule, bool, error) {
			asked = append(asked, ns)
			return []authorizationv1.ResourceRule{{Verbs: []string{"create"}, APIGroups: []string{"kruntimes.io"}, Resources: []string{"runs/invoke"}, ResourceNames: []string{"run-3"}}}, true, nil
		},
	}
	var runs []*v1alpha1.Run
	var want []bool
	for _, ns := range []string{"big", "small"} {
		n := 20
		if ns == "small" {
			n = 2
		}
		for i := range n {
			name := fmt.Sprintf("run-%d", i)
			runs = append(runs, &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)}})
			want = append(want, ns == "big" && i == 3 || ns == "small" && i == 1)
		}
	}
	assert.Equal(t, want, c.allowedAll(context.Background(), runs))
	assert.Equal(t, []string{"big"}, asked, "a rules review for the namespace with more than 8 Runs only")
}

// TestMCPNamespaceFlags: krt mcp's -n takes several namespaces, comma-
// separated or repeated, and -A; what cannot be served is refused before
// anything is asked of the cluster.
func TestMCPNamespaceFlags(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: home}}]
current-context: c
`), 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "b,a", "-n", "c", "--sandbox-runtime", "sandbox"}, "--sandbox-runtime needs a single namespace (-n NAMESPACE), the one sandboxes are created in; namespaces a,b,c were given"},
		{[]string{"-A", "--sandbox-runtime", "sandbox"}, "all namespaces were given"},
		{[]string{"-A", "-n", "a"}, "-A (--all-namespaces) and -n cannot be used together"},
		{[]string{"--namespace", "Not_A_Namespace"}, "Not_A_Namespace is not a namespace name"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			streams, _, errOut := streamsOf("")
			require.Equal(t, ExitError, Run(append([]string{"--kubeconfig", kubeconfig, "mcp"}, tc.args...), streams))
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}
