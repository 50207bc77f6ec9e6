package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/proto/pki"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// invokeHandlers are the Python handlers of the invoke tests.
const invokeHandlers = `import json, os, time

def echo(event, context):
    return {"echo": event, "invocation": context.invocation_id}

def boom(event, context):
    raise ValueError("no good")

def record(event, context):
    # One line per execution, so a test counts how often the handler ran.
    with open(event["file"], "a") as f:
        f.write(context.invocation_id + "\n")
    time.sleep(event.get("sleep", 0))
    return "recorded"

def sleep(event, context):
    time.sleep(event)
    return "slept"
`

// answer is one HTTP answer of runs/invoke.
type answer struct {
	code   int
	header http.Header
	body   []byte
}

// status decodes an error answer's metav1.Status.
func (a answer) status(t *testing.T) metav1.Status {
	t.Helper()
	var st metav1.Status
	require.NoError(t, json.Unmarshal(a.body, &st), "the error body is a metav1.Status: %s", a.body)
	assert.Equal(t, "Status", st.Kind)
	assert.Equal(t, int32(a.code), st.Code)
	return st
}

func (a answer) result(t *testing.T) v1alpha1.InvokeResult {
	t.Helper()
	require.Equal(t, http.StatusOK, a.code, "body: %s", a.body)
	var r v1alpha1.InvokeResult
	require.NoError(t, json.Unmarshal(a.body, &r), "%s", a.body)
	return r
}

// invoker POSTs to runs/invoke through kube-apiserver as the user of config.
type invoker struct {
	config *rest.Config
	client *http.Client
}

func newInvoker(t *testing.T, config *rest.Config) *invoker {
	t.Helper()
	client, err := rest.HTTPClientFor(config)
	require.NoError(t, err)
	return &invoker{config: config, client: client}
}

