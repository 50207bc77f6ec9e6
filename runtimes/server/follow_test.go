package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// followed is what one follower received.
type followed struct {
	data    []byte
	skipped int64
	// lines are the complete lines received, each with when it arrived.
	lines   []string
	arrived []time.Time
	// writeToRecv is, per response, how long after its first chunk was
	// written the follower had it.
	writeToRecv []time.Duration
	end         error // nil when the stream ended OK
}

// follow reads a FollowLog stream from offset until it ends, or until stop
// says to stop after a response.
func follow(ctx context.Context, t testing.TB, h *harness, id string, offset int64, stop func(*followed) bool) *followed {
	t.Helper()
	stream, err := h.runtime.FollowLog(ctx, &runtimev1.FollowLogRequest{TaskId: id, Offset: offset})
	require.NoError(t, err)
	f := &followed{}
	var partial []byte
	next := offset
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return f
		}
		if err != nil {
			f.end = err
			return f
		}
		now := time.Now()
		require.Equal(t, next+resp.GetSkippedBytes(), resp.GetOffset(), "responses are consecutive but for skipped bytes")
		f.skipped += resp.GetSkippedBytes()
		next = resp.GetOffset()
		for i, c := range resp.GetChunks() {
			if i == 0 {
				f.writeToRecv = append(f.writeToRecv, now.Sub(time.Unix(0, c.GetUnixNano())))
			}
			f.data = append(f.data, c.GetData()...)
			next += int64(len(c.GetData()))
			partial = append(partial, c.GetData()...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				f.lines = append(f.lines, string(partial[:i]))
				f.arrived = append(f.arrived, now)
				partial = partial[i+1:]
			}
		}
		require.LessOrEqual(t, next, resp.GetWritten())
		if stop != nil && stop(f) {
			return f
		}
	}
}

// TestFollowLog follows tasks of a real Runtime Server over its socket.
func TestFollowLog(t *testing.T) {
	h := newHarness(t, "bash")
	execute := func(t *testing.T, id, script string) {
		_, err := h.runtime.Execute(testContext(t), &runtimev1.ExecuteRequest{TaskId: id, Program: &runtimev1.ExecuteRequest_Script{Script: script}, WorkingDir: h.workDir})
		require.NoError(t, err)
	}
	wait := func(t *testing.T, id string) *runtimev1.TaskStatus {
		st, err := h.runtime.Wait(testContext(t), &runtimev1.WaitRequest{TaskId: id, IncludeLogs: true})
		require.NoError(t, err)
		return st
	}
	kept := func(st *runtimev1.TaskStatus) []byte {
		var b []byte
		for _, c := range st.GetLog().GetChunks() {
			b = append(b, c.GetData()...)
		}
		return b
	}

	t.Run("each line arrives before the next is printed; the follow ends after the last byte", func(t *testing.T) {
		// Each line carries the time it was printed (date +%s%N, just
		// before echo).
		const n = 10
		execute(t, "numbered", fmt.Sprintf(`for i in $(seq 1 %d); do echo "line $i $(date +%%s%%N)"; sleep 0.2; done; echo done >&2`, n))
		f := follow(testContext(t), t, h, "numbered", 0, nil)
		require.NoError(t, f.end)
		require.Len(t, f.lines, n+1)
		printed := make([]time.Time, n)
		for i := 0; i < n; i++ {
			fields := strings.Fields(f.lines[i])
			require.Len(t, fields, 3, f.lines[i])
			require.Equal(t, strconv.Itoa(i+1), fields[1])
			ns, err := strconv.ParseInt(fields[2], 10, 64)
			require.NoError(t, err)
			printed[i] = time.Unix(0, ns)
		}
		for i := 0; i+1 < n; i++ {
			assert.True(t, f.arrived[i].Before(printed[i+1]), "line %d arrived at %v, after line %d was printed at %v", i+1, f.arrived[i], i+2, printed[i+1])
		}
		assert.Equal(t, "done", f.lines[n])
		st := wait(t, "numbered")
		assert.Equal(t, string(kept(st)), string(f.data), "the follower got what was kept")
		sort.Slice(f.writeToRecv, func(i, j int) bool { return f.writeToRecv[i] < f.writeToRecv[j] })
		t.Logf("write to follower: median %v, max %v over %d responses", f.writeToRecv[len(f.writeToRecv)/2], f.writeToRecv[len(f.writeToRecv)-1], len(f.writeToRecv))
	})

	t.Run("a reconnect from the offset reached neither loses nor repeats bytes", func(t *testing.T) {
		execute(t, "resume", `for i in $(seq 1 8); do echo "line $i"; printf 'err %s\n' $i >&2; sleep 0.1; done`)
		ctx, cancel := context.WithCancel(testContext(t))
		first := follow(ctx, t, h, "resume", 0, func(f *followed) bool { return len(f.lines) >= 3 })
		cancel()
		second := follow(testContext(t), t, h, "resume", int64(len(first.data)), nil)
		require.NoError(t, second.end)
		st := wait(t, "resume")
		assert.Equal(t, string(kept(st)), string(first.data)+string(second.data))
		assert.NotEmpty(t, second.data)

		// From the middle of a chunk, after the task ended.
		all := kept(st)
		third := follow(testContext(t), t, h, "resume", 3, nil)
		require.NoError(t, third.end)
		assert.Equal(t, string(all[3:]), string(third.data))
		end := follow(testContext(t), t, h, "resume", int64(len(all)), nil)
		require.NoError(t, end.end)
		assert.Empty(t, end.data)
	})

	t.Run("bytes no longer kept are skipped and counted", func(t *testing.T) {
		// The harness keeps 64 KiB: a follower from 0 after 300 KB gets the
		// head, a skip and the tail.
		execute(t, "chatty", `for i in $(seq 1 30000); do echo "line $i"; done`)
		st := wait(t, "chatty")
		f := follow(testContext(t), t, h, "chatty", 0, nil)
		require.NoError(t, f.end)
		assert.Equal(t, st.GetLog().GetDroppedBytes(), f.skipped)
		assert.Equal(t, string(kept(st)), string(f.data))
	})

	t.Run("unknown task and an offset past the end", func(t *testing.T) {
		f := follow(testContext(t), t, h, "nope", 0, nil)
		assert.Equal(t, codes.NotFound, status.Code(f.end), "%v", f.end)
		execute(t, "short", `echo hi`)
		wait(t, "short")
		f = follow(testContext(t), t, h, "short", 100, nil)
		assert.Equal(t, codes.OutOfRange, status.Code(f.end), "%v", f.end)
	})
}
