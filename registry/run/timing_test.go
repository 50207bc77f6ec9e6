package run

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
	runtimedv1 "kruntimes.io/kruntimes/proto/runtimedv1"
)

// timingPart is one metric of a Server-Timing header.
type timingPart struct {
	name, desc string
	micros     int64
	hasDur     bool
}

// parseServerTiming parses what serverTiming writes: name;dur=ms.µs or
// name;desc=word, comma-separated.
func parseServerTiming(t *testing.T, header string) []timingPart {
	t.Helper()
	var parts []timingPart
	for _, metric := range strings.Split(header, ",") {
		fields := strings.Split(strings.TrimSpace(metric), ";")
		p := timingPart{name: fields[0]}
		for _, param := range fields[1:] {
			k, v, ok := strings.Cut(param, "=")
			require.True(t, ok, "parameter %q of %q", param, header)
			switch k {
			case "dur":
				ms, frac, ok := strings.Cut(v, ".")
				require.True(t, ok && len(frac) == 3, "dur %q is ms with whole µs", v)
				whole, err := strconv.ParseInt(ms+frac, 10, 64)
				require.NoError(t, err)
				p.micros, p.hasDur = whole, true
			case "desc":
				p.desc = v
			default:
				t.Fatalf("unknown parameter %q in %q", k, header)
			}
		}
		parts = append(parts, p)
	}
	return parts
}

func timingNames(parts []timingPart) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p.name)
	}
	return out
}

func sumMicros(parts []timingPart) int64 {
	var n int64
	for _, p := range parts {
		n += p.micros
	}
	return n
}

func TestServerTimingAddsUpToTheTotal(t *testing.T) {
	cases := []struct {
		name   string
		total  time.Duration
		answer *runtimedclient.Answer
		want   string
	}{
		{"each hop its own share", 5123456 * time.Nanosecond, &runtimedclient.Answer{Runtimed: 4_100_999, Handler: 3_000_500, WorkerWarm: true},
			"apiserver;dur=1.023, runtimed;dur=1.100, handler;dur=3.000, worker;desc=warm"},
		{"a cold worker", 2 * time.Millisecond, &runtimedclient.Answer{Runtimed: 1_500_000, Handler: 1_000_000},
			"apiserver;dur=0.500, runtimed;dur=0.500, handler;dur=1.000, worker;desc=cold"},
		{"a replay names no handler time", 2 * time.Millisecond, &runtimedclient.Answer{Runtimed: 300_000, Handler: 60_000_000, WorkerWarm: true, Replayed: true},
			"apiserver;dur=1.700, runtimed;dur=0.300, dedup;desc=replayed"},
		{"a runtimed that does not say counts as the handler", 2 * time.Millisecond, &runtimedclient.Answer{Handler: 1_000_000, WorkerWarm: true},
			"apiserver;dur=1.000, runtimed;dur=0.000, handler;dur=1.000, worker;desc=warm"},
		{"clocks that disagree never exceed the total", time.Millisecond, &runtimedclient.Answer{Runtimed: 9_000_000, Handler: 8_000_000, WorkerWarm: true},
			"apiserver;dur=0.000, runtimed;dur=0.000, handler;dur=1.000, worker;desc=warm"},
		{"no answer from runtimed: the apiserver's alone", 1234 * time.Microsecond, nil, "apiserver;dur=1.234"},
	}
	assert.Equal(t, "apiserver;dur=1.500, runtimed;dur=0.500, dedup;desc=replayed", errorServerTiming(2*time.Millisecond, 500_000, true))
	assert.Equal(t, "apiserver;dur=0.000, runtimed;dur=1.000", errorServerTiming(time.Millisecond, 9_000_000, false), "never past the total")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := serverTiming(tc.total, tc.answer)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.total.Microseconds(), sumMicros(parseServerTiming(t, got)), "the parts add up to the total")
		})
	}
}

