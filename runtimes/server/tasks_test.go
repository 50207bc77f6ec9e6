package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

type taskCase struct {
	name       string
	req        *runtimev1.ExecuteRequest
	cancel     bool
	wantState  runtimev1.TaskState
	wantReason string
	wantCode   int32
	check      func(t *testing.T, st *runtimev1.TaskStatus)
}

// taskScripts are the per-language programs behind the shared task cases.
type taskScripts struct {
	outputsOK, exit3, argsEntry, invalidOutputs, tooLargeOutputs, sleepWithChild, chatty string
	entryFile                                                                            string
}

var bashTasks = taskScripts{
	outputsOK:       `echo hi; echo "A=1" >> "$KRUNTIMES_OUTPUTS"; echo "B=x=y" >> "$KRUNTIMES_OUTPUTS"`,
	exit3:           `echo "A=1" > "$KRUNTIMES_OUTPUTS"; echo oops >&2; exit 3`,
	argsEntry:       `echo "$1-$2-$FOO-$(basename "$(pwd)")"`,
	entryFile:       "entry.sh",
	invalidOutputs:  `echo "no equals sign" > "$KRUNTIMES_OUTPUTS"`,
	tooLargeOutputs: `for i in $(seq 1 65); do echo "K$i=v" >> "$KRUNTIMES_OUTPUTS"; done`,
	sleepWithChild:  `sleep 60 & echo $! > "$PIDFILE"; wait`,
	chatty:          `head -c 300000 /dev/zero | tr '\0' z; echo END`,
}

var pythonTasks = taskScripts{
	outputsOK:       "import os\nprint('hi')\nwith open(os.environ['KRUNTIMES_OUTPUTS'], 'w') as f:\n    f.write('A=1\\nB=x=y\\n')\n",
	exit3:           "import os, sys\nopen(os.environ['KRUNTIMES_OUTPUTS'], 'w').write('A=1\\n')\nprint('oops', file=sys.stderr)\nsys.exit(3)\n",
	argsEntry:       "import os, sys\nprint('%s-%s-%s-%s' % (sys.argv[1], sys.argv[2], os.environ['FOO'], os.path.basename(os.getcwd())))\n",
	entryFile:       "entry.py",
	invalidOutputs:  "import os\nopen(os.environ['KRUNTIMES_OUTPUTS'], 'w').write('no equals sign\\n')\n",
	tooLargeOutputs: "import os\nopen(os.environ['KRUNTIMES_OUTPUTS'], 'w').write('A=' + 'x' * 9000 + '\\n')\n",
	sleepWithChild:  "import os, subprocess\np = subprocess.Popen(['sleep', '60'])\nopen(os.environ['PIDFILE'], 'w').write('%d\\n' % p.pid)\np.wait()\n",
	chatty:          "import sys\nsys.stdout.write('z' * 300000)\nprint('END')\n",
}

