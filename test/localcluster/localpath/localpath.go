// Package localpath is the local cluster's volume provisioner: a default
// StorageClass whose every claim gets a hostPath PersistentVolume on a
// directory of its own, pre-bound to the claim, as rancher's local-path
// provisioner does on a one-node cluster. kube-controller-manager's
// PersistentVolume controller binds the pair; the node agent mounts the
// directory. A released volume (reclaim policy Delete) has its directory
// removed — only ever under the provisioner's root — and is deleted.
package localpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const (
	// StorageClassName is the default StorageClass.
	StorageClassName = "local-path"
	// ProvisionerName names this provisioner in the StorageClass and in each
	// volume's pv.kubernetes.io/provisioned-by annotation.
	ProvisionerName = "kruntimes.io/local-path"
	// provisionedBy is the annotation the PersistentVolume controller reads
	// to leave provisioning and deletion to an external provisioner.
	provisionedBy = "pv.kubernetes.io/provisioned-by"
	// storageProvisioner is set on a claim by the PersistentVolume
	// controller when an external provisioner must act.
	storageProvisioner = "volume.kubernetes.io/storage-provisioner"
	// resync bounds how long a missed event delays a volume.
	resync = 5 * time.Second
)

// Provisioner makes and removes the volumes of claims of the local-path
// StorageClass.
type Provisioner struct {
	client kubernetes.Interface
	root   string
	// removed are the volumes already removed, whose deletion the
	// informer may not have seen yet (Run's goroutine only).
	removed map[types.UID]bool
}

// New returns a provisioner whose volumes are directories under root.
func New(client kubernetes.Interface, root string) (*Provisioner, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	return &Provisioner{client: client, root: abs, removed: map[types.UID]bool{}}, nil
}

// Root is the directory every volume lives under.
func (p *Provisioner) Root() string { return p.root }

// EnsureStorageClass creates the default StorageClass (Immediate binding,
// reclaim policy Delete).
func (p *Provisioner) EnsureStorageClass(ctx context.Context) error {
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	_, err := p.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Run provisions and removes volumes until ctx ends.
func (p *Provisioner) Run(ctx context.Context) error {
	if err := os.MkdirAll(p.root, 0o755); err != nil {
		return err
	}
	if err := p.EnsureStorageClass(ctx); err != nil {
		return fmt.Errorf("creating StorageClass %s: %w", StorageClassName, err)
	}
	factory := informers.NewSharedInformerFactory(p.client, 0)
	claims := factory.Core().V1().PersistentVolumeClaims()
	volumes := factory.Core().V1().PersistentVolumes()
	due := make(chan struct{}, 1)
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger(due) },
		UpdateFunc: func(any, any) { trigger(due) },
		DeleteFunc: func(any) { trigger(due) },
	}
	if _, err := claims.Informer().AddEventHandler(kick); err != nil {
		return err
	}
	if _, err := volumes.Informer().AddEventHandler(kick); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), claims.Informer().HasSynced, volumes.Informer().HasSynced) {
		return ctx.Err()
	}
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	for {
		p.sync(ctx, claims.Lister(), volumes.Lister())
		select {
		case <-ctx.Done():
			return nil
		case <-due:
		case <-ticker.C:
		}
	}
}

func trigger(due chan struct{}) {
	select {
	case due <- struct{}{}:
	default:
	}
}

// sync provisions a volume for every pending claim of the class and
// removes every released volume this provisioner made.
func (p *Provisioner) sync(ctx context.Context, claims corelisters.PersistentVolumeClaimLister, volumes corelisters.PersistentVolumeLister) {
	logger := klog.FromContext(ctx)
	pvcs, _ := claims.List(labels.Everything())
	for _, pvc := range pvcs {
		if !p.wants(pvc) {
			continue
		}
		if _, err := volumes.Get(VolumeName(pvc)); err == nil {
			continue
		}
		if err := p.provision(ctx, pvc); err != nil {
			logger.Error(err, "Provisioning a volume", "claim", klog.KObj(pvc))
		}
	}
	pvs, _ := volumes.List(labels.Everything())
	for _, pv := range pvs {
		if pv.Annotations[provisionedBy] != ProvisionerName || pv.DeletionTimestamp != nil || p.removed[pv.UID] {
			continue
		}
		if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
			continue
		}
		if err := p.remove(ctx, pv); err != nil {
			logger.Error(err, "Removing a released volume", "volume", pv.Name)
		}
	}
}

// wants reports whether pvc is a claim of this class still waiting for a
// volume.
func (p *Provisioner) wants(pvc *corev1.PersistentVolumeClaim) bool {
	if pvc.DeletionTimestamp != nil || pvc.Spec.VolumeName != "" || pvc.Status.Phase == corev1.ClaimBound {
		return false
	}
	class := ptr.Deref(pvc.Spec.StorageClassName, "")
	return class == StorageClassName || pvc.Annotations[storageProvisioner] == ProvisionerName
}

// VolumeName is the PersistentVolume made for pvc.
func VolumeName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

// Dir is the directory of pvc's volume under root.
func Dir(root string, pvc *corev1.PersistentVolumeClaim) string {
	return filepath.Join(root, pvc.Namespace+"_"+pvc.Name+"_"+string(pvc.UID))
}

func (p *Provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	dir := Dir(p.root, pvc)
	// World-writable, as Rancher's local-path provisioner (kind's default
	// StorageClass) makes it: a hostPath volume ignores fsGroup, and on
	// the real node the Pod runs as its runAsUser, not root. Chmod too:
	// MkdirAll's mode passes through the umask.
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		size = resource.MustParse("1Gi")
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        VolumeName(pvc),
			Annotations: map[string]string{provisionedBy: ProvisionerName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              StorageClassName,
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)},
			},
			// Pre-bound: the PersistentVolume controller completes the
			// binding on the claim's side.
			ClaimRef: &corev1.ObjectReference{
				Kind:            "PersistentVolumeClaim",
				APIVersion:      "v1",
				Namespace:       pvc.Namespace,
				Name:            pvc.Name,
				UID:             pvc.UID,
				ResourceVersion: pvc.ResourceVersion,
			},
		},
	}
	if len(pv.Spec.AccessModes) == 0 {
		pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	_, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		klog.FromContext(ctx).Info("Provisioned a volume", "claim", klog.KObj(pvc), "volume", pv.Name, "path", dir)
	}
	return err
}

// remove deletes a released volume's directory, refusing any path outside
// the root, and then the volume.
func (p *Provisioner) remove(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.HostPath == nil {
		return fmt.Errorf("volume %s has no hostPath", pv.Name)
	}
	dir, err := p.within(pv.Spec.HostPath.Path)
	if err != nil {
		return fmt.Errorf("volume %s: %w", pv.Name, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	err = p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pv.UID},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		p.removed[pv.UID] = true
		klog.FromContext(ctx).Info("Removed a released volume", "volume", pv.Name, "path", dir)
	}
	return err
}

// within returns path cleaned when it is a directory strictly below the
// root, and an error otherwise: a volume edited to point at / or at the
// root itself is never removed.
func (p *Provisioner) within(path string) (string, error) {
	clean := filepath.Clean(path)
	rel, err := filepath.Rel(p.root, clean)
	if err != nil || !filepath.IsAbs(clean) || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q is not below the provisioner's root %s; left alone", path, p.root)
	}
	return clean, nil
}
