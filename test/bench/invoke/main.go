// Command invoke benchmarks runs/invoke against a local cluster (make run)
// and, in the same run, the hops and round trips it is made of or compared
// with, each at concurrency 1 and at --concurrency:
//
//   - invoke: POST runs/invoke through kube-apiserver's aggregation, a no-op
//     Python function per worker (so none waits for another's invocation);
//   - runtimed: the same invocation sent straight to the owning runtimed
//     over gRPC with the apiserver's client certificate;
//   - runtime-server: InvokeFunction on the Runtime Server's unix socket;
//   - get-run: an aggregated GET of the same Run, the cheapest
//     authenticated round trip through aggregation to kruntimes-apiserver;
//   - get-pod: a GET of a core object (a Runtime Pod) from kube-apiserver;
//   - direct-invoke, direct-get: invoke and get-run sent to
//     kruntimes-apiserver's own address (the direct entry point), past
//     kube-apiserver, with the kubeconfig's credentials or --direct-token.
//
// Every client keeps its connections alive, as a service calling functions
// would. Below each line, the CPU each of the local cluster's processes
// (by command name) spent per request of it.
//
//	go run ./test/bench/invoke --kubeconfig .local/kubeconfig --state .local/cluster --requests 3000 --concurrency 32
//	go run ./test/bench/invoke --kubeconfig .local/kubeconfig --state .local/cluster --requests 1000 --paths invoke,direct-invoke,get-run,direct-get
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/proto/pki"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/proto/transport"
	"kruntimes.io/kruntimes/test/bench/cputime"
)

type options struct {
	kubeconfig, namespace, runtime, state string
	requests, concurrency                 int
	paths                                 string
	directURL, directToken                string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Kubeconfig of the local cluster.")
	flag.StringVar(&o.namespace, "namespace", "default", "Namespace of the Runtime and the functions.")
	flag.StringVar(&o.runtime, "runtime", "python", "Python Runtime that registers the functions; it must be Ready, with room for --concurrency functions.")
	flag.StringVar(&o.state, "state", ".local/cluster", "State directory of the local cluster: the invoke hop's certificates are read from it.")
	flag.IntVar(&o.requests, "requests", 2000, "Requests per path and concurrency.")
	flag.IntVar(&o.concurrency, "concurrency", 32, "The higher concurrency, after 1; one function per worker.")
	flag.StringVar(&o.paths, "paths", "invoke,runtimed,runtime-server,get-run,get-pod", "Comma-separated paths to measure: invoke, runtimed, runtime-server, get-run, get-pod, direct-invoke, direct-get.")
	flag.StringVar(&o.directURL, "direct-url", "", "kruntimes-apiserver's own URL for the direct-* paths; by default https://127.0.0.1:<the port of the local cluster's APIService>.")
	flag.StringVar(&o.directToken, "direct-token", "", "Bearer token for the direct-* paths instead of the kubeconfig's credentials (e.g. kubectl create token NAME), to measure the TokenReview path.")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "invoke:", err)
		os.Exit(1)
	}
}

// target is one function the benchmark calls, and how each path reaches it.
type target struct {
	run      *v1alpha1.Run
	pod      *corev1.Pod
	runtimed runtimedv1.RuntimedClient
	server   runtimev1.FunctionRuntimeClient
	regID    string
}

