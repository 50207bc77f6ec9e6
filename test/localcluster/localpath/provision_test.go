package localpath

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestProvisionedDirectoryIsWorldWritableDespiteTheUmask(t *testing.T) {
	// A Pod on the real node runs as its runAsUser, and a hostPath volume
	// ignores fsGroup: the directory must be writable by anyone, as
	// Rancher's local-path provisioner makes it, whatever the umask.
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
	root := t.TempDir()
	p, err := New(fake.NewClientset(), root)
	require.NoError(t, err)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "kruntimes-system", Name: "kruntimes-data", UID: "0123"}}
	require.NoError(t, p.provision(context.Background(), pvc))
	info, err := os.Stat(Dir(root, pvc))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o777), info.Mode().Perm())
}