func TestInvokeAnswersCarryServerTiming(t *testing.T) {
	t.Run("an answer names every hop", func(t *testing.T) {
		rt := &fakeRuntimed{respond: func(in *runtimedv1.InvokeRequest) *runtimedv1.InvokeResponse {
			return &runtimedv1.InvokeResponse{InvocationId: in.GetInvocation().GetInvocationId(), Output: []byte(`1`), RuntimedNanos: 1000, DurationNanos: 500, WorkerWarm: true}
		}}
		before := time.Now()
		a := invoke(t, &fakeRouter{runtimed: rt}, time.Minute, call{})
		elapsed := time.Since(before)
		require.Equal(t, http.StatusOK, a.code, "%s", a.body)
		parts := parseServerTiming(t, a.header.Get("Server-Timing"))
		assert.Equal(t, []string{"apiserver", "runtimed", "handler", "worker"}, timingNames(parts))
		assert.Equal(t, "warm", parts[3].desc)
		assert.LessOrEqual(t, sumMicros(parts), elapsed.Microseconds(), "the parts add up to no more than the caller's total")
		assert.Empty(t, a.header.Get(invocation.HeaderDeduplicated), "a first answer is not marked")
	})
	t.Run("an error before runtimed carries the apiserver's share only", func(t *testing.T) {
		a := invoke(t, &fakeRouter{err: apierrors.NewNotFound(kruntimes.Resource("runs"), "fn")}, time.Minute, call{})
		require.Equal(t, http.StatusNotFound, a.code)
		assert.Equal(t, []string{"apiserver"}, timingNames(parseServerTiming(t, a.header.Get("Server-Timing"))))
	})
	t.Run("an error from a runtimed that does not say its time carries the apiserver's share only", func(t *testing.T) {
		a := invoke(t, &fakeRouter{runtimed: &fakeRuntimed{err: status.Error(codes.Internal, "x"), dispatched: true}}, time.Minute, call{})
		require.Equal(t, http.StatusBadGateway, a.code)
		assert.Equal(t, []string{"apiserver"}, timingNames(parseServerTiming(t, a.header.Get("Server-Timing"))))
	})
	t.Run("an error runtimed answered carries runtimed's share", func(t *testing.T) {
		rt := &fakeRuntimed{err: status.Error(codes.DeadlineExceeded, "stopped"), dispatched: true,
			header: metadata.Pairs(invocation.MetadataRuntimedNanos, "1000")}
		before := time.Now()
		a := invoke(t, &fakeRouter{runtimed: rt}, time.Minute, call{})
		elapsed := time.Since(before)
		require.Equal(t, http.StatusGatewayTimeout, a.code)
		parts := parseServerTiming(t, a.header.Get("Server-Timing"))
		assert.Equal(t, []string{"apiserver", "runtimed"}, timingNames(parts))
		assert.LessOrEqual(t, sumMicros(parts), elapsed.Microseconds())
		assert.LessOrEqual(t, parts[1].micros, int64(1))
	})
}

func TestInvokeSaysWhetherTheCallerSentTheID(t *testing.T) {
	rt := &fakeRuntimed{}
	a := invoke(t, &fakeRouter{runtimed: rt}, time.Minute, call{headers: map[string]string{invocation.HeaderID: "mine"}})
	require.Equal(t, http.StatusOK, a.code)
	assert.True(t, rt.got.GetCallerSentId(), "an ID the caller sent is deduplicated")
	assert.Equal(t, "mine", rt.got.GetInvocation().GetInvocationId())

	a = invoke(t, &fakeRouter{runtimed: rt}, time.Minute, call{})
	require.Equal(t, http.StatusOK, a.code)
	assert.False(t, rt.got.GetCallerSentId(), "a minted ID is never deduplicated")
	assert.Equal(t, a.header.Get(invocation.HeaderID), rt.got.GetInvocation().GetInvocationId())
}

func TestInvokeMarksReplays(t *testing.T) {
	replayed := metadata.Pairs(invocation.MetadataDeduplicated, "true")
	t.Run("a replayed answer", func(t *testing.T) {
		rt := &fakeRuntimed{header: replayed, respond: func(in *runtimedv1.InvokeRequest) *runtimedv1.InvokeResponse {
			return &runtimedv1.InvokeResponse{InvocationId: in.GetInvocation().GetInvocationId(), Output: []byte(`1`), RuntimedNanos: 1000, DurationNanos: 5_000_000, WorkerWarm: true}
		}}
		a := invoke(t, &fakeRouter{runtimed: rt}, time.Minute, call{headers: map[string]string{invocation.HeaderID: "mine"}})
		require.Equal(t, http.StatusOK, a.code)
		assert.Equal(t, "true", a.header.Get(invocation.HeaderDeduplicated))
		parts := parseServerTiming(t, a.header.Get("Server-Timing"))
		assert.Equal(t, []string{"apiserver", "runtimed", "dedup"}, timingNames(parts))
		assert.Equal(t, "replayed", parts[2].desc)
		assert.Equal(t, int64(5), a.result(t).DurationMillis, "the body is the first answer's")
	})
	t.Run("a replayed error", func(t *testing.T) {
		rt := &fakeRuntimed{header: replayed, err: status.Error(codes.Aborted, "outcome unknown"), dispatched: true}
		a := invoke(t, &fakeRouter{runtimed: rt}, time.Minute, call{headers: map[string]string{invocation.HeaderID: "mine"}})
		require.Equal(t, http.StatusBadGateway, a.code)
		assert.Equal(t, "true", a.header.Get(invocation.HeaderDeduplicated))
	})
	t.Run("an answer not replayed is not marked", func(t *testing.T) {
		a := invoke(t, &fakeRouter{runtimed: &fakeRuntimed{}}, time.Minute, call{headers: map[string]string{invocation.HeaderID: "mine"}})
		require.Equal(t, http.StatusOK, a.code)
		assert.Empty(t, a.header.Get(invocation.HeaderDeduplicated))
	})
}
