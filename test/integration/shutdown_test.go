package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/apiserver"
	"kruntimes.io/kruntimes/apiserver/invokerouter"
	"kruntimes.io/kruntimes/apiserver/options"
	kruntimestestserver "kruntimes.io/kruntimes/apiserver/testserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/proto/pki"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
)

// heldRuntimed is a runtimed that holds every invocation until released,
// then answers it: an invocation in flight for as long as a test wants.
type heldRuntimed struct {
	runtimedv1.UnimplementedRuntimedServer
	started  chan string
	released chan struct{}
	once     sync.Once
	// logs, when set, serves FollowLog: a real runtimed's.
	logs atomic.Pointer[runtimedv1.RuntimedServer]
}

func (r *heldRuntimed) FollowLog(req *runtimedv1.FollowLogRequest, stream runtimedv1.Runtimed_FollowLogServer) error {
	if logs := r.logs.Load(); logs != nil {
		return (*logs).FollowLog(req, stream)
	}
	return r.UnimplementedRuntimedServer.FollowLog(req, stream)
}

// release lets every held invocation, and every later one, answer.
func (r *heldRuntimed) release() { r.once.Do(func() { close(r.released) }) }

func (r *heldRuntimed) Invoke(ctx context.Context, req *runtimedv1.InvokeRequest) (*runtimedv1.InvokeResponse, error) {
	r.started <- req.GetInvocationId()
	select {
	case <-r.released:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &runtimedv1.InvokeResponse{InvocationId: req.GetInvocationId(), Output: []byte(`{"ok":true}`), ContentType: "application/json"}, nil
}

var runtimedAddresses atomic.Int32

// invokeServer is a kruntimes-apiserver in this process that routes
// runs/invoke of the function Run "fn" to a heldRuntimed, as if on a Pod.
type invokeServer struct {
	config   *rest.Config
	runtimed *heldRuntimed
	// terminate does what SIGTERM does to the process.
	terminate func()
	exited    chan error
}

// startInvokeServer runs the server with extraArgs. Standalone mode gives it
// a token and no cluster; the router gets what the cluster would give it:
// a client for the Runtime Pods (a fake clientset holding one), and the
// invoke hop's TLS, to a real gRPC runtimed on a loopback "Pod IP".
func startInvokeServer(t *testing.T, extraArgs ...string) *invokeServer {
	t.Helper()
	return startInvokeServerWith(t, nil, extraArgs...)
}

// startInvokeServerWith is startInvokeServer with configure applied to the
// server's configuration before it is built.
func startInvokeServerWith(t testing.TB, configure func(*apiserver.Config), extraArgs ...string) *invokeServer {
	t.Helper()
	dir := t.TempDir()
	const runtimeName = "python"

	ca, err := pki.NewCA(pki.InvokeCACommonName, time.Hour)
	require.NoError(t, err)
	servingCert, servingKey, err := ca.IssueServing(namespace, runtimeName, time.Hour)
	require.NoError(t, err)
	clientCert, clientKey, err := ca.IssueClient(time.Hour)
	require.NoError(t, err)
	files := map[string][]byte{"ca.crt": ca.CertPEM, "client.crt": clientCert, "client.key": clientKey}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}

	// The runtimed, on an address of its own in 127.0.0.0/8 at the port
	// the router dials.
	podIP := fmt.Sprintf("127.77.%d.%d", os.Getpid()%250+1, runtimedAddresses.Add(1))
	pair, err := tls.X509KeyPair(servingCert, servingKey)
	require.NoError(t, err)
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(ca.CertPEM)
	grpcServer := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs,
	})))
	held := &heldRuntimed{started: make(chan string, 16), released: make(chan struct{})}
	runtimedv1.RegisterRuntimedServer(grpcServer, held)
	lis, err := net.Listen("tcp", net.JoinHostPort(podIP, strconv.Itoa(runtimepod.RuntimedInvokePort)))
	require.NoError(t, err)
	go func() { _ = grpcServer.Serve(lis) }()
	t.Cleanup(grpcServer.Stop)

	kubeconfig := filepath.Join(dir, "kubeconfig")
	o := options.NewServerOptions(io.Discard, io.Discard)
	fs := pflag.NewFlagSet("kruntimes-apiserver", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse(append([]string{
		"--standalone", "--standalone-kubeconfig=" + kubeconfig,
		"--storage-path=" + filepath.Join(dir, "data"),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--bind-address=127.0.0.1",
	}, extraArgs...)))
	listener, _, err := genericoptions.CreateListener("tcp", "127.0.0.1:0", net.ListenConfig{})
	require.NoError(t, err)
	o.RecommendedOptions.SecureServing.Listener = listener
	require.NoError(t, o.ComponentGlobalsRegistry.Set())
	require.NoError(t, o.Complete())
	require.NoError(t, o.Validate(nil))

	ctx, terminate := context.WithCancel(context.Background())
	t.Cleanup(terminate)
	config, closeStorage, err := o.Config()
	require.NoError(t, err)
	clientTLS, err := pki.ClientTLS(t.Context(), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"), filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pod-a", UID: "uid-a", Labels: map[string]string{lifecycle.LabelRuntime: runtimeName}},
		Status:     corev1.PodStatus{PodIP: podIP},
	}
	// The router reaches the held runtimed through a Pod only this test
	// knows; the advertised endpoint is the options' default.
	endpoint, err := o.Invoke.Endpoint.Config()
	require.NoError(t, err)
	config.Invoke = apiserver.InvokeConfig{
		Router:     invokerouter.Config{Kube: fake.NewClientset(pod), ClientTLS: clientTLS},
		MaxTimeout: 50 * time.Second,
		Endpoint:   endpoint,
	}
	if configure != nil {
		configure(config)
	}
	server, err := config.Complete().New()
	require.NoError(t, err)
	server.GenericAPIServer.AddPostStartHookOrDie("write-standalone-kubeconfig", func(genericapiserver.PostStartHookContext) error {
		return o.Standalone.WriteKubeconfig(o.RecommendedOptions.SecureServing)
	})
	exited, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		defer closeStorage()
		exited <- server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
	}()
	t.Cleanup(func() {
		terminate()
		held.release()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop within 30s")
		}
	})

	var restConfig *rest.Config
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var ready bool
		restConfig, ready, err = kruntimestestserver.Ready(kubeconfig)
		return ready, err
	}), "the server becomes ready once its invoke routing synced")
	s := &invokeServer{config: restConfig, runtimed: held, terminate: terminate, exited: exited}
	s.createReadyFunction(t)
	return s
}

