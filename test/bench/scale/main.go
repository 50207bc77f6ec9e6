// Command scale fills N realistic task Runs (inline script, env, a terminal
// status with outputs written through the status subresource) into a fresh
// local cluster per target and reports, for each: RSS and Go heap of the
// processes that hold them, the size of their data, LIST of a page of 500,
// a full LIST, GET (and GET of a store with one Run), a new watch's start,
// and a watch-list of every Run (what the hosted controllers pay to start
// over). Targets:
//
//   - embedded: kruntimes-apiserver on its embedded storage, controllers
//     hosted;
//   - etcd3: the same apiserver on the cluster's etcd;
//   - crd: the same objects as a CustomResourceDefinition generated from
//     the Run's OpenAPI schema, in kube-apiserver and its etcd.
//
// Requests go straight to the server that holds the Runs, JSON, one at a
// time; for kruntimes-apiserver LIST and GET are also measured through
// kube-apiserver's aggregation, as users reach it.
//
//	go run ./test/bench/scale --runs 100000
//	go run ./test/bench/scale --runs 20000 --targets embedded --kruntimes-apiserver-arg=--go-memory-limit=off
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/test/localcluster"
	"kruntimes.io/kruntimes/test/repobin"
)

var progressOut io.Writer = os.Stderr

type options struct {
	runs, workers, samples int
	targets                string
	kruntimesArgs          stringList
	keep                   bool
	profileDir             string
	settle                 time.Duration
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 10000, "Runs to fill into each target.")
	flag.IntVar(&o.workers, "workers", 32, "Requests in flight while filling.")
	flag.IntVar(&o.samples, "samples", 300, "Requests per latency figure (full LISTs: a tenth, at least 3).")
	flag.StringVar(&o.targets, "targets", "embedded,etcd3,crd", "Comma-separated targets: embedded, etcd3, crd.")
	flag.Var(&o.kruntimesArgs, "kruntimes-apiserver-arg", "An extra flag of kruntimes-apiserver; repeat for more.")
	flag.BoolVar(&o.keep, "keep", false, "Leave each cluster's state directory (.local/scale/<target>) behind.")
	flag.StringVar(&o.profileDir, "heap-profile-dir", "", "When set, save kruntimes-apiserver's heap profile after the fill there as <target>.heap.pb.gz, and <target>-settled.heap.pb.gz with --settle (go tool pprof reads them).")
	flag.DurationVar(&o.settle, "settle", 0, "After the fill, wait this long (the watch cache keeps 75 s of events), write a few Runs, and report memory again; 0 skips it.")
	flag.Parse()
	ctx := context.Background()
	wd, err := os.Getwd()
	if err == nil {
		var root string
		if root, err = repobin.RepoRoot(wd); err == nil {
			var results []*result
			for _, name := range strings.Split(o.targets, ",") {
				var r *result
				if r, err = runTarget(ctx, o, root, name); err != nil {
					break
				}
				results = append(results, r)
				printResults(os.Stdout, o, results)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// runTarget starts a fresh local cluster for one target, fills it and
// measures it.
func runTarget(ctx context.Context, o options, root, name string) (*result, error) {
	cfg := localcluster.Config{
		RepoRoot: root,
		StateDir: filepath.Join(root, ".local", "scale", name),
		Progress: os.Stderr,
	}
	switch name {
	case "embedded", "etcd3":
		cfg.KruntimesStorage = name
		cfg.KruntimesArgs = o.kruntimesArgs
	case "crd":
		cfg.Kruntimes = localcluster.KruntimesDisabled
	default:
		return nil, fmt.Errorf("unknown target %q: want embedded, etcd3 or crd", name)
	}
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		return nil, err
	}
	cluster, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		cluster.Stop(ctx)
		if !o.keep {
			_ = os.RemoveAll(cfg.StateDir)
		}
	}()
	pids := cluster.PIDs()
	admin, err := rest.HTTPClientFor(cluster.AdminConfig)
	if err != nil {
		return nil, err
	}
	s := &subject{name: name}
	etcd := process{name: "etcd", pid: pids["etcd"], heap: func(ctx context.Context) (int64, error) {
		v, err := promValue(ctx, http.DefaultClient, cluster.EtcdURL+"/metrics", "go_memstats_heap_inuse_bytes")
		return int64(v), err
	}}
	etcdDB := func(ctx context.Context) (int64, error) {
		v, err := promValue(ctx, http.DefaultClient, cluster.EtcdURL+"/metrics", "etcd_mvcc_db_total_size_in_bytes")
		return int64(v), err
	}
	switch name {
	case "embedded", "etcd3":
		pid := pids["kruntimes-apiserver"]
		port, err := securePort(pid)
		if err != nil {
			return nil, err
		}
		direct := rest.CopyConfig(cluster.AdminConfig)
		direct.Host = "https://127.0.0.1:" + strconv.Itoa(port)
		if s.direct, err = newTarget(name, direct, "/apis/kruntimes.io/v1alpha1", "kruntimes.io/v1alpha1", "default", o.workers); err != nil {
			return nil, err
		}
		if s.aggregated, err = newTarget(name+" (aggregated)", cluster.AdminConfig, "/apis/kruntimes.io/v1alpha1", "kruntimes.io/v1alpha1", "default", o.workers); err != nil {
			return nil, err
		}
		debug := unixClient(filepath.Join(cfg.StateDir, "kruntimes-apiserver", "debug.sock"))
		if o.profileDir != "" {
			s.saveProfile = func(ctx context.Context, when string) error {
				return saveHeapProfile(ctx, debug, "http://kruntimes-apiserver", filepath.Join(o.profileDir, name+when+".heap.pb.gz"))
			}
		}
		s.server = process{name: "kruntimes-apiserver", pid: pid, heap: func(ctx context.Context) (int64, error) {
			return heapFromPprof(ctx, debug, "http://kruntimes-apiserver")
		}}
		if name == "embedded" {
			dataDir := filepath.Join(cfg.StateDir, "kruntimes-apiserver", "data")
			s.processes = []process{s.server}
			s.dataSize = func(context.Context) (int64, error) { return dirSize(dataDir), nil }
		} else {
			s.processes = []process{s.server, etcd}
			s.dataSize = etcdDB
		}
	case "crd":
		crd, err := crdObject()
		if err != nil {
			return nil, err
		}
		if err := installCRD(ctx, cluster.AdminConfig, crd); err != nil {
			return nil, err
		}
		prefix := "/apis/" + crdGroup + "/" + crdVersion
		if s.direct, err = newTarget(name, cluster.AdminConfig, prefix, crdGroup+"/"+crdVersion, "default", o.workers); err != nil {
			return nil, err
		}
		s.server = process{name: "kube-apiserver", pid: pids["kube-apiserver"], heap: func(ctx context.Context) (int64, error) {
			return heapFromPprof(ctx, admin, strings.TrimSuffix(cluster.AdminConfig.Host, "/"))
		}}
		s.processes = []process{s.server, etcd}
		s.dataSize = etcdDB
	}
	return s.measure(ctx, o)
}

// securePort reads kruntimes-apiserver's --secure-port from its command line.
func securePort(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, err
	}
	for arg := range strings.SplitSeq(string(b), "\x00") {
		if v, ok := strings.CutPrefix(arg, "--secure-port="); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("kruntimes-apiserver has no --secure-port")
}

// installCRD creates the CRD and waits until its Runs are served.
func installCRD(ctx context.Context, admin *rest.Config, crd map[string]any) error {
	t, err := newTarget("crd", admin, "/apis/"+crdGroup+"/"+crdVersion, "", "default", 1)
	if err != nil {
		return err
	}
	body, err := jsonBytes(crd)
	if err != nil {
		return err
	}
	if _, err := t.do(ctx, http.MethodPost, t.base+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", body); err != nil {
		return fmt.Errorf("creating the CRD: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := t.do(ctx, http.MethodGet, t.runsURL()+"?limit=1", "", nil)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CRD's Runs are not served after a minute: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
