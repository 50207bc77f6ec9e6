package chartmode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apiserver/entrypoint"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	User       struct{ Username string }
	ObjectRef  *struct{ Resource, Subresource, Namespace, Name string }
	// ResponseStatus.Code is the HTTP status of the answer.
	ResponseStatus *struct{ Code int }
	Annotations    map[string]string
}

// isAuditEvent says whether a log line is an audit event, which
// kruntimes-apiserver writes to its standard output with the chart's
// defaults; a denied request's event names its "forbidden" decision.
func isAuditEvent(line string) (auditEvent, bool) {
	var e auditEvent
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
		return e, false
	}
	return e, e.APIVersion == "audit.k8s.io/v1" && e.Kind == "Event"
}

// assertDirectEntryPointOff: with the chart's defaults, a request to the
// apiserver Pod itself with a valid token of a user RBAC allows gets 403
// naming --direct-entry-point=false, while the probes still answer.
// Returns the refused user's name.
func assertDirectEntryPointOff(ctx context.Context, t *testing.T, f *framework.Framework, podIP, ns string) string {
	t.Helper()
	kube := f.Client
	const sa = "direct-caller"
	_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kruntimes-edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	serving, err := kube.CoreV1().Secrets(localcluster.KruntimesNamespace).Get(ctx, "kruntimes-apiserver-serving", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, serving.Data["ca.crt"], "the chart's serving Secret has its CA")
	config := &rest.Config{
		Host:        "https://" + net.JoinHostPort(podIP, "8443"),
		BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:     serving.Data["ca.crt"],
			ServerName: localcluster.KruntimesService + "." + localcluster.KruntimesNamespace + ".svc",
		},
	}
	direct, err := versioned.NewForConfig(config)
	require.NoError(t, err)

	// Through kube-apiserver the same user lists Runs (RBAC allows it).
	aggregatedConfig := rest.AnonymousClientConfig(f.AdminConfig)
	aggregatedConfig.BearerToken = tr.Status.Token
	aggregated, err := versioned.NewForConfig(aggregatedConfig)
	require.NoError(t, err)
	_, err = aggregated.KruntimesV1alpha1().Runs(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the token's user may list Runs through kube-apiserver")

	_, err = direct.KruntimesV1alpha1().Runs(ns).List(ctx, metav1.ListOptions{})
	require.Error(t, err, "a direct list with a valid token")
	assert.True(t, apierrors.IsForbidden(err), "a direct request gets 403, not 401: %v", err)
	assert.ErrorContains(t, err, "--direct-entry-point=false", "the 403 says why")
	// A write, which the chart's default audit policy records (a read it
	// does not): assertAudited looks for this refusal.
	_, err = direct.KruntimesV1alpha1().Runs(ns).Create(ctx, &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "direct"},
		Spec:       v1alpha1.RunSpec{Runtime: "none"},
	}, metav1.CreateOptions{})
	require.Error(t, err, "a direct create with a valid token")
	assert.True(t, apierrors.IsForbidden(err), "a direct create gets 403: %v", err)

	rt, err := rest.TransportFor(rest.AnonymousClientConfig(config))
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, config.Host+"/readyz", nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "/readyz on the Pod without credentials")
	return "system:serviceaccount:" + ns + ":" + sa
}

// assertAudited waits until the apiserver Pods' logs hold, as audit
// events at ResponseComplete, the quickstart's create of a Run and
// invocation in ns through kube-apiserver, and the refusal of refusedUser's
// create on the direct entry point.
func assertAudited(ctx context.Context, t *testing.T, stateDir, ns, refusedUser string) {
	t.Helper()
	want := map[string]func(auditEvent) bool{
		"a create of a Run, aggregated": func(e auditEvent) bool {
			return e.Verb == "create" && e.ObjectRef.Resource == "runs" && e.ObjectRef.Subresource == "" &&
				e.Annotations[entrypoint.AuditAnnotation] == entrypoint.Aggregated
		},
		"an invocation, aggregated": func(e auditEvent) bool {
			return e.ObjectRef.Subresource == "invoke" && e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusOK &&
				e.Annotations[entrypoint.AuditAnnotation] == entrypoint.Aggregated
		},
		"the direct refusal": func(e auditEvent) bool {
			return e.User.Username == refusedUser && e.Verb == "create" && e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusForbidden &&
				e.Annotations[entrypoint.AuditAnnotation] == entrypoint.Direct
		},
	}
	require.NoError(t, framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		found := map[string]bool{}
		err := eachApiserverLogLine(stateDir, func(line string) {
			e, ok := isAuditEvent(line)
			if !ok || e.Stage != "ResponseComplete" || e.ObjectRef == nil || e.ObjectRef.Namespace != ns {
				return
			}
			for name, match := range want {
				if match(e) {
					found[name] = true
				}
			}
		})
		if seen.Err(err) {
			return false, nil
		}
		seen.State("found %v", found)
		return len(found) == len(want), nil
	}), "kruntimes-apiserver's audit log (its standard output) has every event of %v", mapKeys(want))
}

// eachApiserverLogLine calls fn with every line the chart's apiserver Pods
// wrote, which the local node keeps under stateDir/logs/pods.
func eachApiserverLogLine(stateDir string, fn func(line string)) error {
	dirs, err := filepath.Glob(filepath.Join(stateDir, "logs", "pods", localcluster.KruntimesNamespace+"_"+deploymentName+"-*"))
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return fmt.Errorf("no apiserver Pod log under %s", filepath.Join(stateDir, "logs", "pods"))
	}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(data), "\n") {
				fn(line)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
