package manager

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestDeployManifestsGrantPolicyRules: the ClusterRole users install with
// artifacts/deploy grants exactly what the controllers need.
func TestDeployManifestsGrantPolicyRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "deploy", "rbac.yaml"))
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var role rbacv1.ClusterRole
		err := dec.Decode(&role)
		if errors.Is(err, io.EOF) {
			t.Fatal("artifacts/deploy/rbac.yaml has no ClusterRole kruntimes-controllers")
		}
		require.NoError(t, err)
		if role.Kind == "ClusterRole" && role.Name == "kruntimes-controllers" {
			assert.Equal(t, PolicyRules(), role.Rules)
			return
		}
	}
}
