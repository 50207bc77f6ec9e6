// Command goinvoke invokes one function Run with the generated Go client
// (client/clientset, as krt invoke does) --requests times, one in flight,
// and prints each round trip in microseconds, one per line: the Go side of
// the Python SDK's benchmark (sdk/python/bench/invoke_bench.py), which
// runs it against the same function in the same run, and of
// test/bench/sdkinvoke, which runs it beside both SDKs. Like the SDKs, it
// reads the Run once and sends its UID with every invocation.
//
//	go run ./test/bench/goinvoke --kubeconfig .local/kubeconfig -n default --name noop --requests 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	namespace := flag.String("n", "default", "namespace of the function Run")
	name := flag.String("name", "", "the function Run to invoke")
	requests := flag.Int("requests", 1000, "invocations to time")
	warmup := flag.Int("warmup", 50, "invocations before timing")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *name, *requests, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "goinvoke:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, name string, requests, warmup int) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	config.QPS, config.Burst = -1, 0 // no client-side rate limit: time the round trip
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	runs := client.KruntimesV1alpha1().Runs(namespace)
	ctx := context.Background()
	r, err := runs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	opts := typedv1alpha1.InvokeOptions{UID: r.UID, Timeout: 10 * time.Second}
	for i := 0; i < warmup+requests; i++ {
		started := time.Now()
		if _, err := runs.Invoke(ctx, name, []byte(`{}`), opts); err != nil {
			return fmt.Errorf("invocation %d: %w", i, err)
		}
		if i >= warmup {
			fmt.Println(time.Since(started).Microseconds())
		}
	}
	return nil
}
