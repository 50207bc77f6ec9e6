// Command sdkinvoke measures the invoke latency of one warm function Run
// through the three clients kruntimes ships, in one sitting: the Go
// clientset (test/bench/goinvoke, what krt invoke uses), the Python SDK
// (sdk/python/bench/invoke_loop.py, run with /usr/bin/python3) and the
// TypeScript SDK (sdk/typescript/bench/invoke-loop.mjs, on node). Each is a
// process of its own that reads the Run, invokes it --warmup times, then
// times --requests invocations of {} one in flight and prints each round
// trip; the three take turns, round after round, in an order that rotates,
// so that a machine whose speed drifts over the sitting weighs on each
// alike. Every round does so through kube-apiserver's aggregation and
// straight to kruntimes-apiserver (the direct entry point: the same
// kubeconfig with kruntimes-apiserver's address as its server).
//
// Without --kubeconfig it starts a local cluster of its own (as make run
// does, under --state-dir, removed afterwards), a Python Runtime from
// artifacts/examples/runtime-python.yaml and the README's echo function
// (artifacts/examples/run-function.yaml); with --kubeconfig it uses that
// cluster, creates the Runtime only when --runtime does not exist, and
// deletes the function it created at the end.
//
//	make kube-binaries ts-deps python-deps   # once
//	go run ./test/bench/sdkinvoke --rounds 5 --requests 1000
//	go run ./test/bench/sdkinvoke --kubeconfig .local/kubeconfig   # against make run's cluster
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/test/localcluster"
	"kruntimes.io/kruntimes/test/repobin"
)

type options struct {
	kubeconfig, stateDir, namespace, runtime string
	rounds, requests, warmup                 int
	entries, clients                         string
	python, node                             string
}