// createReadyFunction creates the function Run fn, Ready on pod-a.
func (s *invokeServer) createReadyFunction(t testing.TB) {
	t.Helper()
	s.createReady(t, functionRun("fn"))
}

// createReady creates the function Run run, Ready on pod-a.
func (s *invokeServer) createReady(t testing.TB, run *v1alpha1.Run) {
	t.Helper()
	ctx := t.Context()
	client, err := versioned.NewForConfig(s.config)
	require.NoError(t, err)
	runs := client.KruntimesV1alpha1().Runs(namespace)
	run, err = runs.Create(ctx, run, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, step := range steps(scheduled, running, ready) {
		step(&run.Status)
		run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	run.Status.Endpoint = &v1alpha1.RunEndpoint{
		Protocol: v1alpha1.RunEndpointProtocolHTTPS,
		URL:      "https://kubernetes.default.svc/apis/kruntimes.io/v1alpha1/namespaces/default/runs/" + run.Name + "/invoke?uid=" + string(run.UID),
	}
	run.Status.Conditions = []metav1.Condition{{Type: lifecycle.ConditionReady, Status: metav1.ConditionTrue, Reason: lifecycle.ReasonFunctionRegistered, LastTransitionTime: metav1.Now()}}
	_, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// answer is what one request got: a status code and headers, or an error.
type answer struct {
	code   int
	header http.Header
	close  bool
	body   string
	err    error
}

func (a answer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	return fmt.Sprintf("%d %s", a.code, a.body)
}

func do(client *http.Client, method, url string, body []byte) answer {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, header: resp.Header, close: resp.Close, body: string(bytes.TrimSpace(data))}
}

// invokeAsync sends one invocation and delivers its answer.
func (s *invokeServer) invokeAsync(t *testing.T, client *http.Client) <-chan answer {
	ch := make(chan answer, 1)
	url := s.config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/fn/invoke"
	go func() { ch <- do(client, http.MethodPost, url, []byte(`{}`)) }()
	return ch
}

// awaitHeld waits until the runtimed holds one more invocation.
func (s *invokeServer) awaitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-s.runtimed.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the invocation did not reach runtimed within 30s")
	}
}

func awaitAnswer(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30s")
		return answer{}
	}
}

