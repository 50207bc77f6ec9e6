package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/kruntimes/install"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// target is one server that serves Runs, and the path of its Run API.
type target struct {
	name string
	// client and base reach the server; prefix is the API group version's
	// path, e.g. /apis/kruntimes.io/v1alpha1.
	client     *http.Client
	base       string
	prefix     string
	apiVersion string
	namespace  string
}

func newTarget(name string, config *rest.Config, prefix, apiVersion, namespace string, conns int) (*target, error) {
	client, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, err
	}
	if t, ok := client.Transport.(interface{ WrappedRoundTripper() http.RoundTripper }); ok {
		if tr, ok := t.WrappedRoundTripper().(*http.Transport); ok {
			tr.MaxIdleConnsPerHost = conns
		}
	}
	if tr, ok := client.Transport.(*http.Transport); ok {
		tr.MaxIdleConnsPerHost = conns
	}
	return &target{name: name, client: client, base: strings.TrimSuffix(config.Host, "/"), prefix: prefix, apiVersion: apiVersion, namespace: namespace}, nil
}

func (t *target) runsURL() string {
	return t.base + t.prefix + "/namespaces/" + t.namespace + "/runs"
}

// do sends one request and reads the whole answer, which is what a
// client pays before it can decode; it returns the body.
func (t *target) do(ctx context.Context, method, u, contentType string, body []byte) ([]byte, error) {
	return t.doAccept(ctx, method, u, contentType, "application/json", body)
}

// doAccept is do with the response media type chosen.
func (t *target) doAccept(ctx context.Context, method, u, contentType, accept string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, truncate(b, 300))
	}
	return b, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

func runName(i int) string { return fmt.Sprintf("scale-%06d", i) }

// runObject is a realistic task Run: a script inline, arguments, env, labels.
func (t *target) runObject(name string) []byte {
	env := make([]map[string]string, 0, 6)
	for _, kv := range [][2]string{{"STAGE", "test"}, {"REPO", "github.com/example/service"}, {"COMMIT", "4f9c2e1d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"}, {"SHARD", "3"}, {"SHARDS", "16"}, {"LOG_LEVEL", "info"}} {
		env = append(env, map[string]string{"name": kv[0], "value": kv[1]})
	}
	b, _ := json.Marshal(map[string]any{
		"apiVersion": t.apiVersion, "kind": "Run",
		"metadata": map[string]any{
			"name":   name,
			"labels": map[string]string{"app.kubernetes.io/name": "ci", "ci.example.com/pipeline": "service-main"},
		},
		"spec": map[string]any{
			"runtime": "bash",
			"source": map[string]any{"inline": `set -euo pipefail
cd "$WORKSPACE"
echo "running shard $SHARD of $SHARDS for $REPO@$COMMIT"
go test -count=1 -shuffle=on $(go list ./... | awk -v s="$SHARD" -v n="$SHARDS" 'NR % n == s')
echo "coverage=$(go tool cover -func=cover.out | tail -1 | awk '{print $3}')" >> "$KRUNTIMES_OUTPUTS"
`},
			"mode":                    map[string]any{"task": map[string]any{"entrypoint": "bash", "args": []string{"-c", "run.sh"}}},
			"env":                     env,
			"timeout":                 "10m0s",
			"ttlSecondsAfterFinished": 86400,
		},
	})
	return b
}

// statusPatch is a terminal status: assigned, started, completed, with
// outputs, conditions and an exit code.
func statusPatch(now time.Time) []byte {
	ts := func(d time.Duration) string { return now.Add(d).UTC().Format("2006-01-02T15:04:05.000000Z07:00") }
	b, _ := json.Marshal(map[string]any{"status": map[string]any{
		"phase":          "Failed",
		"attempt":        1,
		"message":        "task exited with code 1: 2 tests failed in ./pkg/store",
		"assignedPod":    "runtime-bash-7d9f8c6b5-x2x4q",
		"assignedPodUID": "0a6f2f61-3c1e-4a7b-9d42-6f1e2b3c4d5e",
		"startTime":      ts(-40 * time.Second),
		"completionTime": ts(0),
		"exitCode":       1,
		"outputs":        map[string]string{"coverage": "81.4%", "failed": "2", "report": "s3://ci-artifacts/service-main/shard-3/report.xml"},
		"conditions": []map[string]any{
			{"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": "bound to Pod runtime-bash-7d9f8c6b5-x2x4q", "lastTransitionTime": ts(-41 * time.Second)},
			{"type": "Completed", "status": "True", "reason": "Failed", "message": "exit code 1", "lastTransitionTime": ts(0)},
		},
	}})
	return b
}