// Clients, in the order of the first round.
var allClients = []string{"go", "python", "typescript"}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig of a running cluster (make run's .local/kubeconfig); empty: start a local cluster of its own.")
	flag.StringVar(&o.stateDir, "state-dir", ".local/sdkinvoke", "State directory of the cluster it starts (without --kubeconfig); removed before and after.")
	flag.StringVar(&o.namespace, "namespace", "default", "Namespace of the Runtime and the function.")
	flag.StringVar(&o.runtime, "runtime", "python", "Python Runtime of the function; created from artifacts/examples/runtime-python.yaml when it does not exist.")
	flag.IntVar(&o.rounds, "rounds", 5, "Rounds; each runs every client through every entry point once.")
	flag.IntVar(&o.requests, "requests", 1000, "Timed invocations per client, entry point and round.")
	flag.IntVar(&o.warmup, "warmup", 100, "Invocations each client process makes before timing.")
	flag.StringVar(&o.entries, "entries", "aggregated,direct", "Entry points: aggregated (through kube-apiserver), direct (kruntimes-apiserver's own address).")
	flag.StringVar(&o.clients, "clients", strings.Join(allClients, ","), "Clients: go, python, typescript.")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "The Python that runs the Python SDK (Debian's, with python3-kubernetes: make python-deps).")
	flag.StringVar(&o.node, "node", "node", "Node.js (>= 20) that runs the TypeScript SDK (built by make ts-deps).")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sdkinvoke:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := repobin.RepoRoot(wd)
	if err != nil {
		return err
	}
	clients := strings.Split(o.clients, ",")
	entries := strings.Split(o.entries, ",")
	for _, c := range clients {
		if !slices.Contains(allClients, c) {
			return fmt.Errorf("unknown client %q: want go, python or typescript", c)
		}
	}
	for _, e := range entries {
		if e != "aggregated" && e != "direct" {
			return fmt.Errorf("unknown entry point %q: want aggregated or direct", e)
		}
	}
	if err := checkClients(ctx, root, o, clients); err != nil {
		return err
	}
	progress("building bin/goinvoke")
	if err := repobin.Build(ctx, root, repobin.Command{Name: "goinvoke", Package: "./test/bench/goinvoke", NoRace: true}); err != nil {
		return err
	}

	kubeconfig, directURL := o.kubeconfig, ""
	if kubeconfig == "" {
		stateDir := o.stateDir
		if !filepath.IsAbs(stateDir) {
			stateDir = filepath.Join(root, stateDir)
		}
		cluster, err := startCluster(ctx, root, stateDir)
		if err != nil {
			return err
		}
		defer func() {
			cluster.Stop(context.Background())
			_ = os.RemoveAll(stateDir)
		}()
		kubeconfig, directURL = cluster.Config().KubeconfigPath, cluster.KruntimesURL
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	config.QPS, config.Burst = -1, 0
	if directURL == "" && slices.Contains(entries, "direct") {
		if directURL, err = findDirectURL(ctx, config); err != nil {
			return err
		}
	}
	kr, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	name, cleanup, err := readyFunction(ctx, root, kr, o)
	if err != nil {
		return err
	}
	defer cleanup()

	tmp, err := os.MkdirTemp("", "sdkinvoke-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	kubeconfigs := map[string]string{"aggregated": kubeconfig}
	if slices.Contains(entries, "direct") {
		if kubeconfigs["direct"], err = writeDirectKubeconfig(kubeconfig, directURL, filepath.Join(tmp, "direct.kubeconfig")); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "function %s/%s (Python, the README's echo), input {}, one in flight; %d rounds × %d timed invocations per client and entry point, %d warm-up each\n",
		o.namespace, name, o.rounds, o.requests, o.warmup)
	fmt.Fprintf(out, "machine: %d CPUs; %s; %s; %s; load average at start %s\n", runtime.NumCPU(), goVersion(ctx), versionOf(ctx, o.python, "--version"), "node "+versionOf(ctx, o.node, "--version"), loadavg())
	samples := map[string]map[string][][]time.Duration{}
	for _, e := range entries {
		samples[e] = map[string][][]time.Duration{}
	}
	var loads []string
	began := time.Now()
	for r := 0; r < o.rounds; r++ {
		loads = append(loads, loadavg())
		// Rotate which client goes first, and alternate the entry points' order.
		order := append(slices.Clone(clients[r%len(clients):]), clients[:r%len(clients)]...)
		es := slices.Clone(entries)
		if r%2 == 1 {
			slices.Reverse(es)
		}
		for _, e := range es {
			for _, c := range order {
				lat, err := timeClient(ctx, root, o, c, kubeconfigs[e], name)
				if err != nil {
					return fmt.Errorf("round %d, %s, %s: %w", r+1, e, c, err)
				}
				samples[e][c] = append(samples[e][c], lat)
				sorted := slices.Sorted(slices.Values(lat))
				fmt.Fprintf(out, "round %d  %-10s  %-10s  p50 %-9s p90 %-9s p99 %-9s  (load %s)\n", r+1, e, c,
					ms(pct(sorted, 50)), ms(pct(sorted, 90)), ms(pct(sorted, 99)), loadavg())
			}
		}
	}
	loads = append(loads, loadavg())
	fmt.Fprintf(out, "\n%d rounds in %s; 1-minute load average at each round's start and at the end: %s\n\n",
		o.rounds, time.Since(began).Round(time.Second), strings.Join(loads, ", "))
	printTable(out, entries, clients, samples)
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "==> "+format+"\n", args...)
}

// checkClients fails early when a client cannot run: the TypeScript SDK
// not built, the Python without the SDK's dependencies.
func checkClients(ctx context.Context, root string, o options, clients []string) error {
	if slices.Contains(clients, "typescript") {
		if _, err := os.Stat(filepath.Join(root, "sdk", "typescript", "dist", "index.js")); err != nil {
			return fmt.Errorf("sdk/typescript is not built (make ts-deps): %w", err)
		}
	}
	if slices.Contains(clients, "python") {
		if b, err := exec.CommandContext(ctx, o.python, "-c", "import kubernetes, urllib3").CombinedOutput(); err != nil {
			return fmt.Errorf("%s cannot import the Python SDK's dependencies (make python-deps): %v: %s", o.python, err, b)
		}
	}
	return nil
}