// httpClient reaches the server with its token. http1 keeps it on
// HTTP/1.1, where Connection: close is a header (kube-apiserver's proxy
// keeps such connections in a pool too); keepAlive false opens a new
// connection per request.
func httpClient(t testing.TB, config *rest.Config, http1, keepAlive bool) *http.Client {
	t.Helper()
	tlsConfig, err := rest.TLSConfigFor(config)
	require.NoError(t, err)
	transport := &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: !http1, DisableKeepAlives: !keepAlive}
	if http1 {
		transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: bearer{token: config.BearerToken, next: transport}, Timeout: time.Minute}
}

// bearer adds the token to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}

// TestShutdownKeepsInvokeRoutingUntilDrained: after SIGTERM, an invocation
// in flight and one arriving during the shutdown delay both answer 200 once
// their handlers finish, even after the delay ended and the server stopped
// accepting requests. Routing used to end with the post-start hook's
// context — when the server stops accepting requests, at SIGTERM without a
// delay — which closed the runtimed connections under those invocations:
// 502. With --shutdown-send-retry-after=false the generic server ends that
// context before the requests drained.
func TestShutdownKeepsInvokeRoutingUntilDrained(t *testing.T) {
	s := startInvokeServer(t, "--shutdown-delay-duration=2s", "--shutdown-send-retry-after=false")
	client := httpClient(t, s.config, false, true)

	inFlight := s.invokeAsync(t, client)
	s.awaitHeld(t)
	s.terminate()
	// During the delay the server fails /readyz and serves everything else.
	fresh := httpClient(t, s.config, true, false)
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		a := do(fresh, http.MethodGet, s.config.Host+"/readyz", nil)
		return a.err == nil && a.code != http.StatusOK, nil
	}), "/readyz fails once shutdown began")
	duringDelay := s.invokeAsync(t, client)
	s.awaitHeld(t)

	// The delay ends: the listener closes, new connections are refused.
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return do(fresh, http.MethodGet, s.config.Host+"/readyz", nil).err != nil, nil
	}), "the server stops listening after the delay")
	// Long enough for a closed connection to fail a held call.
	time.Sleep(200 * time.Millisecond) //nolint:forbidigo // no event marks "the router would have closed by now"
	s.runtimed.release()
	for name, ch := range map[string]<-chan answer{"in flight at SIGTERM": inFlight, "arriving during the delay": duringDelay} {
		a := awaitAnswer(t, ch)
		assert.Equal(t, http.StatusOK, a.code, "the invocation %s answers 200 after the delay: %s", name, a)
	}
	select {
	case err := <-s.exited:
		assert.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit within 20s of its last request")
	}
}

// TestShutdownAnswersRetryAfterOnPooledConnections: once the shutdown
// delay ended, a request on a connection the caller keeps open (as
// kube-apiserver's proxy does) is answered 429 with Retry-After and
// Connection: close while invocations in flight finish, instead of being
// reset, which kube-apiserver turns into a plain 503 that says nothing
// about whether an invocation ran. The server still exits promptly after
// the last request.
func TestShutdownAnswersRetryAfterOnPooledConnections(t *testing.T) {
	s := startInvokeServer(t, "--shutdown-delay-duration=1s")
	pooled := httpClient(t, s.config, true, true)
	runURL := s.config.Host + "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/fn"
	require.Equal(t, http.StatusOK, do(pooled, http.MethodGet, runURL, nil).code, "the pooled connection is open")
	readyz := do(pooled, http.MethodGet, s.config.Host+"/readyz?verbose", nil)
	assert.Contains(t, readyz.body, "[+]runs-invoke-routing ok", "readiness waits for the invoke routing")

	inFlight := s.invokeAsync(t, httpClient(t, s.config, false, true))
	s.awaitHeld(t)
	s.terminate()

	var after answer
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		after = do(pooled, http.MethodGet, runURL, nil)
		return after.code != http.StatusOK, nil
	}), "the delay ends")
	assert.Equal(t, http.StatusTooManyRequests, after.code, "after the delay: %s", after)
	assert.NotEmpty(t, after.header.Get("Retry-After"), "with Retry-After")
	assert.True(t, after.close, "with Connection: close, so the caller's next request opens a connection to another replica")

	released := time.Now()
	s.runtimed.release()
	a := awaitAnswer(t, inFlight)
	assert.Equal(t, http.StatusOK, a.code, "the invocation in flight finishes: %s", a)
	select {
	case err := <-s.exited:
		assert.NoError(t, err)
		t.Logf("exited %s after the last invocation answered", time.Since(released).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the server did not exit within 15s of its last request")
	}
}
