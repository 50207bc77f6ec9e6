package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver/entrypoint"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type auditEvent struct {
	Stage          string `json:"stage"`
	User           struct{ Username string }
	ObjectRef      struct{ Resource, Subresource, Namespace, Name string }
	ResponseStatus struct{ Code int }
	Annotations    map[string]string
}

// waitForAuditEvent polls kruntimes-apiserver's audit log for a
// ResponseComplete invoke event of user on ns/name and returns it.
func waitForAuditEvent(ctx context.Context, t *testing.T, f *framework.Framework, user, ns, name string, code int) auditEvent {
	t.Helper()
	var found auditEvent
	var last string
	err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, observed *framework.Observed) (bool, error) {
		data, err := os.ReadFile(f.Cluster.KruntimesAuditLogPath())
		if observed.Err(err) {
			return false, nil
		}
		for _, line := range strings.Split(string(data), "\n") {
			var e auditEvent
			if json.Unmarshal([]byte(line), &e) != nil || e.User.Username != user || e.ObjectRef.Subresource != "invoke" {
				continue
			}
			last = line
			if e.Stage == "ResponseComplete" && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == name && e.ResponseStatus.Code == code {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "kruntimes-apiserver's audit log has %s's invoke of %s/%s with code %d; last seen: %s", user, ns, name, code, last)
	return found
}

// directConfig reaches kruntimes-apiserver itself, past kube-apiserver,
// with a bearer token (none when token is empty). Its serving certificate
// is signed by the cluster CA.
func directConfig(f *framework.Framework, token string) *rest.Config {
	config := rest.AnonymousClientConfig(f.AdminConfig)
	config.Host = f.Cluster.KruntimesURL
	config.BearerToken = token
	return config
}

// TestDirectInvoke: runs/invoke on kruntimes-apiserver's own address with a
// bearer token is authenticated, authorized and audited as it is through
// kube-apiserver, and each audit event says which way the call came.
func TestDirectInvoke(t *testing.T) {
	f := framework.Get(t)
	require.NotEmpty(t, f.Cluster.KruntimesURL, "the local cluster exposes kruntimes-apiserver's URL")
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "direct")
	ctx := framework.Context(t, 10*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime("python", "python", 4), metav1.CreateOptions{})
	require.NoError(t, err)
	createRun(ctx, t, runs, ns, functionRun("echo", "python", "handlers.py", invokeHandlers, "handlers.echo"))
	waitForRun(ctx, t, runs, ns, "echo", functionTimeout, "Ready", inPhase(lifecycle.Ready))

	t.Run("a bearer token invokes, audited with user, Run, code and direct", func(t *testing.T) {
		_, token := serviceAccountConfig(ctx, t, f, ns, "direct-caller", "kruntimes-invoker")
		client := versioned.NewForConfigOrDie(directConfig(f, token))
		result, err := client.KruntimesV1alpha1().Runs(ns).Invoke(ctx, "echo", []byte(`{"d":1}`), typedv1alpha1.InvokeOptions{Timeout: 30 * time.Second})
		require.NoError(t, err)
		assert.Contains(t, string(result.Output.Raw), `"echo":{"d":1}`)
		e := waitForAuditEvent(ctx, t, f, "system:serviceaccount:"+ns+":direct-caller", ns, "echo", http.StatusOK)
		assert.Equal(t, entrypoint.Direct, e.Annotations[entrypoint.AuditAnnotation])
	})

	t.Run("a view-only token is refused with 403, audited", func(t *testing.T) {
		_, token := serviceAccountConfig(ctx, t, f, ns, "direct-viewer", "kruntimes-view")
		config := directConfig(f, token)
		_, err := versioned.NewForConfigOrDie(config).KruntimesV1alpha1().Runs(ns).Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err, "the viewer can read the Run directly")
		a := newInvoker(t, config).post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), nil)
		assert.Equal(t, http.StatusForbidden, a.code, "%s", a.body)
		e := waitForAuditEvent(ctx, t, f, "system:serviceaccount:"+ns+":direct-viewer", ns, "echo", http.StatusForbidden)
		assert.Equal(t, entrypoint.Direct, e.Annotations[entrypoint.AuditAnnotation])
	})

	t.Run("no token gets 401; the probes still answer", func(t *testing.T) {
		anonymous := newInvoker(t, directConfig(f, ""))
		a := anonymous.post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), nil)
		assert.Equal(t, http.StatusUnauthorized, a.code, "%s", a.body)
		a = newInvoker(t, directConfig(f, "not-a-token")).post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), nil)
		assert.Equal(t, http.StatusUnauthorized, a.code, "a token TokenReview refuses: %s", a.body)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.Cluster.KruntimesURL+"/readyz", nil)
		require.NoError(t, err)
		resp, err := anonymous.client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "/readyz without credentials")
	})

	t.Run("calls through kube-apiserver are audited as aggregated", func(t *testing.T) {
		config, _ := serviceAccountConfig(ctx, t, f, ns, "aggregated-caller", "kruntimes-invoker")
		a := newInvoker(t, config).post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), nil)
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		e := waitForAuditEvent(ctx, t, f, "system:serviceaccount:"+ns+":aggregated-caller", ns, "echo", http.StatusOK)
		assert.Equal(t, entrypoint.Aggregated, e.Annotations[entrypoint.AuditAnnotation])
	})

	t.Run("status.endpoint is the aggregated URL by default", func(t *testing.T) {
		run, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotNil(t, run.Status.Endpoint)
		assert.Equal(t, v1alpha1.RunEndpointProtocolHTTPS, run.Status.Endpoint.Protocol)
		assert.True(t, strings.HasPrefix(run.Status.Endpoint.URL, f.Cluster.APIServerURL+"/"), "%s", run.Status.Endpoint.URL)
	})
}

