package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

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
	for _, bc := range []struct{ lang, handler string }{
		{lang: "python", handler: "handlers.noop"},
		{lang: "bash", handler: "noop.sh"},
	} {
		b.Run(bc.lang, func(b *testing.B) {
			h := newHarness(b, bc.lang)
			h.writeFile(b, "handlers.py", pythonHandlers)
			h.writeFile(b, "noop.sh", "exit 0\n")
			reg := h.registerReady(b, "bench", bc.handler)
			req := &runtimev1.InvokeFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), Input: []byte(`{}`)}
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