func TestTasks(t *testing.T) {
	for _, lang := range []string{"bash", "python"} {
		t.Run(lang, func(t *testing.T) {
			// The timeout case steps this clock once its program runs, so a
			// busy machine cannot time the program out before it started
			// the child whose end the case checks.
			clk := testingclock.NewFakeClock(time.Now())
			h := newHarnessWithClock(t, lang, clk)
			scripts := map[string]taskScripts{"bash": bashTasks, "python": pythonTasks}[lang]
			h.writeFile(t, scripts.entryFile, scripts.argsEntry)
			pidFile := filepath.Join(t.TempDir(), "child.pid")

			tests := []taskCase{
				{
					name:      "inline script succeeds with outputs and logs",
					req:       &runtimev1.ExecuteRequest{Program: &runtimev1.ExecuteRequest_Script{Script: scripts.outputsOK}},
					wantState: runtimev1.TaskState_TASK_STATE_SUCCEEDED,
					check: func(t *testing.T, st *runtimev1.TaskStatus) {
						assert.Equal(t, map[string]string{"A": "1", "B": "x=y"}, st.GetOutputs())
						assert.Equal(t, "hi\n", string(st.GetStdout()))
					},
				},
				{
					name:       "non-zero exit fails with its code, outputs and stderr",
					req:        &runtimev1.ExecuteRequest{Program: &runtimev1.ExecuteRequest_Script{Script: scripts.exit3}},
					wantState:  runtimev1.TaskState_TASK_STATE_FAILED,
					wantReason: "NonZeroExit",
					wantCode:   3,
					check: func(t *testing.T, st *runtimev1.TaskStatus) {
						assert.Equal(t, map[string]string{"A": "1"}, st.GetOutputs())
						assert.Equal(t, "oops\n", string(st.GetStderr()))
					},
				},
				{
					name: "entrypoint runs with args, env and working dir",
					req: &runtimev1.ExecuteRequest{
						Program: &runtimev1.ExecuteRequest_Entrypoint{Entrypoint: &runtimev1.Entrypoint{Path: scripts.entryFile, Args: []string{"a", "b"}}},
						Env:     []*runtimev1.EnvVar{{Name: "FOO", Value: "foo"}},
					},
					wantState: runtimev1.TaskState_TASK_STATE_SUCCEEDED,
					check: func(t *testing.T, st *runtimev1.TaskStatus) {
						assert.Equal(t, "a-b-foo-work\n", string(st.GetStdout()))
					},
				},
				{
					name:       "invalid outputs file fails with OutputsInvalid",
					req:        &runtimev1.ExecuteRequest{Program: &runtimev1.ExecuteRequest_Script{Script: scripts.invalidOutputs}},
					wantState:  runtimev1.TaskState_TASK_STATE_FAILED,
					wantReason: "OutputsInvalid",
				},
				{
					name:       "outputs over the bounds fail with OutputsTooLarge",
					req:        &runtimev1.ExecuteRequest{Program: &runtimev1.ExecuteRequest_Script{Script: scripts.tooLargeOutputs}},
					wantState:  runtimev1.TaskState_TASK_STATE_FAILED,
					wantReason: "OutputsTooLarge",
				},
				{
					name:      "logs are bounded to their tail",
					req:       &runtimev1.ExecuteRequest{Program: &runtimev1.ExecuteRequest_Script{Script: scripts.chatty}},
					wantState: runtimev1.TaskState_TASK_STATE_SUCCEEDED,
					check: func(t *testing.T, st *runtimev1.TaskStatus) {
						assert.True(t, st.GetStdoutTruncated())
						assert.Len(t, st.GetStdout(), 256<<10)
						assert.True(t, strings.HasSuffix(string(st.GetStdout()), "END\n"))
					},
				},
				{
					name: "timeout kills the whole process group",
					req: &runtimev1.ExecuteRequest{
						Program:       &runtimev1.ExecuteRequest_Script{Script: scripts.sleepWithChild},
						Env:           []*runtimev1.EnvVar{{Name: "PIDFILE", Value: pidFile + ".timeout"}},
						TimeoutMillis: 500,
					},
					wantState:  runtimev1.TaskState_TASK_STATE_TIMED_OUT,
					wantReason: "Timeout",
					wantCode:   -1,
					check: func(t *testing.T, st *runtimev1.TaskStatus) {
						assert.Equal(t, int64(500*time.Millisecond), st.GetEndUnixNano()-st.GetStartUnixNano(), "ended when the timeout fired")
						requireProcessGone(t, pidFile+".timeout")
					},
				},
				{
					name: "cancel kills the whole process group",
					req: &runtimev1.ExecuteRequest{
						Program: &runtimev1.ExecuteRequest_Script{Script: scripts.sleepWithChild},
						Env:     []*runtimev1.EnvVar{{Name: "PIDFILE", Value: pidFile + ".cancel"}},
					},
					cancel:     true,
					wantState:  runtimev1.TaskState_TASK_STATE_CANCELLED,
					wantReason: "Cancelled",
					wantCode:   -1,
					check:      func(t *testing.T, _ *runtimev1.TaskStatus) { requireProcessGone(t, pidFile+".cancel") },
				},
			}
			for i, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					ctx := testContext(t)
					tc.req.TaskId = lang + "-task-" + strconv.Itoa(i)
					tc.req.WorkingDir = h.workDir
					started, err := h.runtime.Execute(ctx, tc.req)
					require.NoError(t, err)
					// Execute returns the current status: a task that ends
					// within microseconds may already be past RUNNING.
					require.Contains(t, []string{runtimev1.TaskState_TASK_STATE_RUNNING.String(), tc.wantState.String()}, started.GetState().String())
					timeout := time.Duration(tc.req.GetTimeoutMillis()) * time.Millisecond
					if tc.cancel || timeout > 0 {
						// Kill the program only once it started its child.
						waitForPIDFile(t, tc.req.GetEnv()[0].GetValue())
					}
					if tc.cancel {
						_, err := h.runtime.Cancel(ctx, &runtimev1.CancelRequest{TaskId: tc.req.GetTaskId()})
						require.NoError(t, err)
					}
					if timeout > 0 {
						running, err := h.runtime.Status(ctx, &runtimev1.StatusRequest{TaskId: tc.req.GetTaskId()})
						require.NoError(t, err)
						require.Equal(t, runtimev1.TaskState_TASK_STATE_RUNNING.String(), running.GetState().String(), "the task ended before its timeout")
						clk.Step(timeout)
					}
					st, err := h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: tc.req.GetTaskId(), IncludeLogs: true})
					require.NoError(t, err)
					assert.Equal(t, tc.wantState.String(), st.GetState().String(), "message: %s; stderr: %s", st.GetMessage(), st.GetStderr())
					assert.Equal(t, tc.wantReason, st.GetReason())
					assert.Equal(t, tc.wantCode, st.GetExitCode())
					assert.GreaterOrEqual(t, st.GetEndUnixNano(), st.GetStartUnixNano())
					if tc.check != nil {
						tc.check(t, st)
					}
				})
			}
		})
	}
}

