package server_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// TestTaskLog checks the log both languages hand to runtimed: both streams
// in write order with their bytes exact, and a bounded head and tail with
// the dropped bytes counted.
func TestTaskLog(t *testing.T) {
	scripts := map[string]struct{ ordered, chatty string }{
		// The writes are 200 ms apart: two pipes are read by two readers,
		// and only writes that far apart have an order to keep. chatty's
		// last write waits 500 ms too: until then up to a pipe's buffer
		// (64 KiB) of stdout may still be unread, and read after END it
		// would push END out of the tail.
		"bash": {
			ordered: `echo one; sleep 0.2; printf 'two \377\000\033[31m\n' >&2; sleep 0.2; echo three`,
			chatty:  `for i in $(seq 1 20000); do echo "line $i"; done; sleep 0.5; echo END >&2`,
		},
		"python": {
			ordered: "import sys, time\nprint('one', flush=True)\ntime.sleep(0.2)\nsys.stderr.buffer.write(b'two \\xff\\x00\\x1b[31m\\n'); sys.stderr.flush()\ntime.sleep(0.2)\nprint('three', flush=True)\n",
			chatty:  "import sys, time\nfor i in range(1, 20001):\n    print('line %d' % i)\nsys.stdout.flush()\ntime.sleep(0.5)\nsys.stderr.write('END\\n')\n",
		},
	}
	for lang, s := range scripts {
		t.Run(lang, func(t *testing.T) {
			h := newHarness(t, lang)
			run := func(id, script string) *runtimev1.TaskStatus {
				ctx := testContext(t)
				_, err := h.runtime.Execute(ctx, &runtimev1.ExecuteRequest{TaskId: id, Program: &runtimev1.ExecuteRequest_Script{Script: script}, WorkingDir: h.workDir})
				require.NoError(t, err)
				st, err := h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: id, IncludeLogs: true})
				require.NoError(t, err)
				require.Equal(t, runtimev1.TaskState_TASK_STATE_SUCCEEDED.String(), st.GetState().String(), st.GetMessage())
				return st
			}

			t.Run("both streams in write order, bytes exact", func(t *testing.T) {
				l := run("ordered", s.ordered).GetLog()
				require.NotNil(t, l)
				var streams []runtimev1.LogStream
				var data []byte
				for _, c := range l.GetChunks() {
					if n := len(streams); n == 0 || streams[n-1] != c.GetStream() {
						streams = append(streams, c.GetStream())
					}
					data = append(data, c.GetData()...)
				}
				assert.Equal(t, "one\ntwo \xff\x00\x1b[31m\nthree\n", string(data))
				assert.Equal(t, []runtimev1.LogStream{runtimev1.LogStream_LOG_STREAM_STDOUT, runtimev1.LogStream_LOG_STREAM_STDERR, runtimev1.LogStream_LOG_STREAM_STDOUT}, streams)
				assert.Zero(t, l.GetDroppedBytes())
			})

			t.Run("head and tail within the bound, dropped bytes counted", func(t *testing.T) {
				st := run("chatty", s.chatty)
				l := st.GetLog()
				var head, tail []byte
				for i, c := range l.GetChunks() {
					if i < int(l.GetDroppedAfter()) {
						head = append(head, c.GetData()...)
					} else {
						tail = append(tail, c.GetData()...)
					}
				}
				var all strings.Builder
				for i := 1; i <= 20000; i++ {
					all.WriteString("line ")
					all.WriteString(strconv.Itoa(i))
					all.WriteString("\n")
				}
				all.WriteString("END\n")
				assert.LessOrEqual(t, len(head)+len(tail), 64<<10)
				assert.Equal(t, int64(all.Len()), int64(len(head)+len(tail))+l.GetDroppedBytes())
				assert.True(t, strings.HasPrefix(all.String(), string(head)), "the head is the first bytes")
				// Two pipes are read by two readers, so the last stdout bytes
				// may be read after the stderr line written later: the tail
				// holds the last write of each stream, in read order.
				assert.True(t, bytes.Contains(tail, []byte("END\n")), "the tail holds the last stderr write")
				assert.True(t, bytes.HasSuffix(bytes.Replace(tail, []byte("END\n"), nil, 1), []byte("line 20000\n")), "the tail holds the last stdout write")
				// Without include_logs the status carries no log.
				plain, err := h.runtime.Status(testContext(t), &runtimev1.StatusRequest{TaskId: "chatty"})
				require.NoError(t, err)
				assert.Nil(t, plain.GetLog())
			})
		})
	}
}
