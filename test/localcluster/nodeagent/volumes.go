package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// tokenRefreshCheck is how often projected tokens are checked for renewal.
const tokenRefreshCheck = 30 * time.Second

// podVolumes are the host directories backing a Pod's volumes.
type podVolumes struct {
	paths  map[string]string
	tokens []*projectedToken
	cancel context.CancelFunc
	done   chan struct{}
}

// projectedToken is a service-account token file kept fresh.
type projectedToken struct {
	path      string
	source    corev1.ServiceAccountTokenProjection
	expiresAt time.Time
	issuedAt  time.Time
}

func (v *podVolumes) hostPath(name string) (string, bool) {
	if v == nil {
		return "", false
	}
	p, ok := v.paths[name]
	return p, ok
}

func (v *podVolumes) stopRefresh() {
	if v.cancel != nil {
		v.cancel()
		<-v.done
	}
}

// setupVolumes materializes every volume of pod under dir/volumes and starts
// refreshing projected service-account tokens.
func setupVolumes(ctx context.Context, a *Agent, pod *corev1.Pod, dir string) (*podVolumes, error) {
	v := &podVolumes{paths: map[string]string{}}
	for _, vol := range pod.Spec.Volumes {
		path := filepath.Join(dir, "vol", vol.Name)
		switch {
		case vol.HostPath != nil:
			path = vol.HostPath.Path
		case vol.EmptyDir != nil:
			if err := os.MkdirAll(path, 0o777); err != nil {
				return nil, err
			}
		case vol.Projected != nil:
			if err := v.writeProjected(ctx, a, pod, path, vol.Projected); err != nil {
				return nil, fmt.Errorf("volume %q: %w", vol.Name, err)
			}
		case vol.ConfigMap != nil:
			cm, err := a.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, vol.ConfigMap.Name, metav1.GetOptions{})
			if err != nil && !(vol.ConfigMap.Optional != nil && *vol.ConfigMap.Optional) {
				return nil, fmt.Errorf("volume %q: %w", vol.Name, err)
			}
			if err := writeKeys(path, cm.Data, nil, vol.ConfigMap.Items); err != nil {
				return nil, err
			}
		case vol.Secret != nil:
			s, err := a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, vol.Secret.SecretName, metav1.GetOptions{})
			if err != nil && !(vol.Secret.Optional != nil && *vol.Secret.Optional) {
				return nil, fmt.Errorf("volume %q: %w", vol.Name, err)
			}
			if err := writeKeys(path, nil, s.Data, vol.Secret.Items); err != nil {
				return nil, err
			}
		case vol.PersistentVolumeClaim != nil:
			host, err := claimPath(ctx, a, pod.Namespace, vol.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, fmt.Errorf("volume %q: %w", vol.Name, err)
			}
			path = host
		default:
			return nil, fmt.Errorf("volume %q: only emptyDir, hostPath, persistentVolumeClaim, projected, configMap and secret volumes run on the local node", vol.Name)
		}
		v.paths[vol.Name] = path
	}
	if len(v.tokens) > 0 {
		refreshCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.FromContext(ctx)))
		v.cancel = cancel
		v.done = make(chan struct{})
		go func() {
			defer close(v.done)
			wait.UntilWithContext(refreshCtx, func(ctx context.Context) { v.refreshTokens(ctx, a, pod) }, tokenRefreshCheck)
		}()
	}
	return v, nil
}

// claimPath is the host directory of a PersistentVolumeClaim: the hostPath
// of the volume it is bound to (the local-path provisioner makes one per
// claim). A claim not yet bound is an error, which the caller retries.
func claimPath(ctx context.Context, a *Agent, namespace, name string) (string, error) {
	pvc, err := a.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("PersistentVolumeClaim %s/%s is %s, not Bound", namespace, name, pvc.Status.Phase)
	}
	pv, err := a.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path, nil
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path, nil
	}
	return "", fmt.Errorf("PersistentVolume %s of claim %s/%s is neither hostPath nor local: the local node mounts only directories", pv.Name, namespace, name)
}

func (v *podVolumes) writeProjected(ctx context.Context, a *Agent, pod *corev1.Pod, dir string, proj *corev1.ProjectedVolumeSource) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, src := range proj.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			t := &projectedToken{path: filepath.Join(dir, src.ServiceAccountToken.Path), source: *src.ServiceAccountToken}
			if err := t.refresh(ctx, a, pod); err != nil {
				return err
			}
			v.tokens = append(v.tokens, t)
		case src.ConfigMap != nil:
			cm, err := a.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				if src.ConfigMap.Optional != nil && *src.ConfigMap.Optional {
					continue
				}
				return err
			}
			if err := writeKeys(dir, cm.Data, nil, src.ConfigMap.Items); err != nil {
				return err
			}
		case src.Secret != nil:
			s, err := a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, src.Secret.Name, metav1.GetOptions{})
			if err != nil {
				if src.Secret.Optional != nil && *src.Secret.Optional {
					continue
				}
				return err
			}
			if err := writeKeys(dir, nil, s.Data, src.Secret.Items); err != nil {
				return err
			}
		case src.DownwardAPI != nil:
			for _, item := range src.DownwardAPI.Items {
				if item.FieldRef == nil {
					continue
				}
				val, err := fieldValue(pod, pod.Status.PodIP, item.FieldRef.FieldPath)
				if err != nil {
					return err
				}
				if err := writeFileAtomic(filepath.Join(dir, item.Path), []byte(val)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// refresh requests a new token bound to the Pod, as the kubelet does.
func (t *projectedToken) refresh(ctx context.Context, a *Agent, pod *corev1.Pod) error {
	var audiences []string
	if t.source.Audience != "" {
		audiences = []string{t.source.Audience}
	}
	seconds := int64(3600)
	if t.source.ExpirationSeconds != nil {
		seconds = *t.source.ExpirationSeconds
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: ptr.To(seconds),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	if err := writeFileAtomic(t.path, []byte(tr.Status.Token)); err != nil {
		return err
	}
	t.issuedAt = time.Now()
	t.expiresAt = tr.Status.ExpirationTimestamp.Time
	return nil
}

// refreshTokens renews tokens past 80% of their lifetime, the kubelet's rule.
func (v *podVolumes) refreshTokens(ctx context.Context, a *Agent, pod *corev1.Pod) {
	for _, t := range v.tokens {
		due := t.issuedAt.Add(t.expiresAt.Sub(t.issuedAt) * 8 / 10)
		if time.Now().Before(due) {
			continue
		}
		if err := t.refresh(ctx, a, pod); err != nil {
			klog.FromContext(ctx).Error(err, "Refreshing projected token")
		}
	}
}

func writeKeys(dir string, data map[string]string, binary map[string][]byte, items []corev1.KeyToPath) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	all := map[string][]byte{}
	for k, val := range data {
		all[k] = []byte(val)
	}
	for k, val := range binary {
		all[k] = val
	}
	if len(items) == 0 {
		for k, val := range all {
			if err := writeFileAtomic(filepath.Join(dir, k), val); err != nil {
				return err
			}
		}
		return nil
	}
	for _, item := range items {
		if err := writeFileAtomic(filepath.Join(dir, item.Path), all[item.Key]); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic replaces path so readers never see a partial file.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