// TestRuntimedReachesItsRunsDirectly: with --runtimed-kruntimes-api-server
// (the local cluster's default), runtimed writes its Runs' status straight
// to kruntimes-apiserver with its Pod-bound token: kruntimes-apiserver
// audits those writes as direct, and kube-apiserver never sees them.
func TestRuntimedReachesItsRunsDirectly(t *testing.T) {
	f := framework.Get(t)
	require.False(t, f.Cluster.Config().RuntimedThroughAggregation, "the e2e cluster runs runtimed direct")
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "rtdirect")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime("bash", 1, 2), metav1.CreateOptions{})
	require.NoError(t, err)
	createRun(ctx, t, runs, ns, taskRun("direct", "echo direct"))
	done := waitForRun(ctx, t, runs, ns, "direct", functionTimeout, "Succeeded", inPhase(lifecycle.Succeeded))

	statusWrites := func(path string) []auditEvent {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		var found []auditEvent
		for _, line := range strings.Split(string(data), "\n") {
			var e auditEvent
			if json.Unmarshal([]byte(line), &e) == nil && e.Stage == "ResponseComplete" && e.ObjectRef.Subresource == "status" &&
				e.ObjectRef.Namespace == ns && e.ObjectRef.Name == "direct" {
				found = append(found, e)
			}
		}
		return found
	}
	runtimedUser := "system:serviceaccount:" + ns + ":"
	var byRuntimed []auditEvent
	err = framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		byRuntimed = byRuntimed[:0]
		for _, e := range statusWrites(f.Cluster.KruntimesAuditLogPath()) {
			if strings.HasPrefix(e.User.Username, runtimedUser) {
				byRuntimed = append(byRuntimed, e)
			}
		}
		seen.State("%d status writes by a ServiceAccount of %s", len(byRuntimed), ns)
		return len(byRuntimed) >= 2, nil
	})
	require.NoError(t, err, "runtimed claimed and finished Run %s/direct (on Pod %s)", ns, done.Status.AssignedPod)
	for _, e := range byRuntimed {
		assert.Equal(t, entrypoint.Direct, e.Annotations[entrypoint.AuditAnnotation], "runtimed's write (%s) came direct", e.User.Username)
		assert.Equal(t, http.StatusOK, e.ResponseStatus.Code)
	}
	for _, e := range statusWrites(f.Cluster.AuditLogPath()) {
		assert.False(t, strings.HasPrefix(e.User.Username, runtimedUser), "kube-apiserver proxied a status write of runtimed (%s)", e.User.Username)
	}
}