// post sends body to url (a path, or a whole URL) with the headers.
func (i *invoker) post(ctx context.Context, t *testing.T, url string, body []byte, headers map[string]string) answer {
	t.Helper()
	if strings.HasPrefix(url, "/") {
		url = i.config.Host + url
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := i.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{code: resp.StatusCode, header: resp.Header, body: data}
}

func invokePath(ns, name string) string {
	return "/apis/kruntimes.io/v1alpha1/namespaces/" + ns + "/runs/" + name + "/invoke"
}

// serviceAccountConfig returns a bearer-token config of a new
// ServiceAccount bound to role (a ClusterRole) in ns, and the token.
func serviceAccountConfig(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string, roles ...string) (*rest.Config, string) {
	t.Helper()
	_, err := f.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, role := range roles {
		_, err = f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	tr, err := f.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	config := rest.AnonymousClientConfig(f.AdminConfig)
	config.BearerToken = tr.Status.Token
	return config, tr.Status.Token
}

// TestInvoke is the runs/invoke protocol through kube-apiserver's
// aggregation, against real Runtime Pods.
func TestInvoke(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "invoke")
	ctx := framework.Context(t, 12*time.Minute)
	for name, language := range map[string]string{"python": "python", "bash": "bash"} {
		_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, functionRuntime(name, language, 8), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	python := hostOf(ctx, t, f, ns, "python")
	admin := newInvoker(t, f.AdminConfig)
	ready := func(t *testing.T, name, handler string, mutate ...func(*v1alpha1.Run)) *v1alpha1.Run {
		t.Helper()
		run := functionRun(name, "python", "handlers.py", invokeHandlers, handler)
		for _, m := range mutate {
			m(run)
		}
		createRun(ctx, t, runs, ns, run)
		return waitForRun(ctx, t, runs, ns, name, functionTimeout, "Ready", inPhase(lifecycle.Ready))
	}
	echo := ready(t, "echo", "handlers.echo")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := f.Kubectl(context.Background(), "logs", "-n", ns, python.pod.Name, "-c", runtimepod.ContainerRuntimed, "--tail=60")
			t.Logf("runtimed logs:\n%s", out)
		}
	})

	t.Run("an invocation sent before the function is Ready waits for it and is answered", func(t *testing.T) {
		createRun(ctx, t, runs, ns, functionRun("early", "python", "handlers.py", invokeHandlers, "handlers.echo"))
		// Sent at once: the Run is Pending, then registering; the
		// apiserver holds the call until it is Ready.
		a := admin.post(ctx, t, invokePath(ns, "early"), []byte(`{"x":1}`), nil)
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		var out struct {
			Echo json.RawMessage `json:"echo"`
		}
		require.NoError(t, json.Unmarshal(a.result(t).Output.Raw, &out))
		assert.JSONEq(t, `{"x":1}`, string(out.Echo), "the handler ran on the input sent")
		timing := a.header.Get(invocation.HeaderServerTiming)
		assert.Contains(t, timing, ", wait;dur=", "Server-Timing shows the wait for the function: %s", timing)
		run, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "early", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Ready, run.Status.Phase)
		assert.Equal(t, int32(1), run.Status.Attempt, "no attempt was spent")
	})

	t.Run("kubectl create --raw returns the handler's output, with no Content-Type", func(t *testing.T) {
		// kubectl takes commas in -f as separators: a name without any.
		file, err := os.CreateTemp("", "input-*.json")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.Remove(file.Name()) })
		_, err = file.WriteString(`{"x":1}`)
		require.NoError(t, err)
		require.NoError(t, file.Close())
		input := file.Name()
		out, err := f.Kubectl(ctx, "create", "--raw", invokePath(ns, "echo"), "-f", input)
		require.NoError(t, err)
		var result v1alpha1.InvokeResult
		require.NoError(t, json.Unmarshal([]byte(out), &result), out)
		assert.JSONEq(t, `{"echo":{"x":1},"invocation":"`+result.InvocationID+`"}`, string(result.Output.Raw))
		assert.NotEmpty(t, result.InvocationID, "an invocation ID is generated")
	})

	t.Run("a bash function answers too", func(t *testing.T) {
		createRun(ctx, t, runs, ns, functionRun("shell", "bash", "handler.sh", "read -r input\nprintf '{\"got\":%s}' \"$input\"\n", "handler.sh"))
		waitForRun(ctx, t, runs, ns, "shell", functionTimeout, "Ready", inPhase(lifecycle.Ready))
		a := admin.post(ctx, t, invokePath(ns, "shell"), []byte(`{"b":2}`), map[string]string{"X-Kruntime-Invocation-ID": "mine"})
		r := a.result(t)
		assert.JSONEq(t, `{"got":{"b":2}}`, string(r.Output.Raw))
		assert.Equal(t, "mine", r.InvocationID)
		assert.Equal(t, "mine", a.header.Get("X-Kruntime-Invocation-ID"), "the caller's invocation ID comes back")
	})

	t.Run("reading a Run does not grant invoking it", func(t *testing.T) {
		config, _ := serviceAccountConfig(ctx, t, f, ns, "reader", "kruntimes-view")
		reader := newInvoker(t, config)
		_, err := versioned.NewForConfigOrDie(config).KruntimesV1alpha1().Runs(ns).Get(ctx, "echo", metav1.GetOptions{})
		require.NoError(t, err, "the reader can get the Run")
		a := reader.post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), nil)
		assert.Equal(t, http.StatusForbidden, a.code, "%s", a.body)
	})

	t.Run("the endpoint URL in status works verbatim with a bearer token, and not for a new Run of the name", func(t *testing.T) {
		config, token := serviceAccountConfig(ctx, t, f, ns, "caller", "kruntimes-invoker")
		_ = config
		caller := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: clusterRoots(t, f)}}}
		call := func(url string) answer {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"v":1}`))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
			resp, err := caller.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return answer{code: resp.StatusCode, header: resp.Header, body: body}
		}
		first := ready(t, "named", "handlers.echo")
		oldURL := first.Status.Endpoint.URL
		require.Contains(t, oldURL, "?uid="+string(first.UID))
		assert.Equal(t, http.StatusOK, call(oldURL).code)

		require.NoError(t, runs.KruntimesV1alpha1().Runs(ns).Delete(ctx, "named", metav1.DeleteOptions{}))
		err := framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			_, err := runs.KruntimesV1alpha1().Runs(ns).Get(ctx, "named", metav1.GetOptions{})
			return seen.Deleted(err), nil
		})
		require.NoError(t, err)
		second := ready(t, "named", "handlers.echo")
		stale := call(oldURL)
		assert.Equal(t, http.StatusNotFound, stale.code, "the old endpoint addresses the deleted Run: %s", stale.body)
		assert.Equal(t, http.StatusOK, call(second.Status.Endpoint.URL).code)
	})

	t.Run("bad requests get typed answers", func(t *testing.T) {
		task := createRun(ctx, t, runs, ns, newTaskRun("a-task", "bash"))
		_ = task
		pending := createRun(ctx, t, runs, ns, functionRun("nowhere", "no-such-runtime", "handlers.py", invokeHandlers, "handlers.echo"))
		_ = pending
		cases := []struct {
			name    string
			path    string
			body    []byte
			headers map[string]string
			code    int
		}{
			{"1 MiB + 1 byte is too large", invokePath(ns, "echo"), append([]byte(`"`), append(bytes.Repeat([]byte("x"), 1<<20-1), '"')...), nil, http.StatusRequestEntityTooLarge},
			{"text/plain is unsupported", invokePath(ns, "echo"), []byte(`{}`), map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
			{"a 129-byte invocation ID is refused", invokePath(ns, "echo"), []byte(`{}`), map[string]string{"X-Kruntime-Invocation-ID": strings.Repeat("i", 129)}, http.StatusBadRequest},
			{"a body that is not JSON is refused", invokePath(ns, "echo"), []byte(`{not json`), nil, http.StatusBadRequest},
			{"an unknown Run is not found", invokePath(ns, "unknown"), []byte(`{}`), nil, http.StatusNotFound},
			{"a UID that does not match is not found", invokePath(ns, "echo") + "?uid=another", []byte(`{}`), nil, http.StatusNotFound},
			{"a UID header that does not match is not found", invokePath(ns, "echo"), []byte(`{}`), map[string]string{"X-Kruntime-Run-UID": "another"}, http.StatusNotFound},
			{"a task Run is a bad request", invokePath(ns, "a-task"), []byte(`{}`), nil, http.StatusBadRequest},
			{"a Run that is not Ready is unavailable", invokePath(ns, "nowhere"), []byte(`{}`), nil, http.StatusServiceUnavailable},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				a := admin.post(ctx, t, tc.path, tc.body, tc.headers)
				require.Equal(t, tc.code, a.code, "%s", a.body)
				a.status(t)
				if tc.code == http.StatusServiceUnavailable {
					assert.Equal(t, "1", a.header.Get("Retry-After"))
				} else {
					assert.Empty(t, a.header.Get("Retry-After"), "Retry-After only on 429 and 503")
				}
				if tc.headers["X-Kruntime-Invocation-ID"] == "" {
					assert.NotEmpty(t, a.header.Get("X-Kruntime-Invocation-ID"), "a generated invocation ID comes back")
				}
			})
		}
		st := admin.post(ctx, t, invokePath(ns, "echo")+"?uid="+string(echo.UID), []byte(`{}`), map[string]string{"X-Kruntime-Run-UID": string(echo.UID)})
		assert.Equal(t, http.StatusOK, st.code, "the right UID, both ways: %s", st.body)
	})

	t.Run("Expect 100-continue over HTTP/1.1 through kube-apiserver", func(t *testing.T) {
		// What curl does for large uploads: HTTP/1.1, Expect: 100-continue,
		// waiting for the 100 before sending the body.
		tlsConfig, err := rest.TLSConfigFor(f.AdminConfig)
		require.NoError(t, err)
		transport := &http.Transport{TLSClientConfig: tlsConfig, ExpectContinueTimeout: 10 * time.Second}
		defer transport.CloseIdleConnections()
		send := func(body io.Reader, size int64) answer {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.AdminConfig.Host+invokePath(ns, "echo"), body)
			require.NoError(t, err)
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Expect", "100-continue")
			resp, err := (&http.Client{Transport: transport}).Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, 1, resp.ProtoMajor, "the request went over HTTP/1.1")
			return answer{code: resp.StatusCode, header: resp.Header, body: data}
		}

		// Sent on a connection of its own, read apart from the writes:
		// kube-apiserver answers the 413 early and closes the connection
		// with the body unread, so the client's writes meet a reset, and
		// net/http's client then returns its write error rather than the
		// answer it had already received.
		big := append([]byte(`"`), append(bytes.Repeat([]byte("x"), 1<<20), '"')...)
		a := postEarlyAnswered(ctx, t, tlsConfig, f.AdminConfig.Host+invokePath(ns, "echo"), f.AdminConfig.BearerToken, big)
		assert.Equal(t, http.StatusRequestEntityTooLarge, a.code, "a body over 1 MiB with a Content-Length is refused before it is read: %s", a.body)

		// A body of unknown length must be read to be judged, and reading it
		// sends the 100 Continue. kube-apiserver's proxy passes the 100 on,
		// and its timeout filter then drops the real code: the Status is
		// right, the code is 200. docs/invoke.md warns about it; when this
		// fails, kube-apiserver passes 1xx answers through: update the docs.
		a = send(io.MultiReader(strings.NewReader(`{not json`)), -1)
		var st metav1.Status
		require.NoError(t, json.Unmarshal(a.body, &st), "%s", a.body)
		assert.Equal(t, int32(http.StatusBadRequest), st.Code, "the body is the 400's Status")
		assert.Equal(t, http.StatusOK, a.code, "kube-apiserver still answers 200 after passing on a 100 Continue (docs/invoke.md)")
	})

	t.Run("a raising handler is 200 with the function error", func(t *testing.T) {
		ready(t, "boom", "handlers.boom")
		a := admin.post(ctx, t, invokePath(ns, "boom"), []byte(`{}`), nil)
		r := a.result(t)
		assert.Equal(t, "ValueError", a.header.Get("X-Kruntime-Function-Error"))
		require.NotNil(t, r.Error)
		assert.Equal(t, "ValueError", r.Error.Type)
		assert.Equal(t, "no good", r.Error.Message)
	})

	t.Run("a second concurrent invocation is 429 with Retry-After, and did not run", func(t *testing.T) {
		ready(t, "record", "handlers.record")
		file := filepath.Join(t.TempDir(), "ran")
		first := make(chan answer, 1)
		go func() {
			first <- admin.post(ctx, t, invokePath(ns, "record"), []byte(fmt.Sprintf(`{"file":%q,"sleep":3}`, file)), map[string]string{"X-Kruntime-Invocation-ID": "first"})
		}()
		waitForLines(ctx, t, file, 1)
		second := admin.post(ctx, t, invokePath(ns, "record"), []byte(fmt.Sprintf(`{"file":%q}`, file)), map[string]string{"X-Kruntime-Invocation-ID": "second"})
		assert.Equal(t, http.StatusTooManyRequests, second.code, "%s", second.body)
		assert.Equal(t, "1", second.header.Get("Retry-After"))
		second.status(t)
		assert.Equal(t, http.StatusOK, (<-first).code)
		assert.Equal(t, []string{"first"}, readLines(t, file), "the refused invocation never ran")
	})

	t.Run("a handler past ?timeout= gets this server's 504, and the next invocation works", func(t *testing.T) {
		ready(t, "sleeper", "handlers.sleep")
		started := time.Now()
		a := admin.post(ctx, t, invokePath(ns, "sleeper")+"?timeout=2s", []byte(`30`), nil)
		require.Equal(t, http.StatusGatewayTimeout, a.code, "%s", a.body)
		st := a.status(t)
		assert.Equal(t, metav1.StatusReasonTimeout, st.Reason)
		assert.Less(t, time.Since(started), 10*time.Second)
		assert.Empty(t, a.header.Get("Retry-After"))
		next := admin.post(ctx, t, invokePath(ns, "sleeper"), []byte(`0`), nil)
		assert.Equal(t, http.StatusOK, next.code, "%s", next.body)
	})

	t.Run("a bash handler writing bytes that are not UTF-8 to stderr is 200 with the function error", func(t *testing.T) {
		createRun(ctx, t, runs, ns, functionRun("binary", "bash", "handler.sh", "printf 'bad \\377\\376 bytes\\n' >&2\nexit 1\n", "handler.sh"))
		waitForRun(ctx, t, runs, ns, "binary", functionTimeout, "Ready", inPhase(lifecycle.Ready))
		a := admin.post(ctx, t, invokePath(ns, "binary"), []byte(`{}`), nil)
		r := a.result(t)
		assert.Equal(t, "NonZeroExit", a.header.Get("X-Kruntime-Function-Error"))
		require.NotNil(t, r.Error)
		assert.Equal(t, "NonZeroExit", r.Error.Type)
		require.NotNil(t, r.Logs)
		assert.Equal(t, "bad \uFFFD bytes\n", r.Logs.Stderr, "each invalid run of bytes is one U+FFFD")
		assert.True(t, utf8.Valid(a.body), "the answer is UTF-8: %q", a.body)
	})

	t.Run("an invocation ID that is not UTF-8 is 400 through kube-apiserver, and runs nothing", func(t *testing.T) {
		a := admin.post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), map[string]string{"X-Kruntime-Invocation-ID": "id-\xff"})
		require.Equal(t, http.StatusBadRequest, a.code, "%s", a.body)
		assert.Contains(t, a.status(t).Message, "UTF-8")
		assert.Empty(t, a.header.Get("Retry-After"))
		a = admin.post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), map[string]string{"X-Kruntime-Invocation-ID": "naïve-✓"})
		assert.Equal(t, http.StatusOK, a.code, "a UTF-8 ID beyond ASCII is fine: %s", a.body)
	})

	t.Run("a cancelled Run is 409 without Retry-After", func(t *testing.T) {
		ready(t, "doomed", "handlers.echo")
		out, err := f.Kubectl(ctx, "-n", ns, "patch", "run", "doomed", "--type=merge", "-p", `{"spec":{"cancelRequested":true}}`)
		require.NoError(t, err, out)
		waitForRun(ctx, t, runs, ns, "doomed", functionTimeout, "Cancelled", inPhase(lifecycle.Cancelled))
		var last answer
		err = framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, _ *framework.Observed) (bool, error) {
			last = admin.post(ctx, t, invokePath(ns, "doomed"), []byte(`{}`), nil)
			return last.code == http.StatusConflict, nil
		})
		require.NoError(t, err, "the last answer: %d %s", last.code, last.body)
		st := last.status(t)
		assert.Equal(t, metav1.StatusReasonConflict, st.Reason)
		assert.Contains(t, st.Message, "Cancelled")
		assert.Empty(t, last.header.Get("Retry-After"), "a Run that ended will not be invocable again")
	})

	t.Run("the Go client and krt invoke", func(t *testing.T) {
		r, err := runs.KruntimesV1alpha1().Runs(ns).Invoke(ctx, "echo", []byte(`{"go":true}`), typedv1alpha1.InvokeOptions{InvocationID: "from-go"})
		require.NoError(t, err)
		assert.Equal(t, "from-go", r.InvocationID)
		_, err = runs.KruntimesV1alpha1().Runs(ns).Invoke(ctx, "nowhere", []byte(`{}`), typedv1alpha1.InvokeOptions{})
		require.Error(t, err)

		krt := func(args ...string) (string, int) {
			cmd := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), append([]string{"--kubeconfig=" + f.Kubeconfig, "-n", ns, "invoke"}, args...)...)
			var out bytes.Buffer
			cmd.Stdout = &out
			cmd.Stderr = io.Discard
			err := cmd.Run()
			code := 0
			if exit, ok := err.(*exec.ExitError); ok {
				code = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			return out.String(), code
		}
		out, code := krt("echo", "--data", `{"k":1}`)
		assert.Equal(t, 0, code)
		assert.Contains(t, out, `"echo":{"k":1}`)
		_, code = krt("boom")
		assert.Equal(t, 3, code, "the handler failed")
		_, code = krt("nowhere")
		assert.Equal(t, 5, code, "not Ready: unavailable")
	})

	t.Run("runtimed killed mid-invocation is 502, and the handler ran exactly once", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "ran")
		answered := make(chan answer, 1)
		go func() {
			answered <- admin.post(ctx, t, invokePath(ns, "record"), []byte(fmt.Sprintf(`{"file":%q,"sleep":5}`, file)), map[string]string{"X-Kruntime-Invocation-ID": "doomed"})
		}()
		waitForLines(ctx, t, file, 1)
		require.NoError(t, syscall.Kill(python.runtimedPID, syscall.SIGKILL))
		a := <-answered
		assert.Equal(t, http.StatusBadGateway, a.code, "%s", a.body)
		a.status(t)
		assert.Empty(t, a.header.Get("Retry-After"), "the outcome is unknown: nothing says retrying is safe")
		python.runtimedPID = waitForNewRuntimed(ctx, t, f, ns, python)
		// Nobody re-sent it, and it ran once.
		assert.Equal(t, []string{"doomed"}, readLines(t, file))
		err := framework.Poll(ctx, framework.PollInterval, functionTimeout, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			answer := admin.post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), nil)
			seen.State("answered %d: %s", answer.code, answer.body)
			return answer.code == http.StatusOK, nil
		})
		require.NoError(t, err, "the restarted runtimed serves invocations again")
	})

	t.Run("certificates rotated on disk keep invocations working; another CA's client certificate is refused", func(t *testing.T) {
		caCert, caKey, clientCert, clientKey := f.Cluster.InvokePKIFiles()
		certPEM, err := os.ReadFile(caCert)
		require.NoError(t, err)
		keyPEM, err := os.ReadFile(caKey)
		require.NoError(t, err)
		ca, err := pki.LoadCA(certPEM, keyPEM)
		require.NoError(t, err)
		cert, key, err := ca.IssueClient(time.Hour)
		require.NoError(t, err)
		replaceFile(t, clientCert, cert)
		replaceFile(t, clientKey, key)
		// And runtimed's serving pair, as the kubelet updates its Secret.
		tlsDir := runtimedTLSDir(t, python)
		serving, servingKey, err := ca.IssueServing(ns, "python", time.Hour)
		require.NoError(t, err)
		replaceFile(t, filepath.Join(tlsDir, "tls.crt"), serving)
		replaceFile(t, filepath.Join(tlsDir, "tls.key"), servingKey)
		for range 3 {
			assert.Equal(t, http.StatusOK, admin.post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), nil).code)
		}

		other, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
		require.NoError(t, err)
		foreignCert, foreignKey, err := other.IssueClient(time.Hour)
		require.NoError(t, err)
		pair, err := tls.X509KeyPair(foreignCert, foreignKey)
		require.NoError(t, err)
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(certPEM)
		conn, err := tls.Dial("tcp", net.JoinHostPort(python.pod.Status.PodIP, strconv.Itoa(runtimepod.RuntimedInvokePort)), &tls.Config{
			Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: invocation.ServerName(ns, "python"), NextProtos: []string{"h2"},
		})
		if err == nil {
			// TLS 1.3 reports a refused client certificate on first read.
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		assert.Error(t, err, "runtimed refuses a client certificate of another CA")
	})

	t.Run("idle timeout is postponed by invocations through the subresource", func(t *testing.T) {
		ready(t, "idle", "handlers.sleep", func(r *v1alpha1.Run) { r.Spec.Mode.Function.IdleTimeoutSeconds = ptr.To[int32](2) })
		a := admin.post(ctx, t, invokePath(ns, "idle"), []byte(`5`), nil)
		ended := time.Now()
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		done := waitForRun(ctx, t, runs, ns, "idle", functionTimeout, "Timeout", inPhase(lifecycle.Timeout))
		completed := meta.FindStatusCondition(done.Status.Conditions, lifecycle.ConditionCompleted)
		require.NotNil(t, completed)
		assert.Equal(t, lifecycle.ReasonIdleTimeout, completed.Reason)
		assert.False(t, done.Status.CompletionTime.Time.Before(ended.Add(2*time.Second-100*time.Millisecond)),
			"idle counts from the end of the invocation (%s): completed %s", ended, done.Status.CompletionTime)
	})

	t.Run("every invocation is in the audit log, and no bearer token in any log", func(t *testing.T) {
		_, token := serviceAccountConfig(ctx, t, f, ns, "audited", "kruntimes-invoker")
		config := rest.AnonymousClientConfig(f.AdminConfig)
		config.BearerToken = token
		a := newInvoker(t, config).post(ctx, t, invokePath(ns, "echo"), []byte(`{}`), map[string]string{"X-Kruntime-Invocation-ID": "audited-call"})
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		user := "system:serviceaccount:" + ns + ":audited"
		var seen string
		err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, observed *framework.Observed) (bool, error) {
			data, err := os.ReadFile(f.Cluster.AuditLogPath())
			if observed.Err(err) {
				return false, nil
			}
			for _, line := range strings.Split(string(data), "\n") {
				var e struct {
					Stage          string `json:"stage"`
					User           struct{ Username string }
					ObjectRef      struct{ Resource, Subresource, Namespace, Name string }
					ResponseStatus struct{ Code int }
				}
				if json.Unmarshal([]byte(line), &e) == nil && e.User.Username == user && e.ObjectRef.Subresource == "invoke" {
					seen = line
					return e.Stage == "ResponseComplete" && e.ObjectRef.Name == "echo" && e.ObjectRef.Namespace == ns && e.ResponseStatus.Code == 200, nil
				}
			}
			return false, nil
		})
		require.NoError(t, err, "an audit event names the caller, the Run and the code; last seen: %s", seen)
		found, err := filesContaining(filepath.Dir(filepath.Dir(f.Cluster.AuditLogPath())), token)
		require.NoError(t, err)
		assert.Empty(t, found, "the caller's bearer token is written nowhere")
	})
}

