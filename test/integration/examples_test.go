package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver"
)

// TestExamplesAreValid creates every object of artifacts/examples, so the
// examples users paste stay accepted by the server.
func TestExamplesAreValid(t *testing.T) {
	s := startServer(t, "")
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join("..", "..", "artifacts", "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	decoder := serializer.NewCodecFactory(apiserver.Scheme).UniversalDeserializer()
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			obj, _, err := decoder.Decode(data, nil, nil)
			require.NoError(t, err)
			switch o := obj.(type) {
			case *v1alpha1.Run:
				_, err = s.client.KruntimesV1alpha1().Runs(namespace).Create(ctx, o, metav1.CreateOptions{})
			case *v1alpha1.Runtime:
				_, err = s.client.KruntimesV1alpha1().Runtimes(namespace).Create(ctx, o, metav1.CreateOptions{})
			default:
				t.Fatalf("unexpected kind %T in %s", obj, file)
			}
			assert.NoError(t, err)
		})
	}
}