// startCluster starts a local cluster as make run does, in stateDir, on
// Pod addresses of its own so that it can run beside make run's.
func startCluster(ctx context.Context, root, stateDir string) (*localcluster.Cluster, error) {
	if err := os.RemoveAll(stateDir); err != nil {
		return nil, err
	}
	progress("building the binaries of the local node's images")
	if err := repobin.Build(ctx, root, localcluster.ImageCommands...); err != nil {
		return nil, err
	}
	started := time.Now()
	cluster, err := localcluster.Start(ctx, localcluster.Config{
		RepoRoot:  root,
		StateDir:  stateDir,
		PodIPBase: net.IPv4(127, 61, 0, 0),
		Progress:  os.Stderr,
	})
	if err != nil {
		return nil, err
	}
	progress("local cluster up in %s", time.Since(started).Round(100*time.Millisecond))
	return cluster, nil
}

// findDirectURL is kruntimes-apiserver's own address on a local cluster:
// loopback at its APIService's port (its serving certificate is signed by
// the cluster CA and names 127.0.0.1).
func findDirectURL(ctx context.Context, config *rest.Config) (string, error) {
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return "", err
	}
	apiService, err := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).
		Get(ctx, "v1alpha1.kruntimes.io", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("finding kruntimes-apiserver's port: %w", err)
	}
	port, found, err := unstructured.NestedInt64(apiService.Object, "spec", "service", "port")
	if err != nil || !found {
		return "", fmt.Errorf("the APIService has no spec.service.port: leave out the direct entry point (--entries aggregated)")
	}
	return fmt.Sprintf("https://127.0.0.1:%d", port), nil
}

// writeDirectKubeconfig writes kubeconfig with its current cluster's server
// replaced by url, the same credentials.
func writeDirectKubeconfig(kubeconfig, url, path string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", err
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.Clusters[kctx.Cluster] == nil {
		return "", fmt.Errorf("%s has no current context with a cluster", kubeconfig)
	}
	cfg.Clusters[kctx.Cluster].Server = url
	return path, clientcmd.WriteToFile(*cfg, path)
}

// readyFunction makes sure the Runtime exists, creates the README's echo
// function on it and waits until it is Ready; cleanup deletes the function.
func readyFunction(ctx context.Context, root string, kr versioned.Interface, o options) (string, func(), error) {
	runtimes := kr.KruntimesV1alpha1().Runtimes(o.namespace)
	if _, err := runtimes.Get(ctx, o.runtime, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		var rt v1alpha1.Runtime
		if err := readYAML(filepath.Join(root, "artifacts", "examples", "runtime-python.yaml"), &rt); err != nil {
			return "", nil, err
		}
		rt.Name = o.runtime
		progress("creating Runtime %s/%s from artifacts/examples/runtime-python.yaml", o.namespace, o.runtime)
		if _, err := runtimes.Create(ctx, &rt, metav1.CreateOptions{}); err != nil {
			return "", nil, err
		}
	} else if err != nil {
		return "", nil, err
	}
	var fn v1alpha1.Run
	if err := readYAML(filepath.Join(root, "artifacts", "examples", "run-function.yaml"), &fn); err != nil {
		return "", nil, err
	}
	fn.Name, fn.GenerateName = "", "sdkinvoke-echo-"
	fn.Spec.Runtime = o.runtime
	runs := kr.KruntimesV1alpha1().Runs(o.namespace)
	created, err := runs.Create(ctx, &fn, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	cleanup := func() {
		_ = runs.Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	}
	progress("waiting for function %s/%s to be Ready", o.namespace, created.Name)
	var last *v1alpha1.Run
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := runs.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = r
		return r.Status.Phase == lifecycle.Ready, nil
	}); err != nil {
		cleanup()
		phase := "unknown"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		return "", nil, fmt.Errorf("function %s is not Ready (phase %s): %w", created.Name, phase, err)
	}
	return created.Name, cleanup, nil
}

func readYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(b, into)
}

