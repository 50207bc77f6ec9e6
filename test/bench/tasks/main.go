// Command tasks benchmarks task Runs end to end against a cluster running
// kruntimes: it creates N Runs of a trivial script at a given concurrency,
// waits until all are terminal, and reports the create→Scheduled,
// →Running and →Succeeded latencies (p50/p95/p99) from the Runs' microsecond
// status timestamps, and the throughput in Runs/s.
//
//	go run ./test/bench/tasks --kubeconfig .local/kubeconfig --runtime bash --runs 500 --concurrency 32
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
)

type options struct {
	kubeconfig  string
	namespace   string
	runtime     string
	script      string
	runs        int
	concurrency int
	timeout     time.Duration
	keep        bool
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Kubeconfig of the cluster to benchmark.")
	flag.StringVar(&o.namespace, "namespace", "default", "Namespace of the Runtime and the Runs.")
	flag.StringVar(&o.runtime, "runtime", "bash", "Runtime that executes the Runs; it must exist and be Ready.")
	flag.StringVar(&o.script, "script", "true", "Inline source of every Run.")
	flag.IntVar(&o.runs, "runs", 200, "Number of Runs to create.")
	flag.IntVar(&o.concurrency, "concurrency", 16, "Concurrent creators.")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "Give up when the Runs are not all terminal by then.")
	flag.BoolVar(&o.keep, "keep", false, "Keep the Runs afterwards instead of deleting them.")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "tasks:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading the kubeconfig (set --kubeconfig): %w", err)
	}
	config.QPS, config.Burst = 5000, 5000
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	runs := client.KruntimesV1alpha1().Runs(o.namespace)
	batch := fmt.Sprintf("bench-%d", time.Now().UnixNano()%1_000_000)
	prefix := batch + "-"

	created := make(map[string]time.Time, o.runs)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	work := make(chan int)
	start := time.Now()
	for w := 0; w < o.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("%s%d", prefix, i)
				t0 := time.Now()
				_, err := runs.Create(ctx, &v1alpha1.Run{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kruntimes.io/bench": batch}},
					Spec: v1alpha1.RunSpec{
						Runtime: o.runtime,
						Source:  v1alpha1.RunSource{Inline: o.script},
						Mode:    v1alpha1.RunMode{Task: &v1alpha1.TaskMode{}},
					},
				}, metav1.CreateOptions{})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("creating %s: %w", name, err)
				} else if err == nil {
					created[name] = t0
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < o.runs; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	createdIn := time.Since(start)

	selector := metav1.ListOptions{LabelSelector: "kruntimes.io/bench=" + batch}
	var final []v1alpha1.Run
	// Latencies come from status timestamps, so a slow poll costs no accuracy
	// and keeps the benchmark from loading the apiserver it measures.
	err = wait.PollUntilContextTimeout(ctx, time.Second, o.timeout, true, func(ctx context.Context) (bool, error) {
		list, err := runs.List(ctx, selector)
		if err != nil {
			return false, nil
		}
		for _, r := range list.Items {
			if !lifecycle.IsTerminal(r.Status.Phase) {
				return false, nil
			}
		}
		final = list.Items
		return len(list.Items) == o.runs, nil
	})
	if err != nil {
		return fmt.Errorf("the Runs were not all terminal within %s: %w", o.timeout, err)
	}
	if !o.keep {
		defer func() {
			_ = runs.DeleteCollection(context.Background(), metav1.DeleteOptions{}, selector)
		}()
	}
	report(o, final, created, createdIn)
	return nil
}

func report(o options, final []v1alpha1.Run, created map[string]time.Time, createdIn time.Duration) {
	var scheduled, running, done []time.Duration
	var first, last time.Time
	phases := map[lifecycle.Phase]int{}
	for _, r := range final {
		phases[r.Status.Phase]++
		t0 := created[r.Name]
		if first.IsZero() || t0.Before(first) {
			first = t0
		}
		if t := r.Status.ScheduledTime; t != nil {
			scheduled = append(scheduled, t.Sub(t0))
		}
		if t := r.Status.StartTime; t != nil {
			running = append(running, t.Sub(t0))
		}
		if t := r.Status.CompletionTime; t != nil {
			done = append(done, t.Sub(t0))
			if t.After(last) {
				last = t.Time
			}
		}
	}
	fmt.Printf("runs=%d concurrency=%d runtime=%s phases=%v created in %s\n", o.runs, o.concurrency, o.runtime, phases, createdIn.Round(time.Millisecond))
	fmt.Printf("%-22s %10s %10s %10s\n", "latency from create", "p50", "p95", "p99")
	for _, row := range []struct {
		name string
		d    []time.Duration
	}{{"→ Scheduled", scheduled}, {"→ Running", running}, {"→ terminal", done}} {
		fmt.Printf("%-22s %10s %10s %10s\n", row.name, pct(row.d, 50), pct(row.d, 95), pct(row.d, 99))
	}
	if !last.IsZero() {
		fmt.Printf("throughput: %.1f Runs/s (first create to last completion)\n", float64(len(final))/last.Sub(first).Seconds())
	}
}

func pct(d []time.Duration, p int) string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(10 * time.Microsecond).String()
}