// waitForPIDFile waits until a task wrote the PID of its child to path.
func waitForPIDFile(t *testing.T, path string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testContext(t), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(path)
		return strings.HasSuffix(string(b), "\n"), nil
	})
	require.NoError(t, err, "the task did not write %s", path)
}

// requireProcessGone checks that the background child whose PID a task wrote
// was killed with its group.
func requireProcessGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	stat := "/proc/" + strings.TrimSpace(string(b)) + "/stat"
	assert.Eventually(t, func() bool {
		st, err := os.ReadFile(stat)
		return err != nil || strings.Contains(string(st), ") Z ")
	}, 10*time.Second, 5*time.Millisecond, "the child of the task survived")
}

func TestTaskLifecycle(t *testing.T) {
	h := newHarness(t, "bash")
	ctx := testContext(t)
	exec := func(id, script string) (*runtimev1.TaskStatus, error) {
		return h.runtime.Execute(ctx, &runtimev1.ExecuteRequest{TaskId: id, WorkingDir: h.workDir, Program: &runtimev1.ExecuteRequest_Script{Script: script}})
	}

	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "Execute with an existing ID and the same request is idempotent", run: func(t *testing.T) {
			first, err := exec("same", "echo once >> \"$KRUNTIMES_OUTPUTS\"; exit 0")
			require.NoError(t, err)
			_, err = h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: "same"})
			require.NoError(t, err)
			again, err := exec("same", "echo once >> \"$KRUNTIMES_OUTPUTS\"; exit 0")
			require.NoError(t, err)
			assert.Equal(t, first.GetStartUnixNano(), again.GetStartUnixNano(), "the task must not run twice")
		}},
		{name: "Execute with an existing ID and another request is AlreadyExists", run: func(t *testing.T) {
			_, err := exec("other", "exit 0")
			require.NoError(t, err)
			_, err = exec("other", "exit 1")
			requireCode(t, codes.AlreadyExists, err)
		}},
		{name: "Wait on a running task honours the caller's deadline", run: func(t *testing.T) {
			_, err := exec("slow", "sleep 30")
			require.NoError(t, err)
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, err = h.runtime.Wait(short, &runtimev1.WaitRequest{TaskId: "slow"})
			requireCode(t, codes.DeadlineExceeded, err)
			_, err = h.runtime.Forget(ctx, &runtimev1.ForgetRequest{TaskId: "slow"})
			requireCode(t, codes.FailedPrecondition, err)
			_, err = h.runtime.Cancel(ctx, &runtimev1.CancelRequest{TaskId: "slow"})
			require.NoError(t, err)
			st, err := h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: "slow"})
			require.NoError(t, err)
			assert.Equal(t, runtimev1.TaskState_TASK_STATE_CANCELLED, st.GetState())
		}},
		{name: "Forget drops a finished task and is idempotent", run: func(t *testing.T) {
			_, err := exec("forget", "echo bye")
			require.NoError(t, err)
			_, err = h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: "forget"})
			require.NoError(t, err)
			for range 2 {
				_, err = h.runtime.Forget(ctx, &runtimev1.ForgetRequest{TaskId: "forget"})
				require.NoError(t, err)
			}
			_, err = h.runtime.Status(ctx, &runtimev1.StatusRequest{TaskId: "forget"})
			requireCode(t, codes.NotFound, err)
		}},
		{name: "Cancel of an unknown or finished task succeeds", run: func(t *testing.T) {
			_, err := h.runtime.Cancel(ctx, &runtimev1.CancelRequest{TaskId: "never"})
			require.NoError(t, err)
		}},
		{name: "Status omits logs unless asked", run: func(t *testing.T) {
			_, err := exec("logs", "echo visible")
			require.NoError(t, err)
			_, err = h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: "logs"})
			require.NoError(t, err)
			st, err := h.runtime.Status(ctx, &runtimev1.StatusRequest{TaskId: "logs"})
			require.NoError(t, err)
			assert.Empty(t, st.GetStdout())
			st, err = h.runtime.Status(ctx, &runtimev1.StatusRequest{TaskId: "logs", IncludeLogs: true})
			require.NoError(t, err)
			assert.Equal(t, "visible\n", string(st.GetStdout()))
		}},
		{name: "List returns retained tasks", run: func(t *testing.T) {
			resp, err := h.runtime.List(ctx, &runtimev1.ListRequest{})
			require.NoError(t, err)
			var ids []string
			for _, st := range resp.GetTasks() {
				ids = append(ids, st.GetTaskId())
			}
			assert.Contains(t, ids, "same")
			assert.NotContains(t, ids, "forget")
		}},
		{name: "invalid requests are InvalidArgument", run: func(t *testing.T) {
			for _, req := range []*runtimev1.ExecuteRequest{
				{TaskId: "", WorkingDir: h.workDir, Program: &runtimev1.ExecuteRequest_Script{Script: "true"}},
				{TaskId: strings.Repeat("x", 129), WorkingDir: h.workDir, Program: &runtimev1.ExecuteRequest_Script{Script: "true"}},
				{TaskId: "noprog", WorkingDir: h.workDir},
				{TaskId: "reldir", WorkingDir: "relative", Program: &runtimev1.ExecuteRequest_Script{Script: "true"}},
			} {
				_, err := h.runtime.Execute(ctx, req)
				requireCode(t, codes.InvalidArgument, err)
			}
		}},
		{name: "a working dir that does not exist fails with StartFailed", run: func(t *testing.T) {
			_, err := h.runtime.Execute(ctx, &runtimev1.ExecuteRequest{TaskId: "nodir", WorkingDir: filepath.Join(h.workDir, "absent"), Program: &runtimev1.ExecuteRequest_Script{Script: "true"}})
			require.NoError(t, err)
			st, err := h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: "nodir"})
			require.NoError(t, err)
			assert.Equal(t, runtimev1.TaskState_TASK_STATE_FAILED, st.GetState())
			assert.Equal(t, "StartFailed", st.GetReason())
		}},
		{name: "Health reports the language and function support", run: func(t *testing.T) {
			resp, err := h.runtime.Health(ctx, &runtimev1.HealthRequest{})
			require.NoError(t, err)
			assert.True(t, resp.GetServing())
			assert.Equal(t, "bash", resp.GetLanguage())
			assert.True(t, resp.GetFunctionsSupported())
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

// TestTasksCannotHoldTheirSlot runs programs that try to outlive their
// execution or stall the server's reading of their results; each must end with
// a status the server can send, and leave nothing running.
func TestTasksCannotHoldTheirSlot(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	h := newHarnessWithClock(t, "bash", clk)
	// The escapee leaves the group and session through a double fork,
	// ignores SIGTERM and keeps stdout and stderr open.
	const escapee = `(trap '' TERM; setsid bash -c 'trap "" TERM; echo $$ > "$PIDFILE"; exec sleep 300' &); sleep 300`
	tests := []struct {
		name       string
		script     string
		pidFile    bool
		timeout    time.Duration
		cancel     bool
		wantState  runtimev1.TaskState
		wantReason string
	}{
		{name: "timeout kills a descendant that escaped into its own session", script: escapee, pidFile: true, timeout: time.Second,
			wantState: runtimev1.TaskState_TASK_STATE_TIMED_OUT, wantReason: "Timeout"},
		{name: "cancel kills a descendant that escaped into its own session", script: escapee, pidFile: true, cancel: true,
			wantState: runtimev1.TaskState_TASK_STATE_CANCELLED, wantReason: "Cancelled"},
		{name: "an escaped descendant holding stdout does not outlive a program that exits",
			script: `(setsid bash -c 'echo $$ > "$PIDFILE"; exec sleep 300' &); while [ ! -s "$PIDFILE" ]; do sleep 0.01; done`, pidFile: true,
			wantState: runtimev1.TaskState_TASK_STATE_SUCCEEDED},
		{name: "outputs file that is a FIFO fails with OutputsInvalid", script: `rm -f "$KRUNTIMES_OUTPUTS"; mkfifo "$KRUNTIMES_OUTPUTS"`,
			wantState: runtimev1.TaskState_TASK_STATE_FAILED, wantReason: "OutputsInvalid"},
		{name: "outputs file that links to /dev/zero fails with OutputsInvalid", script: `ln -s /dev/zero "$KRUNTIMES_OUTPUTS"`,
			wantState: runtimev1.TaskState_TASK_STATE_FAILED, wantReason: "OutputsInvalid"},
		{name: "outputs that are not UTF-8 fail with OutputsInvalid", script: `printf 'A=\xff\xfe\n' > "$KRUNTIMES_OUTPUTS"`,
			wantState: runtimev1.TaskState_TASK_STATE_FAILED, wantReason: "OutputsInvalid"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			pidFile := filepath.Join(t.TempDir(), "escapee.pid")
			req := &runtimev1.ExecuteRequest{
				TaskId:        "hold-" + strconv.Itoa(i),
				WorkingDir:    h.workDir,
				Program:       &runtimev1.ExecuteRequest_Script{Script: tc.script},
				Env:           []*runtimev1.EnvVar{{Name: "PIDFILE", Value: pidFile}},
				TimeoutMillis: tc.timeout.Milliseconds(),
			}
			_, err := h.runtime.Execute(ctx, req)
			require.NoError(t, err)
			if tc.pidFile {
				waitForPIDFile(t, pidFile)
			}
			if tc.cancel {
				_, err := h.runtime.Cancel(ctx, &runtimev1.CancelRequest{TaskId: req.GetTaskId()})
				require.NoError(t, err)
			}
			if tc.timeout > 0 {
				clk.Step(tc.timeout)
			}
			st, err := h.runtime.Wait(ctx, &runtimev1.WaitRequest{TaskId: req.GetTaskId(), IncludeLogs: true})
			require.NoError(t, err, "the status must reach the caller")
			assert.Equal(t, tc.wantState.String(), st.GetState().String(), "message: %s; stderr: %s", st.GetMessage(), st.GetStderr())
			assert.Equal(t, tc.wantReason, st.GetReason())
			if tc.pidFile {
				requireProcessGone(t, pidFile)
			}
		})
	}
}