// timeClient runs one client's process and returns the round trips it timed.
func timeClient(ctx context.Context, root string, o options, client, kubeconfig, name string) ([]time.Duration, error) {
	args := []string{"--kubeconfig", kubeconfig, "-n", o.namespace, "--name", name,
		"--requests", strconv.Itoa(o.requests), "--warmup", strconv.Itoa(o.warmup)}
	var cmd *exec.Cmd
	switch client {
	case "go":
		cmd = exec.CommandContext(ctx, repobin.Path(root, "goinvoke"), args...)
	case "python":
		cmd = exec.CommandContext(ctx, o.python, append([]string{filepath.Join(root, "sdk", "python", "bench", "invoke_loop.py")}, args...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "sdk", "python", "src"), "PYTHONDONTWRITEBYTECODE=1")
	case "typescript":
		cmd = exec.CommandContext(ctx, o.node, append([]string{filepath.Join(root, "sdk", "typescript", "bench", "invoke-loop.mjs")}, args...)...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", cmd, err, strings.TrimSpace(stderr.String()))
	}
	var lat []time.Duration
	for _, f := range strings.Fields(stdout.String()) {
		us, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s printed %q, not microseconds", client, f)
		}
		lat = append(lat, time.Duration(us)*time.Microsecond)
	}
	if len(lat) != o.requests {
		return nil, fmt.Errorf("%s timed %d invocations, not %d", client, len(lat), o.requests)
	}
	return lat, nil
}

// printTable prints, per entry point and client, the range of the rounds'
// p50s, the percentiles of every round's samples together and, against
// the Go clientset, the ratio of the p50s and the range of the per-round
// differences (each round's p50 minus Go's in the same round), as Markdown.
func printTable(out io.Writer, entries, clients []string, samples map[string]map[string][][]time.Duration) {
	fmt.Fprintln(out, "| entry point | client | p50 per round (min–max) | p50 | p90 | p99 | p50 ÷ Go's | p50 − Go's per round (min–max) | n |")
	fmt.Fprintln(out, "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
	roundP50s := func(rounds [][]time.Duration) []time.Duration {
		var p50s []time.Duration
		for _, lat := range rounds {
			p50s = append(p50s, pct(slices.Sorted(slices.Values(lat)), 50))
		}
		return p50s
	}
	for _, e := range entries {
		goRounds := roundP50s(samples[e]["go"])
		var goAll []time.Duration
		for _, lat := range samples[e]["go"] {
			goAll = append(goAll, lat...)
		}
		goP50 := pct(slices.Sorted(slices.Values(goAll)), 50)
		for _, c := range clients {
			var all []time.Duration
			for _, lat := range samples[e][c] {
				all = append(all, lat...)
			}
			slices.Sort(all)
			p50s := roundP50s(samples[e][c])
			p50 := pct(all, 50)
			ratio, diff := "—", "—"
			if c != "go" && len(goRounds) == len(p50s) {
				ratio = fmt.Sprintf("%.2f", float64(p50)/float64(goP50))
				var diffs []time.Duration
				for r := range p50s {
					diffs = append(diffs, p50s[r]-goRounds[r])
				}
				diff = fmt.Sprintf("%+.2f … %+.2f ms", msf(slices.Min(diffs)), msf(slices.Max(diffs)))
			}
			fmt.Fprintf(out, "| %s | %s | %s–%s ms | %s ms | %s ms | %s ms | %s | %s | %d |\n", e, clientName(c),
				ms(slices.Min(p50s)), ms(slices.Max(p50s)), ms(p50), ms(pct(all, 90)), ms(pct(all, 99)), ratio, diff, len(all))
		}
	}
}

func clientName(c string) string {
	switch c {
	case "go":
		return "Go clientset"
	case "python":
		return "Python SDK"
	}
	return "TypeScript SDK"
}

// pct is the p-th percentile of sorted (nearest rank).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", msf(d)) }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func goVersion(ctx context.Context) string { return versionOf(ctx, "go", "version") }

func versionOf(ctx context.Context, name string, args ...string) string {
	b, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return name + " (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}
