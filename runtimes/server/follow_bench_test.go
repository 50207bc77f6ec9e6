package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// BenchmarkFollowLog measures a follower of a real task over the Runtime
// Server's socket: from a line's write (the program's own clock, just
// before it writes) to the follower holding it, and the bytes per second
// one follower receives from a program that writes as fast as it can. Run
// with
//
//	go test ./runtimes/server -run '^$' -bench FollowLog -benchtime 2000x
//
// and read p50-µs / p99-µs (latency: b.N lines 2 ms apart) and MB/s,
// skipped-bytes (throughput: b.N writes of 64 KiB; bytes the follower
// fell behind the kept tail by and skipped).
func BenchmarkFollowLog(b *testing.B) {
	b.Run("latency", func(b *testing.B) {
		h := newHarness(b, "python")
		script := fmt.Sprintf("import sys, time\nfor i in range(%d):\n    sys.stdout.write('%%d\\n' %% time.time_ns()); sys.stdout.flush(); time.sleep(0.002)\n", b.N)
		id := "latency-" + strconv.Itoa(b.N)
		stream := executeAndFollow(b, h, id, script)
		var latencies []time.Duration
		var partial []byte
		b.ResetTimer()
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for _, c := range resp.GetChunks() {
				partial = append(partial, c.GetData()...)
			}
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				ns, err := strconv.ParseInt(string(partial[:i]), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				latencies = append(latencies, now.Sub(time.Unix(0, ns)))
				partial = partial[i+1:]
			}
		}
		b.StopTimer()
		if len(latencies) != b.N {
			b.Fatalf("%d lines followed, %d written", len(latencies), b.N)
		}
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
	})
	b.Run("throughput", func(b *testing.B) {
		// The largest bound the flag allows, as a Pod that keeps much would.
		h := newHarnessWith(b, "python", nil, 3<<20)
		script := fmt.Sprintf("import sys\nblock = b'x' * 65535 + b'\\n'\nfor i in range(%d):\n    sys.stdout.buffer.write(block); sys.stdout.flush()\n", b.N)
		id := "throughput-" + strconv.Itoa(b.N)
		start := time.Now()
		stream := executeAndFollow(b, h, id, script)
		var received, skipped int64
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			skipped += resp.GetSkippedBytes()
			for _, c := range resp.GetChunks() {
				received += int64(len(c.GetData()))
			}
		}
		elapsed := time.Since(start)
		if received+skipped != int64(b.N)<<16 {
			b.Fatalf("%d bytes received and %d skipped of %d written", received, skipped, int64(b.N)<<16)
		}
		b.SetBytes(1 << 16)
		b.ReportMetric(float64(received)/elapsed.Seconds()/1e6, "MB/s-received")
		b.ReportMetric(float64(skipped), "skipped-bytes")
	})
}

func executeAndFollow(b *testing.B, h *harness, id, script string) runtimev1.Runtime_FollowLogClient {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	if _, err := h.runtime.Execute(ctx, &runtimev1.ExecuteRequest{TaskId: id, Program: &runtimev1.ExecuteRequest_Script{Script: script}, WorkingDir: h.workDir}); err != nil {
		b.Fatal(err)
	}
	stream, err := h.runtime.FollowLog(ctx, &runtimev1.FollowLogRequest{TaskId: id})
	if err != nil {
		b.Fatal(err)
	}
	return stream
}

// BenchmarkIdleFollowers measures what idle followers of one running task
// cost: b.N followers of a task that wrote one line and sleeps, each having
// read that line, in this process (the Runtime Server and its gRPC
// clients together). Run with
//
//	go test ./runtimes/server -run '^$' -bench IdleFollowers -benchtime 1000x
//
// and read heap-KiB/follower and goroutines/follower.
func BenchmarkIdleFollowers(b *testing.B) {
	h := newHarness(b, "bash")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := "idle-" + strconv.Itoa(b.N)
	if _, err := h.runtime.Execute(ctx, &runtimev1.ExecuteRequest{TaskId: id, Program: &runtimev1.ExecuteRequest_Script{Script: "echo up; exec sleep 120"}, WorkingDir: h.workDir}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = h.runtime.Cancel(context.Background(), &runtimev1.CancelRequest{TaskId: id}) })
	measure := func() (uint64, int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc, runtime.NumGoroutine()
	}
	heap0, g0 := measure()
	streams := make([]runtimev1.Runtime_FollowLogClient, 0, b.N)
	b.ResetTimer()
	for range b.N {
		stream, err := h.runtime.FollowLog(ctx, &runtimev1.FollowLogRequest{TaskId: id})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			b.Fatal(err)
		}
		streams = append(streams, stream)
	}
	b.StopTimer()
	heap1, g1 := measure()
	b.ReportMetric(float64(int64(heap1)-int64(heap0))/1024/float64(b.N), "heap-KiB/follower")
	b.ReportMetric(float64(g1-g0)/float64(b.N), "goroutines/follower")
	runtime.KeepAlive(streams)
}
