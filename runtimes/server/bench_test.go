package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"kruntimes.io/kruntimes/apis/invocation"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/test/bench/cputime"
)

// BenchmarkInvokeFunction measures the InvokeFunction round trip of a no-op
// handler through real gRPC on a unix socket: the hot path runtimed pays per
// invoke. Run with
//
//	go test ./runtimes/server -run '^$' -bench InvokeFunction -benchtime 5000x
//
// and read p50-µs / p99-µs / invokes/s, and the CPU per invocation of the
// Go side (cpu-µs/op: the gRPC client and the server) and of the worker
// (child-cpu-µs/op).
func BenchmarkInvokeFunction(b *testing.B) {
	// A JSON document of 16 KiB, as a function that is handed records
	// would get, to show what the input and output cost on their way.
	records := `[` + strings.Repeat(`{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","name":"a \"quoted\" name","tags":["x","y"],"n":12345},`, 160) + `{}]`
	for _, bc := range []struct{ name, lang, handler, input string }{
		{name: "python", lang: "python", handler: "handlers.noop", input: `{}`},
		{name: "python-echo-16KiB", lang: "python", handler: "handlers.echo", input: records},
		{name: "bash", lang: "bash", handler: "noop.sh", input: `{}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHarness(b, bc.lang)
			h.writeFile(b, "handlers.py", pythonHandlers)
			h.writeFile(b, "noop.sh", "exit 0\n")
			reg := h.registerReady(b, "bench", bc.handler)
			// As runtimed calls it: with the apiserver's invocation ID, and
			// the content type under which the apiserver validated the input.
			req := &runtimev1.InvokeFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(),
				InvocationId: "bench", Input: []byte(bc.input), ContentType: invocation.ContentTypeJSON}
			ctx := context.Background()
			// Warm the connection and the worker so the first sample is not
			// an outlier.
			for range 10 {
				if _, err := h.functions.InvokeFunction(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			latencies := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			cpu := cputime.Now()
			for b.Loop() {
				start := time.Now()
				resp, err := h.functions.InvokeFunction(ctx, req)
				latencies = append(latencies, time.Since(start))
				if err != nil || resp.GetError() != nil {
					b.Fatalf("invoke: %v %v", err, resp.GetError())
				}
			}
			cputime.Report(b, cpu)
			slices.Sort(latencies)
			var total time.Duration
			for _, l := range latencies {
				total += l
			}
			pct := func(p float64) float64 {
				return float64(latencies[int(float64(len(latencies)-1)*p)].Nanoseconds()) / 1e3
			}
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
			b.ReportMetric(float64(len(latencies))/total.Seconds(), "invokes/s")
		})
	}
}

// BenchmarkInvokeFunctionConcurrent is BenchmarkInvokeFunction's Python
// case with 8 functions invoked at once, one caller each, as a Runtime Pod
// serving several busy functions sees it: it shows what the server's
// settings cost under load, not only one call at a time.
func BenchmarkInvokeFunctionConcurrent(b *testing.B) {
	const functions = 8
	h := newHarness(b, "python")
	h.writeFile(b, "handlers.py", pythonHandlers)
	reqs := make([]*runtimev1.InvokeFunctionRequest, functions)
	for i := range reqs {
		reg := h.registerReady(b, fmt.Sprintf("bench-%d", i), "handlers.noop")
		reqs[i] = &runtimev1.InvokeFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(),
			InvocationId: fmt.Sprintf("bench-%d", i), Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON}
		if _, err := h.functions.InvokeFunction(b.Context(), reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	cpu := cputime.Now()
	b.ResetTimer()
	var g errgroup.Group
	for i, req := range reqs {
		// Caller i makes every functions-th invocation of the b.N.
		g.Go(func() error {
			for n := i; n < b.N; n += functions {
				if _, err := h.functions.InvokeFunction(context.Background(), req); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cputime.Report(b, cpu)
}
