package mcpserver

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// toolScope is where krt mcp looks for tools: one namespace, several, or
// all of them.
type toolScope struct {
	// namespaces are the namespaces watched, sorted; nil with all.
	namespaces []string
	all        bool
}

// newToolScope resolves -n (each value may list several, comma-separated)
// and -A; defaultNamespace is the kubeconfig's, used when neither is given.
func newToolScope(namespaces []string, all bool, defaultNamespace string) (toolScope, error) {
	seen := map[string]bool{}
	var names []string
	for _, value := range namespaces {
		for _, ns := range strings.Split(value, ",") {
			ns = strings.TrimSpace(ns)
			if ns == "" {
				return toolScope{}, fmt.Errorf("-n %q: an empty namespace (give -n NAMESPACE[,NAMESPACE...], or -A for all)", value)
			}
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return toolScope{}, fmt.Errorf("-n %q: %s is not a namespace name: %s", value, ns, strings.Join(errs, "; "))
			}
			if !seen[ns] {
				seen[ns] = true
				names = append(names, ns)
			}
		}
	}
	if all {
		if len(names) > 0 {
			return toolScope{}, errors.New("-A (--all-namespaces) and -n cannot be used together: give one or the other")
		}
		return toolScope{all: true}, nil
	}
	if len(names) == 0 {
		names = []string{defaultNamespace}
	}
	sort.Strings(names)
	return toolScope{namespaces: names}, nil
}

// qualified says whether tool names carry their namespace: they do unless
// exactly one namespace is served, so that one namespace's names stay what
// they always were.
func (s toolScope) qualified() bool { return s.all || len(s.namespaces) > 1 }

// watched are the namespaces to list and watch Runs in, one watch each;
// metav1.NamespaceAll (one cluster-wide watch) with all.
func (s toolScope) watched() []string {
	if s.all {
		return []string{metav1.NamespaceAll}
	}
	return s.namespaces
}

func (s toolScope) String() string {
	switch {
	case s.all:
		return "all namespaces"
	case len(s.namespaces) == 1:
		return "namespace " + s.namespaces[0]
	}
	return "namespaces " + strings.Join(s.namespaces, ",")
}

// toolName is the tool name of the Run namespace/name in this scope.
func (s toolScope) toolName(namespace, name string) string {
	if s.qualified() {
		return QualifiedToolName(namespace, name)
	}
	return ToolName(name)
}

// shortened says whether the Run's tool name is shortened (and hashed)
// rather than its name, or NAMESPACE.NAME, as it is.
func (s toolScope) shortened(namespace, name string) bool {
	if s.qualified() {
		return len(namespace)+1+len(name) > maxToolNameLen
	}
	return len(name) > maxToolNameLen
}

// QualifiedToolName is the MCP tool name of the Run namespace/name when
// krt mcp serves several namespaces: ToolName of "NAMESPACE.NAME". A
// namespace is a DNS label (no "."), so the first "." separates it from
// the Run's name and two Runs never share the unshortened form; and it is
// at most 63 characters, so a shortened name still starts with
// "NAMESPACE." and Runs of different namespaces never share a tool name.
func QualifiedToolName(namespace, name string) string {
	return ToolName(namespace + "." + name)
}

// maxToolNameLen is MCP's bound on a tool name.
const maxToolNameLen = 128

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
