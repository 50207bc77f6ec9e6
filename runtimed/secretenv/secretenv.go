package secretenv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/runtimepod"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// RefusedError is a variable the attempt cannot have: its Secret or key is
// missing, runtimed may not read the Secret, or the value cannot be an
// environment variable. Reading again does not help until someone acts, so
// the attempt fails with its message. The message names the variable, the
// Secret and the key, never the value.
type RefusedError struct {
	// Message says what is wrong and what to do.
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

// IsRefused reports whether err is (or wraps) a RefusedError. Any other
// error from Resolve is transient: the same attempt resolves again.
func IsRefused(err error) bool {
	var refused *RefusedError
	return errors.As(err, &refused)
}

// Resolve returns run's environment in spec order. Each Secret named by a
// secretKeyRef is read once, by a GET of that one Secret in run's namespace:
// runtimed needs no list or watch of Secrets, and no right to any Secret the
// namespace did not grant its Runtime's ServiceAccount by name.
func Resolve(ctx context.Context, secrets corev1client.SecretsGetter, run *v1alpha1.Run) ([]*runtimev1.EnvVar, error) {
	read := map[string]map[string][]byte{} // Secret name → data; nil when it does not exist
	var env []*runtimev1.EnvVar
	for _, e := range run.Spec.Env {
		ref := secretKeyRef(e)
		if ref == nil {
			env = append(env, &runtimev1.EnvVar{Name: e.Name, Value: e.Value})
			continue
		}
		data, seen := read[ref.Name]
		if !seen && secrets == nil {
			return nil, &RefusedError{fmt.Sprintf("env %s: this runtimed was started without a Secret client and cannot read Secret %q", e.Name, ref.Name)}
		}
		if !seen {
			secret, err := secrets.Secrets(run.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				data = nil
			case apierrors.IsForbidden(err):
				return nil, &RefusedError{forbiddenMessage(run, e.Name, ref)}
			case err != nil:
				return nil, fmt.Errorf("read Secret %s/%s for env %s: %w", run.Namespace, ref.Name, e.Name, err)
			default:
				data = secret.Data
				if data == nil {
					data = map[string][]byte{}
				}
			}
			read[ref.Name] = data
		}
		optional := ref.Optional != nil && *ref.Optional
		value, ok := data[ref.Key]
		switch {
		case data == nil && optional, !ok && optional:
			continue // as the kubelet does: an optional variable is left unset
		case data == nil:
			return nil, &RefusedError{fmt.Sprintf("env %s: Secret %q does not exist in namespace %s; create it with key %q, or mark the secretKeyRef optional",
				e.Name, ref.Name, run.Namespace, ref.Key)}
		case !ok:
			return nil, &RefusedError{fmt.Sprintf("env %s: Secret %s/%s has no key %q", e.Name, run.Namespace, ref.Name, ref.Key)}
		case len(value) > validation.MaxEnvValueBytes:
			return nil, &RefusedError{fmt.Sprintf("env %s: key %q of Secret %s/%s holds %d bytes, more than the %d an environment variable may hold",
				e.Name, ref.Key, run.Namespace, ref.Name, len(value), validation.MaxEnvValueBytes)}
		case strings.ContainsRune(string(value), 0):
			return nil, &RefusedError{fmt.Sprintf("env %s: key %q of Secret %s/%s holds a NUL byte, which an environment variable cannot",
				e.Name, ref.Key, run.Namespace, ref.Name)}
		}
		env = append(env, &runtimev1.EnvVar{Name: e.Name, Value: string(value)})
	}
	return env, nil
}

func secretKeyRef(e v1alpha1.EnvVar) *v1alpha1.SecretKeySelector {
	if e.ValueFrom == nil {
		return nil
	}
	return e.ValueFrom.SecretKeyRef
}

// forbiddenMessage says which grant is missing, as commands a namespace
// admin can run. The Role is named <ServiceAccount>:secrets: no name
// kruntimes makes for a Runtime contains a colon, so it cannot collide.
func forbiddenMessage(run *v1alpha1.Run, name string, ref *v1alpha1.SecretKeySelector) string {
	sa := runtimepod.ServiceAccountName(run.Spec.Runtime)
	return fmt.Sprintf("env %s: the Runtime's ServiceAccount %s may not get Secret %s/%s (key %q); a namespace admin grants it with "+
		"`kubectl -n %s create role %s:secrets --verb=get --resource=secrets --resource-name=%s` and "+
		"`kubectl -n %s create rolebinding %s:secrets --role=%s:secrets --serviceaccount=%s:%s` "+
		"(once the Role exists, grant another Secret by adding its name to the Role's resourceNames: `kubectl -n %s edit role %s:secrets`)",
		name, sa, run.Namespace, ref.Name, ref.Key,
		run.Namespace, sa, ref.Name,
		run.Namespace, sa, sa, run.Namespace, sa,
		run.Namespace, sa)
}