// clusterRoots trusts kube-apiserver's CA, as the admin kubeconfig does.
func clusterRoots(t *testing.T, f *framework.Framework) *x509.CertPool {
	t.Helper()
	roots := x509.NewCertPool()
	data := f.AdminConfig.CAData
	if len(data) == 0 {
		var err error
		data, err = os.ReadFile(f.AdminConfig.CAFile)
		require.NoError(t, err)
	}
	require.True(t, roots.AppendCertsFromPEM(data))
	return roots
}

// runtimedTLSDir is the host directory of runtimed's invoke Secret volume.
func runtimedTLSDir(t *testing.T, h *runtimeHost) string {
	t.Helper()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", h.runtimedPID))
	require.NoError(t, err)
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--invoke-tls-cert-file="); ok {
			return filepath.Dir(v)
		}
	}
	t.Fatalf("runtimed has no --invoke-tls-cert-file: %q", cmdline)
	return ""
}

// replaceFile writes data aside and renames it over path, as a kubelet or
// cert-manager updates a certificate.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Fields(string(data))
}

// waitForLines waits until the handler wrote n lines to path.
func waitForLines(ctx context.Context, t *testing.T, path string, n int) {
	t.Helper()
	err := framework.Poll(ctx, 20*time.Millisecond, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		data, err := os.ReadFile(path)
		if seen.Err(err) {
			return false, nil
		}
		return len(strings.Fields(string(data))) >= n, nil
	})
	require.NoError(t, err, "the handler started")
}