func run(ctx context.Context, o options) error {
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	config.QPS, config.Burst = -1, 0 // no client-side rate limit
	kruntimes, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return err
	}
	if transport, ok := httpClient.Transport.(*http.Transport); ok {
		transport.MaxIdleConnsPerHost = o.concurrency
	}

	var direct direct
	if strings.Contains(o.paths, "direct-") {
		if direct, err = directClient(ctx, config, o); err != nil {
			return err
		}
	}

	batch := fmt.Sprintf("bench-%d", time.Now().UnixNano()%1_000_000)
	targets := make([]*target, o.concurrency)
	runs := kruntimes.KruntimesV1alpha1().Runs(o.namespace)
	defer func() {
		_ = runs.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "kruntimes.io/bench=" + batch})
	}()
	for i := range targets {
		_, err := runs.Create(ctx, &v1alpha1.Run{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", batch, i), Labels: map[string]string{"kruntimes.io/bench": batch}},
			Spec: v1alpha1.RunSpec{
				Runtime: o.runtime,
				Source:  v1alpha1.RunSource{Inline: "def handle(event, context):\n    return None\n", InlinePath: "handler.py"},
				Mode:    v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{Handler: "handler.handle"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
	}
	clientTLS, err := pki.ClientTLS(ctx, filepath.Join(o.state, "kruntimes-apiserver", "invoke-client.crt"),
		filepath.Join(o.state, "kruntimes-apiserver", "invoke-client.key"), filepath.Join(o.state, "kruntimes-apiserver", "invoke-ca.crt"))
	if err != nil {
		return err
	}
	for i := range targets {
		name := fmt.Sprintf("%s-%d", batch, i)
		var r *v1alpha1.Run
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			r, err = runs.Get(ctx, name, metav1.GetOptions{})
			return err == nil && r.Status.Phase == lifecycle.Ready, nil
		}); err != nil {
			return fmt.Errorf("function %s is not Ready: %w", name, err)
		}
		pod, err := kube.CoreV1().Pods(o.namespace).Get(ctx, r.Status.AssignedPod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		t := &target{run: r, pod: pod}
		cfg := clientTLS.Clone()
		cfg.ServerName = invocation.ServerName(o.namespace, o.runtime)
		conn, err := grpc.NewClient(net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(runtimepod.RuntimedInvokePort)), append(transport.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
		if err != nil {
			return err
		}
		defer conn.Close()
		t.runtimed = runtimedv1.NewRuntimedClient(conn)
		socket, err := runtimeSocket(pod)
		if err != nil {
			return err
		}
		sconn, err := grpc.NewClient("unix://"+socket, append(transport.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return err
		}
		defer sconn.Close()
		t.server = runtimev1.NewFunctionRuntimeClient(sconn)
		list, err := t.server.ListFunctions(ctx, &runtimev1.ListFunctionsRequest{})
		if err != nil {
			return err
		}
		for _, st := range list.GetRegistrations() {
			if st.GetRunUid() == string(r.UID) {
				t.regID = st.GetRegistrationId()
			}
		}
		targets[i] = t
	}

	// The local cluster's processes are the descendants of the one holding
	// its state directory's lock; their CPU is reported per request.
	clusterPID := cputime.ClusterPID(o.state)

	paths := []struct {
		name string
		call func(ctx context.Context, t *target) error
	}{
		{"invoke", func(ctx context.Context, t *target) error {
			return post(ctx, httpClient, config.Host+"/apis/kruntimes.io/v1alpha1/namespaces/"+o.namespace+"/runs/"+t.run.Name+"/invoke", []byte(`{}`))
		}},
		{"runtimed", func(ctx context.Context, t *target) error {
			_, err := t.runtimed.Invoke(ctx, &runtimedv1.InvokeRequest{RunUid: string(t.run.UID), Attempt: t.run.Status.Attempt,
				PodUid: string(t.pod.UID), InvocationId: "bench", Input: []byte(`{}`)})
			return err
		}},
		{"runtime-server", func(ctx context.Context, t *target) error {
			_, err := t.server.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{RunUid: string(t.run.UID), RegistrationId: t.regID, InvocationId: "bench", Input: []byte(`{}`)})
			return err
		}},
		{"get-run", func(ctx context.Context, t *target) error {
			return get(ctx, httpClient, config.Host+"/apis/kruntimes.io/v1alpha1/namespaces/"+o.namespace+"/runs/"+t.run.Name)
		}},
		{"direct-invoke", func(ctx context.Context, t *target) error {
			return post(ctx, direct.client, direct.url+"/apis/kruntimes.io/v1alpha1/namespaces/"+o.namespace+"/runs/"+t.run.Name+"/invoke", []byte(`{}`))
		}},
		{"direct-get", func(ctx context.Context, t *target) error {
			return get(ctx, direct.client, direct.url+"/apis/kruntimes.io/v1alpha1/namespaces/"+o.namespace+"/runs/"+t.run.Name)
		}},
		{"get-pod", func(ctx context.Context, t *target) error {
			return get(ctx, httpClient, config.Host+"/api/v1/namespaces/"+o.namespace+"/pods/"+t.pod.Name)
		}},
	}
	fmt.Printf("%-16s %12s %10s %10s %10s %12s\n", "path", "concurrency", "p50", "p99", "max", "requests/s")
	for _, c := range []int{1, o.concurrency} {
		for _, p := range paths {
			if !slices.Contains(strings.Split(o.paths, ","), p.name) {
				continue
			}
			// Warm the connections, then measure.
			if _, _, err := measure(ctx, targets[:c], min(100, o.requests), p.call); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			before := cputime.ByCommand(clusterPID)
			latencies, elapsed, err := measure(ctx, targets[:c], o.requests, p.call)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			after := cputime.ByCommand(clusterPID)
			slices.Sort(latencies)
			fmt.Printf("%-16s %12d %10s %10s %10s %12.0f\n", p.name, c, pct(latencies, 50), pct(latencies, 99),
				latencies[len(latencies)-1].Round(10*time.Microsecond), float64(len(latencies))/elapsed.Seconds())
			if clusterPID > 0 {
				fmt.Printf("%16s cpu per request: %s\n", "", cputime.PerOp(before, after, len(latencies)))
			}
		}
	}
	return nil
}

// measure makes n calls, spread over one worker per target, and returns
// each call's latency and the wall time.
func measure(ctx context.Context, targets []*target, n int, call func(context.Context, *target) error) ([]time.Duration, time.Duration, error) {
	latencies := make([]time.Duration, n)
	var next int
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for _, t := range targets {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				began := time.Now()
				err := call(ctx, t)
				latencies[i] = time.Since(began)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return latencies, time.Since(start), firstErr
}

func post(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(client, req)
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	return do(client, req)
}

func do(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
	return nil
}

// runtimeSocket finds the host path of pod's Runtime Server socket on the
// local node, from its runtimed's flags.
func runtimeSocket(pod *corev1.Pod) (string, error) {
	entries, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, e := range entries {
		environ, err := os.ReadFile(e)
		if err != nil || !bytes.Contains(environ, []byte(runtimepod.EnvPodUID+"="+string(pod.UID)+"\x00")) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(e), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if v, ok := strings.CutPrefix(arg, "--runtime-socket=unix://"); ok {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("no runtimed of Pod %s on this machine: run the benchmark on the local cluster's machine", pod.Name)
}

func pct(d []time.Duration, p int) string {
	return d[(len(d)-1)*p/100].Round(10 * time.Microsecond).String()
}

// direct reaches kruntimes-apiserver past kube-apiserver.
type direct struct {
	url    string
	client *http.Client
}

// directClient returns a keep-alive client for the direct entry point:
// --direct-url, or the local cluster's kruntimes-apiserver (its APIService's
// port on loopback; the serving certificate is signed by the cluster CA the
// kubeconfig trusts).
func directClient(ctx context.Context, config *rest.Config, o options) (direct, error) {
	d := direct{url: o.directURL}
	if d.url == "" {
		dyn, err := dynamic.NewForConfig(config)
		if err != nil {
			return d, err
		}
		apiService, err := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).
			Get(ctx, "v1alpha1.kruntimes.io", metav1.GetOptions{})
		if err != nil {
			return d, fmt.Errorf("finding kruntimes-apiserver's port (or pass --direct-url): %w", err)
		}
		port, found, err := unstructured.NestedInt64(apiService.Object, "spec", "service", "port")
		if err != nil || !found {
			return d, fmt.Errorf("the APIService has no spec.service.port; pass --direct-url")
		}
		d.url = fmt.Sprintf("https://127.0.0.1:%d", port)
	}
	directConfig := rest.CopyConfig(config)
	if o.directToken != "" {
		directConfig = rest.AnonymousClientConfig(config)
		directConfig.BearerToken = o.directToken
	}
	directConfig.Host = d.url
	client, err := rest.HTTPClientFor(directConfig)
	if err != nil {
		return d, err
	}
	if transport, ok := client.Transport.(*http.Transport); ok {
		transport.MaxIdleConnsPerHost = o.concurrency
	}
	d.client = client
	return d, nil
}
