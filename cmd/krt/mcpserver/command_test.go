package mcpserver_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kruntimes.io/kruntimes/cmd/krt/app"
	"kruntimes.io/kruntimes/cmd/krt/mcpserver"
)

func TestMCPHelpNamesTheProtocolRevision(t *testing.T) {
	assert.Equal(t, "2026-07-28", mcpserver.MCPProtocolRevision, "the newest revision of go-sdk v1.8.0; change the docs with the SDK")
	streams, out, _ := streamsOf("")
	require.Equal(t, app.ExitOK, app.Run([]string{"mcp", "--help"}, streams))
	assert.Contains(t, out.String(), "Protocol revision 2026-07-28")
	assert.Contains(t, out.String(), mcpserver.DefaultToolSelector)
	assert.Contains(t, out.String(), "--listen")
	assert.Contains(t, out.String(), "--sandbox-runtime")
}

func TestMCPListenRefusesNonLoopbackWithoutTLS(t *testing.T) {
	streams, _, errOut := streamsOf("")
	require.Equal(t, app.ExitError, app.Run([]string{"mcp", "--listen", "0.0.0.0:0"}, streams))
	assert.Contains(t, errOut.String(), `--listen "0.0.0.0:0" is not a loopback address`)
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
			require.Equal(t, app.ExitError, app.Run(append([]string{"--kubeconfig", kubeconfig, "mcp"}, tc.args...), streams))
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
}

func streamsOf(in string) (genericiooptions.IOStreams, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return genericiooptions.IOStreams{In: strings.NewReader(in), Out: &out, ErrOut: &errOut}, &out, &errOut
}