// filesContaining lists the logs under dir (component, container and
// audit logs) that contain s.
func filesContaining(dir, s string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() || !strings.HasSuffix(path, ".log") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	return found, err
}

// TestInvokeWhileTheOwnerIsLost invokes a function without pause while its
// Pod is deleted: every answer is 200 or 503, each handler call records the
// Pod that ran it, and no invocation runs twice or on two Pods.
func TestInvokeWhileTheOwnerIsLost(t *testing.T) {
	f := framework.Get(t)
	runs := controllersClient(t, f)
	ns := f.CreateNamespace(t, "invoke-recovery")
	ctx := framework.Context(t, 8*time.Minute)
	rt := functionRuntime("python", "python", 2)
	rt.Spec.Replicas = ptr.To[int32](2)
	// The handler records which Pod ran it.
	rt.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "POD_UID",
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	_, err := runs.KruntimesV1alpha1().Runtimes(ns).Create(ctx, rt, metav1.CreateOptions{})
	require.NoError(t, err)
	pods := readyPods(ctx, t, f, ns, "python", 2)
	record := filepath.Join(t.TempDir(), "calls")
	run := functionRun("steady", "python", "handler.py", `import os
def handle(event, context):
    with open(event["file"], "a") as f:
        f.write(os.environ["POD_UID"] + " " + context.invocation_id + "\n")
    return os.environ["POD_UID"]
`, "handler.handle")
	run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{MaxAttempts: 2}
	createRun(ctx, t, runs, ns, run)
	ready := waitForRun(ctx, t, runs, ns, "steady", functionTimeout, "Ready", readyAtAttempt(1))
	lost := podWithUID(t, pods, ready.Status.AssignedPodUID)

	admin := newInvoker(t, f.AdminConfig)
	input := []byte(fmt.Sprintf(`{"file":%q}`, record))
	answers := map[string]int{}
	servedBy := map[string]string{}
	call := func(i int) answer {
		id := fmt.Sprintf("call-%d", i)
		a := admin.post(ctx, t, invokePath(ns, "steady"), input, map[string]string{"X-Kruntime-Invocation-ID": id})
		answers[id] = a.code
		if a.code == http.StatusOK {
			var pod string
			require.NoError(t, json.Unmarshal(a.result(t).Output.Raw, &pod))
			servedBy[id] = pod
		}
		return a
	}
	i := 0
	for ; i < 20; i++ {
		require.Equal(t, http.StatusOK, call(i).code, "before the loss")
	}
	deletePod(ctx, t, f, lost)
	// Keep invoking until the function answers again from another Pod.
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		i++
		a := call(i)
		return a.code == http.StatusOK && servedBy[fmt.Sprintf("call-%d", i)] != string(lost.UID), nil
	})
	require.NoError(t, err, "the function answers from another Pod")
	for j := 0; j < 20; j++ {
		i++
		require.Equal(t, http.StatusOK, call(i).code, "after the move")
	}

	ranOn := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(mustReadFile(t, record))), "\n") {
		pod, id, ok := strings.Cut(line, " ")
		require.True(t, ok, line)
		ranOn[id] = append(ranOn[id], pod)
	}
	unavailable := 0
	for id, code := range answers {
		switch code {
		case http.StatusOK:
			assert.Equal(t, []string{servedBy[id]}, ranOn[id], "%s answered 200 and ran exactly once, on the Pod it names", id)
		case http.StatusServiceUnavailable:
			unavailable++
			assert.Empty(t, ranOn[id], "%s answered 503 and never ran", id)
		default:
			t.Errorf("%s answered %d: only 200 and 503 are expected while the owner is replaced", id, code)
		}
	}
	for id, pods := range ranOn {
		assert.Len(t, pods, 1, "invocation %s ran on %v", id, pods)
	}
	t.Logf("%d invocations: %d unavailable while the function moved", len(answers), unavailable)
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// postEarlyAnswered POSTs body over HTTP/1.1 on a TLS connection of its
// own with Expect: 100-continue, writes the body only after a 100 Continue
// and in the background, ignoring write errors, and returns the final
// answer: what a client that reads while it sends (curl) sees of an answer
// given before the body was read.
func postEarlyAnswered(ctx context.Context, t *testing.T, tlsConfig *tls.Config, target, token string, body []byte) answer {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	config := tlsConfig.Clone()
	config.NextProtos = []string{"http/1.1"}
	conn, err := (&tls.Dialer{Config: config}).DialContext(ctx, "tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
	require.NoError(t, err)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n", u.RequestURI(), u.Host, len(body))
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	_, err = io.WriteString(conn, head+"\r\n")
	require.NoError(t, err)
	reader := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(reader, req)
		require.NoError(t, err, "reading the answer")
		if resp.StatusCode == http.StatusContinue {
			go func() { _, _ = conn.Write(body) }()
			continue
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return answer{code: resp.StatusCode, header: resp.Header, body: data}
	}
}
