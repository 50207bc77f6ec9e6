package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"kruntimes.io/kruntimes/apiserver/testserver"
)

// TestScaleSmoke runs the benchmark's fill and every measurement at 50 Runs
// against an in-process kruntimes-apiserver on its embedded storage, so the
// command cannot rot; the clusters it starts are left to the benchmark
// itself (go run ./test/bench/scale).
func TestScaleSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	progressOut = io.Discard
	s := testserver.Start(t, "")
	direct, err := newTarget("embedded", s.Config, "/apis/kruntimes.io/v1alpha1", "kruntimes.io/v1alpha1", "default", 4)
	require.NoError(t, err)
	self := process{name: "kruntimes-apiserver", pid: os.Getpid(), heap: func(context.Context) (int64, error) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapInuse), nil
	}}
	subj := &subject{
		name: "embedded", direct: direct, aggregated: direct,
		server: self, processes: []process{self},
		dataSize: func(context.Context) (int64, error) { return dirSize(s.DataDir), nil },
	}
	r, err := subj.measure(ctx, options{runs: 50, workers: 4, samples: 5, settle: time.Millisecond})
	require.NoError(t, err)
	for _, row := range []string{"fill (create + status write)", "kruntimes-apiserver RSS (anon + file)", "kruntimes-apiserver live heap",
		"data size (growth)", "GET p50 / p99", "GET p50 / p99, one Run stored", "LIST page of 500 p50 / p99", "full LIST, JSON (p50 / max)",
		"watch start p50 / p99", "watch-list of all Runs (an informer's start)", "aggregated LIST page of 500 p50 / p99",
		"LIST page of 500, protobuf, p50 / p99", "kruntimes-apiserver RSS (anon + file), settled", "kruntimes-apiserver live heap, settled"} {
		assert.NotEmpty(t, r.rows[row], row)
	}
	assert.Contains(t, r.rows["watch-list of all Runs (an informer's start)"], "for 50 Runs")

	// The Runs are the shape the benchmark promises: terminal, with outputs,
	// written through the status subresource.
	b, err := direct.do(ctx, "GET", direct.runsURL()+"/"+runName(49), "", nil)
	require.NoError(t, err)
	var run struct {
		Spec struct {
			Env []any `json:"env"`
		} `json:"spec"`
		Status struct {
			Phase   string            `json:"phase"`
			Outputs map[string]string `json:"outputs"`
		} `json:"status"`
	}
	require.NoError(t, json.Unmarshal(b, &run))
	assert.Equal(t, "Failed", run.Status.Phase)
	assert.NotEmpty(t, run.Status.Outputs)
	assert.NotEmpty(t, run.Spec.Env)

	// Settling wrote the first Runs, so the watch cache's history turned.
	b, err = direct.do(ctx, "GET", direct.runsURL()+"/"+runName(0), "", nil)
	require.NoError(t, err)
	assert.Contains(t, string(b), "bench.kruntimes.io/touched")

	var out bytes.Buffer
	printResults(&out, options{runs: 50, workers: 4, samples: 5, settle: time.Millisecond}, []*result{r})
	assert.Contains(t, out.String(), "| LIST page of 500 p50 / p99 |")
}

// TestCRDSchemaIsStructural pins that the CRD carries the Run's schema:
// spec and status with their fields, references resolved.
func TestCRDSchemaIsStructural(t *testing.T) {
	crd, err := crdObject()
	require.NoError(t, err)
	b, err := json.Marshal(crd)
	require.NoError(t, err)
	for _, want := range []string{`"inline"`, `"outputs"`, `"assignedPodUID"`, `"lastTransitionTime"`, `"status":{}`} {
		assert.Contains(t, string(b), want)
	}
	assert.NotContains(t, string(b), "$ref")
	// No documentation (the CRD stands for storage only); a property named
	// description, such as spec.mode.function's, is an object, not a string.
	assert.NotContains(t, string(b), `"description":"`)
	assert.Contains(t, string(b), `"description":{"type":"string"}`, "spec.mode.function.description is a field")
}
