package mcpserver

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