// fill creates Runs from index `from` up to n with `workers` in flight, and
// writes each one's terminal status through the status subresource.
func (t *target) fill(ctx context.Context, from, n, workers int, progress func(done int)) (time.Duration, error) {
	start := time.Now()
	var next, done atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	status := statusPatch(time.Now())
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				name := runName(i)
				if _, err := t.do(ctx, http.MethodPost, t.runsURL(), "application/json", t.runObject(name)); err != nil {
					errs <- err
					return
				}
				if _, err := t.do(ctx, http.MethodPatch, t.runsURL()+"/"+name+"/status", "application/merge-patch+json", status); err != nil {
					errs <- err
					return
				}
				if d := done.Add(1); progress != nil && d%10000 == 0 {
					progress(int(d))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// latencies are sorted request durations.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(float64(len(l))*p/100))]
}

func timed(samples int, f func(i int) error) (latencies, error) {
	l := make(latencies, 0, samples)
	for i := range samples {
		start := time.Now()
		if err := f(i); err != nil {
			return nil, err
		}
		l = append(l, time.Since(start))
	}
	slices.Sort(l)
	return l, nil
}

// getLatency GETs random Runs of the first n, one at a time.
func (t *target) getLatency(ctx context.Context, n, samples int) (latencies, error) {
	return timed(samples, func(int) error {
		_, err := t.do(ctx, http.MethodGet, t.runsURL()+"/"+runName(rand.IntN(n)), "", nil)
		return err
	})
}

// listPageLatency lists pages of 500 in the media type accept, following
// continue tokens through at most 20 pages before starting over. A page is
// timed until its body is read: decoding it is the client's cost, the same
// for every server.
func (t *target) listPageLatency(ctx context.Context, samples int, accept string) (latencies, error) {
	cont := ""
	pages := 0
	l := make(latencies, 0, samples)
	for range samples {
		u := t.runsURL() + "?limit=500"
		if cont != "" {
			u += "&continue=" + url.QueryEscape(cont)
		}
		start := time.Now()
		b, err := t.doAccept(ctx, http.MethodGet, u, "", accept, nil)
		if err != nil {
			return nil, err
		}
		l = append(l, time.Since(start))
		if cont, err = continueToken(b, accept); err != nil {
			return nil, err
		}
		if pages++; pages == 20 {
			cont, pages = "", 0
		}
	}
	slices.Sort(l)
	return l, nil
}

// fullList lists every Run in one response; it returns the durations and
// the response size.
func (t *target) fullList(ctx context.Context, samples int) (latencies, int, error) {
	size := 0
	l, err := timed(samples, func(int) error {
		b, err := t.do(ctx, http.MethodGet, t.runsURL(), "", nil)
		size = len(b)
		return err
	})
	return l, size, err
}

// watchStart opens a watch from the current resourceVersion (what a client
// that already listed does) and times the response headers; and a
// watch-list (sendInitialEvents, what an informer does on start) until the
// bookmark that ends its initial events, which is the cost of a new
// informer or of the hosted controllers starting over.
func (t *target) watchStart(ctx context.Context, samples int) (watch latencies, err error) {
	return timed(samples, func(int) error {
		b, err := t.do(ctx, http.MethodGet, t.runsURL()+"?limit=1", "", nil)
		if err != nil {
			return err
		}
		var list struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.runsURL()+"?watch=1&allowWatchBookmarks=true&resourceVersion="+list.Metadata.ResourceVersion, nil)
		if err != nil {
			return err
		}
		resp, err := t.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("watch: %s", resp.Status)
		}
		return nil
	})
}

// watchList times a watch-list until its initial events end, and returns
// how many Runs it delivered.
func (t *target) watchList(ctx context.Context) (time.Duration, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		t.runsURL()+"?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("watch-list: %s: %s", resp.Status, truncate(b, 300))
	}
	dec := json.NewDecoder(resp.Body)
	count := 0
	for {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return 0, count, fmt.Errorf("watch-list after %d events: %w", count, err)
		}
		switch ev.Type {
		case "ADDED":
			count++
		case "BOOKMARK":
			if ev.Object.Metadata.Annotations["k8s.io/initial-events-end"] == "true" {
				return time.Since(start), count, nil
			}
		case "ERROR":
			return 0, count, fmt.Errorf("watch-list: an error event after %d events", count)
		}
	}
}

const protobufMediaType = "application/vnd.kubernetes.protobuf"

// runCodecs decodes kruntimes' Run lists in protobuf.
var runCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return serializer.NewCodecFactory(scheme)
}()

// servesProtobuf says whether the target serves Runs in protobuf: the
// kruntimes API does; custom resources in kube-apiserver do not.
func (t *target) servesProtobuf() bool { return t.apiVersion == v1alpha1.SchemeGroupVersion.String() }

// continueToken reads a list page's continue token.
func continueToken(b []byte, mediaType string) (string, error) {
	if mediaType == protobufMediaType {
		info, ok := runtime.SerializerInfoForMediaType(runCodecs.SupportedMediaTypes(), mediaType)
		if !ok {
			return "", fmt.Errorf("no %s decoder", mediaType)
		}
		list := &v1alpha1.RunList{}
		if _, _, err := info.Serializer.Decode(b, nil, list); err != nil {
			return "", err
		}
		return list.Continue, nil
	}
	var list struct {
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
	}
	err := json.Unmarshal(b, &list)
	return list.Metadata.Continue, err
}

// touch annotates the first n Runs one at a time: writes that change
// nothing the benchmark measures.
func (t *target) touch(ctx context.Context, n int) error {
	for i := range n {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.kruntimes.io/touched":"%d"}}}`, time.Now().UnixNano())
		if _, err := t.do(ctx, http.MethodPatch, t.runsURL()+"/"+runName(i), "application/merge-patch+json", []byte(patch)); err != nil {
			return err
		}
	}
	return nil
}
