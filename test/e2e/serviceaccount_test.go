package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster/localpath"
	"kruntimes.io/kruntimes/test/localcluster/nodeagent"
)

// The API-access volume the ServiceAccount admission plugin adds holds a
// token from TokenRequest bound to the Pod, the cluster CA and the namespace.
func TestPodGetsBoundServiceAccountToken(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "satoken")
	ctx := framework.Context(t, 2*time.Minute)
	deploy := testServerDeployment("token")
	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := waitForReadyPod(ctx, t, f, ns, "app=token", "")

	var volume string
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			volume = v.Name
		}
	}
	require.NotEmpty(t, volume, "ServiceAccount admission added a projected volume")
	dir := nodeagent.VolumeDir(filepath.Join(f.Cluster.Config().StateDir, "pods"), pod.UID, volume)
	var token []byte
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		token, err = os.ReadFile(filepath.Join(dir, "token"))
		if seen.Err(err) {
			return false, nil
		}
		return len(token) > 0, nil
	})
	require.NoError(t, err, "token file in %s", dir)
	for _, name := range []string{"ca.crt", "namespace"} {
		_, err := os.Stat(filepath.Join(dir, name))
		assert.NoError(t, err, name)
	}

	review, err := f.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: string(token)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.True(t, review.Status.Authenticated, review.Status.Error)
	assert.Equal(t, "system:serviceaccount:"+ns+":default", review.Status.User.Username)
	assert.Equal(t, []string{pod.Name}, []string(review.Status.User.Extra["authentication.kubernetes.io/pod-name"]))
}

// Containers of one Pod share its emptyDir volumes, and learn where they are.
func TestEmptyDirIsSharedWithinAPod(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "emptydir")
	ctx := framework.Context(t, 2*time.Minute)
	deploy := testServerDeployment("shared")
	spec := &deploy.Spec.Template.Spec
	spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	spec.Containers[0].Args = append(spec.Containers[0].Args, "--touch=$(KRUNTIMES_VOLUME_SCRATCH)/server")
	second := *spec.Containers[0].DeepCopy()
	second.Name = "second"
	second.Args = []string{"--listen=$(POD_IP):8081", "--touch=$(KRUNTIMES_VOLUME_SCRATCH)/second"}
	second.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8081}}
	spec.Containers = append(spec.Containers, second)
	_, err := f.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := waitForReadyPod(ctx, t, f, ns, "app=shared", "")

	dir := nodeagent.VolumeDir(filepath.Join(f.Cluster.Config().StateDir, "pods"), pod.UID, "scratch")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"server", "second"}, names)
}

// A PersistentVolumeClaim of the default StorageClass gets a directory of
// its own from the local-path provisioner, the node agent mounts it (a
// mountPath in args becomes that directory), and deleting the claim removes
// the volume and its directory.
func TestPersistentVolumeClaimIsADirectoryOfItsOwn(t *testing.T) {
	f := framework.Get(t)
	ns := f.CreateNamespace(t, "pvc")
	ctx := framework.Context(t, 2*time.Minute)
	claim, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	deploy := testServerDeployment("pvc")
	spec := &deploy.Spec.Template.Spec
	spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name},
	}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/data"}}
	spec.Containers[0].Args = append(spec.Containers[0].Args, "--touch=/var/lib/data/written")
	_, err = f.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
	require.NoError(t, err)
	waitForReadyPod(ctx, t, f, ns, "app=pvc", "")

	claim, err = f.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, corev1.ClaimBound, claim.Status.Phase)
	require.Equal(t, ptr.To(localpath.StorageClassName), claim.Spec.StorageClassName, "the default StorageClass")
	pv, err := f.Client.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, pv.Spec.HostPath)
	dir := pv.Spec.HostPath.Path
	assert.Equal(t, localpath.Dir(f.Cluster.VolumeRoot(), claim), dir, "a directory of the claim's own under the provisioner's root")
	assert.FileExists(t, filepath.Join(dir, "written"), "the Pod wrote through its mountPath into the claim's directory")

	require.NoError(t, f.Client.AppsV1().Deployments(ns).Delete(ctx, deploy.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}))
	require.NoError(t, f.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}))
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		_, err := f.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if !seen.Deleted(err) {
			return false, nil
		}
		_, statErr := os.Stat(dir)
		seen.State("volume deleted; directory: %v", statErr)
		return os.IsNotExist(statErr), nil
	}), "the released volume and its directory are removed")
}
