package embedded

import (
	"flag"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Benchmarks measure the store, not klog's output. klog.SetLogger must
	// not run while anything logs, so it runs here, once, before any test or
	// benchmark starts a goroutine: set in each benchmark, it raced with an
	// earlier benchmark's store or etcd client still logging (-race said so).
	if bench := flag.Lookup("test.bench"); bench != nil && bench.Value.String() != "" {
		klog.SetLogger(logr.Discard())
	}
	os.Exit(m.Run())
}
