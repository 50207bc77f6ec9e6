package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestREADMEQuickstart runs the README's quickstart commands as a user
// pastes them, with bash, from the repository root, against the e2e cluster.
// Its kubeconfig's context points at a namespace of the test's own, so the
// commands (which name no namespace) touch nothing else.
func TestREADMEQuickstart(t *testing.T) {
	f := framework.Get(t)
	controllersClient(t, f)
	ns := f.CreateNamespace(t, "readme")
	ctx := framework.Context(t, 8*time.Minute)

	commands := quickstartCommands(t, filepath.Join(f.RepoRoot, "README.md"))
	require.NotEmpty(t, commands)
	require.Equal(t, "export KUBECONFIG=$PWD/.local/kubeconfig", commands[0], "the quickstart starts by pointing kubectl at make run's cluster")

	config, err := clientcmd.LoadFromFile(f.Kubeconfig)
	require.NoError(t, err)
	config.Contexts[config.CurrentContext].Namespace = ns
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*config, kubeconfig))

	for _, command := range commands[1:] {
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", command)
		cmd.Dir = f.RepoRoot
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "README quickstart command failed: %s\n%s", command, out)
		t.Logf("$ %s\n%s", command, strings.TrimRight(string(out), "\n"))
	}
}

// quickstartCommands returns the lines of the README's last sh block under
// "## Quickstart": what the user types in the second shell.
func quickstartCommands(t *testing.T, readme string) []string {
	t.Helper()
	file, err := os.Open(readme)
	require.NoError(t, err)
	defer file.Close()
	var inSection, inBlock bool
	var block []string
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := scanner.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = line == "## Quickstart"
		case inSection && line == "```sh":
			inBlock, block = true, nil
		case inSection && inBlock && line == "```":
			inBlock = false
		case inSection && inBlock && strings.TrimSpace(line) != "":
			block = append(block, line)
		}
	}
	require.NoError(t, scanner.Err())
	return block
}
