package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"kruntimes.io/kruntimes/apis/invocation"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

const pythonHandlers = `
import os, sys, time

calls = 0

def noop(event, context):
    return None

def echo(event, context):
    print("to stdout")
    print("to stderr", file=sys.stderr)
    context.set_output("invocation", context.invocation_id)
    return {"event": event, "invocation_id": context.invocation_id, "run_uid": context.run_uid,
            "has_deadline": context.deadline is not None}

def count(event, context):
    global calls
    calls += 1
    return {"pid": os.getpid(), "calls": calls}

def boom(event, context):
    raise ValueError("bad input")

def sleep(event, context):
    time.sleep(event["seconds"])
    return "slept"

def die(event, context):
    os._exit(7)

def pid_or_die(event, context):
    if event.get("die"):
        os._exit(7)
    return {"pid": os.getpid()}

def big_output(event, context):
    return "x" * (1 << 20)

def too_many_outputs(event, context):
    for i in range(65):
        context.set_output("k%d" % i, "v")

def bad_output_key(event, context):
    context.set_output("not a key", "v")

def chatty(event, context):
    print("y" * (100 << 10))
    return 1

def not_json(event, context):
    return {1, 2}
`

func writeBashHandlers(t testing.TB, h *harness) {
	h.writeFile(t, "noop.sh", "exit 0\n")
	h.writeFile(t, "echo.sh", `input=$(cat)
echo "to stderr" >&2
echo "invocation=$KRUNTIMES_INVOCATION_ID" > "$KRUNTIMES_OUTPUTS"
printf '{"event":%s,"invocation_id":"%s","run_uid":"%s"}\n' "$input" "$KRUNTIMES_INVOCATION_ID" "$KRUNTIMES_RUN_UID"
`)
	h.writeFile(t, "text.sh", "echo hello world\n")
	h.writeFile(t, "fail.sh", "echo 'something broke' >&2\nexit 3\n")
	h.writeFile(t, "boom.sh", "exit 1\n")
	h.writeFile(t, "sleep.sh", `sleep "$(sed -E 's/.*"seconds":([0-9.]+).*/\1/')"`+"\n")
	h.writeFile(t, "bad_outputs.sh", "echo 'not a pair' > \"$KRUNTIMES_OUTPUTS\"\n")
	h.writeFile(t, "big_output.sh", "head -c 1048577 /dev/zero | tr '\\0' x\n")
	h.writeFile(t, "chatty.sh", "head -c 102400 /dev/zero | tr '\\0' y >&2\necho 1\n")
}

func TestRegisterFunctionSemantics(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)
	ctx := testContext(t)

	pidOf := func(t *testing.T, reg *runtimev1.RegistrationStatus) float64 {
		resp, err := h.invoke(ctx, reg, `{}`, 0)
		require.NoError(t, err)
		require.Nil(t, resp.GetError())
		var out map[string]float64
		require.NoError(t, json.Unmarshal(resp.GetOutput(), &out))
		return out["pid"]
	}
	statusCode := func(reg *runtimev1.RegistrationStatus) codes.Code {
		_, err := h.functions.FunctionStatus(ctx, &runtimev1.FunctionStatusRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId()})
		return codeOf(err)
	}

	tests := []struct {
		name string
		run  func(t *testing.T, uid string)
	}{
		{name: "same attempt and digest returns the same ID without re-initialization", run: func(t *testing.T, uid string) {
			first := h.register(t, uid, 1, "d1", "handlers.count")
			pid := pidOf(t, first)
			again := h.register(t, uid, 1, "d1", "handlers.count")
			assert.Equal(t, first.GetRegistrationId(), again.GetRegistrationId())
			assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, again.GetState())
			assert.Equal(t, pid, pidOf(t, again), "the warm worker must not be restarted")
		}},
		{name: "same attempt with another digest is AlreadyExists and leaves the registration untouched", run: func(t *testing.T, uid string) {
			first := h.register(t, uid, 1, "d1", "handlers.count")
			pid := pidOf(t, first)
			_, err := h.functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{RunUid: uid, RegistrationAttempt: 1, RegistrationDigest: "d2", WorkingDir: h.workDir, Handler: "handlers.noop"})
			requireCode(t, codes.AlreadyExists, err)
			assert.Equal(t, pid, pidOf(t, first))
		}},
		{name: "higher attempt supersedes and the old ID is dead", run: func(t *testing.T, uid string) {
			first := h.register(t, uid, 1, "d1", "handlers.count")
			second := h.register(t, uid, 2, "d1", "handlers.count")
			require.NotEqual(t, first.GetRegistrationId(), second.GetRegistrationId())
			_, err := h.invoke(ctx, first, `{}`, 0)
			requireCode(t, codes.FailedPrecondition, err)
			assert.Equal(t, codes.FailedPrecondition, statusCode(first))
			_, err = h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: uid, RegistrationId: first.GetRegistrationId()})
			requireCode(t, codes.FailedPrecondition, err)
			assert.NotZero(t, pidOf(t, second))
		}},
		{name: "lower attempt is FailedPrecondition", run: func(t *testing.T, uid string) {
			h.register(t, uid, 2, "d1", "handlers.noop")
			_, err := h.functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{RunUid: uid, RegistrationAttempt: 1, RegistrationDigest: "d1", WorkingDir: h.workDir, Handler: "handlers.noop"})
			requireCode(t, codes.FailedPrecondition, err)
		}},
		{name: "lower attempt after unregister is FailedPrecondition", run: func(t *testing.T, uid string) {
			reg := h.register(t, uid, 3, "d1", "handlers.noop")
			_, err := h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: uid, RegistrationId: reg.GetRegistrationId()})
			require.NoError(t, err)
			_, err = h.functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{RunUid: uid, RegistrationAttempt: 2, RegistrationDigest: "d1", WorkingDir: h.workDir, Handler: "handlers.noop"})
			requireCode(t, codes.FailedPrecondition, err)
		}},
		{name: "unknown Run UID is NotFound for status and invoke", run: func(t *testing.T, uid string) {
			ghost := &runtimev1.RegistrationStatus{RunUid: uid, RegistrationId: "reg-unknown"}
			_, err := h.invoke(ctx, ghost, `{}`, 0)
			requireCode(t, codes.NotFound, err)
			assert.Equal(t, codes.NotFound, statusCode(ghost))
		}},
		{name: "stale ID of a live registration is FailedPrecondition", run: func(t *testing.T, uid string) {
			reg := h.register(t, uid, 1, "d1", "handlers.noop")
			stale := &runtimev1.RegistrationStatus{RunUid: uid, RegistrationId: reg.GetRegistrationId() + "x"}
			_, err := h.invoke(ctx, stale, `{}`, 0)
			requireCode(t, codes.FailedPrecondition, err)
			assert.Equal(t, codes.FailedPrecondition, statusCode(stale))
		}},
		{name: "unregister of an absent registration succeeds, twice", run: func(t *testing.T, uid string) {
			for range 2 {
				_, err := h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: uid, RegistrationId: "reg-whatever"})
				require.NoError(t, err)
			}
		}},
		{name: "unregistered registration is NotFound afterwards", run: func(t *testing.T, uid string) {
			reg := h.register(t, uid, 1, "d1", "handlers.noop")
			_, err := h.functions.UnregisterFunction(ctx, &runtimev1.UnregisterFunctionRequest{RunUid: uid, RegistrationId: reg.GetRegistrationId()})
			require.NoError(t, err)
			_, err = h.invoke(ctx, reg, `{}`, 0)
			requireCode(t, codes.NotFound, err)
		}},
		{name: "handler that cannot be imported fails the registration with a bounded fatal error", run: func(t *testing.T, uid string) {
			reg := h.register(t, uid, 1, "d1", "missing_module.handler")
			assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_FAILED, reg.GetState())
			assert.Contains(t, reg.GetFatalError(), "ModuleNotFoundError")
			assert.LessOrEqual(t, len(reg.GetFatalError()), 4096)
			_, err := h.invoke(ctx, reg, `{}`, 0)
			requireCode(t, codes.FailedPrecondition, err)
			again := h.register(t, uid, 1, "d1", "missing_module.handler")
			assert.Equal(t, reg.GetRegistrationId(), again.GetRegistrationId(), "a failed attempt is not retried implicitly")
			fixed := h.register(t, uid, 2, "d2", "handlers.noop")
			assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, fixed.GetState(), "a higher attempt recovers")
		}},
		{name: "missing function in an importable module fails the registration", run: func(t *testing.T, uid string) {
			reg := h.register(t, uid, 1, "d1", "handlers.absent")
			assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_FAILED, reg.GetState())
			assert.Contains(t, reg.GetFatalError(), "absent")
		}},
		{name: "concurrent identical registrations share one generation", run: func(t *testing.T, uid string) {
			var wg sync.WaitGroup
			ids := make([]string, 4)
			for i := range ids {
				wg.Go(func() {
					st, err := h.functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{RunUid: uid, RegistrationAttempt: 1, RegistrationDigest: "d1", WorkingDir: h.workDir, Handler: "handlers.noop"})
					if assert.NoError(t, err) {
						ids[i] = st.GetRegistrationId()
					}
				})
			}
			wg.Wait()
			for _, id := range ids {
				assert.Equal(t, ids[0], id)
			}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, "run-"+string(rune('a'+i)))
		})
	}
}

func TestInvokeFunctionValidation(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)
	ctx := testContext(t)
	reg := h.registerReady(t, "validation", "handlers.noop")
	tests := []struct {
		name   string
		mutate func(*runtimev1.InvokeFunctionRequest)
	}{
		{name: "empty invocation ID is rejected: the apiserver mints it, runtimed passes it on", mutate: func(r *runtimev1.InvokeFunctionRequest) { r.InvocationId = "" }},
		{name: "input that is not JSON from a caller that names no content type is rejected", mutate: func(r *runtimev1.InvokeFunctionRequest) { r.Input = []byte(`{nope`) }},
		{name: "negative timeout is rejected", mutate: func(r *runtimev1.InvokeFunctionRequest) { r.TimeoutMillis = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &runtimev1.InvokeFunctionRequest{RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), InvocationId: "inv-1", Input: []byte(`{}`)}
			tc.mutate(req)
			_, err := h.functions.InvokeFunction(ctx, req)
			requireCode(t, codes.InvalidArgument, err)
		})
	}
}

func TestRegisterFunctionValidation(t *testing.T) {
	h := newHarness(t, "python")
	ctx := testContext(t)
	valid := func() *runtimev1.RegisterFunctionRequest {
		return &runtimev1.RegisterFunctionRequest{RunUid: "u", RegistrationAttempt: 1, RegistrationDigest: "d", WorkingDir: h.workDir, Handler: "m.f"}
	}
	tests := []struct {
		name   string
		mutate func(*runtimev1.RegisterFunctionRequest)
	}{
		{name: "empty Run UID is rejected", mutate: func(r *runtimev1.RegisterFunctionRequest) { r.RunUid = "" }},
		{name: "attempt zero is rejected", mutate: func(r *runtimev1.RegisterFunctionRequest) { r.RegistrationAttempt = 0 }},
		{name: "empty digest is rejected", mutate: func(r *runtimev1.RegisterFunctionRequest) { r.RegistrationDigest = "" }},
		{name: "relative working dir is rejected", mutate: func(r *runtimev1.RegisterFunctionRequest) { r.WorkingDir = "work" }},
		{name: "empty handler is rejected", mutate: func(r *runtimev1.RegisterFunctionRequest) { r.Handler = "" }},
		{name: "env name with = is rejected", mutate: func(r *runtimev1.RegisterFunctionRequest) {
			r.Env = []*runtimev1.EnvVar{{Name: "A=B", Value: "x"}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := valid()
			tc.mutate(req)
			_, err := h.functions.RegisterFunction(ctx, req)
			requireCode(t, codes.InvalidArgument, err)
		})
	}
}

type invokeCase struct {
	name    string
	handler string
	input   string
	id      string
	// contentType is what the caller says the input is; empty for a caller
	// that does not say.
	contentType string
	timeout     time.Duration
	wantCode    codes.Code
	wantError   string // FunctionError.type
	check       func(t *testing.T, resp *runtimev1.InvokeFunctionResponse)
}

func runInvokeCases(t *testing.T, h *harness, tests []invokeCase) {
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			reg := h.registerReady(t, "invoke-"+string(rune('a'+i)), tc.handler)
			input := tc.input
			if input == "" {
				input = `{}`
			}
			id := tc.id
			if id == "" {
				id = fmt.Sprintf("inv-%d", i)
			}
			resp, err := h.functions.InvokeFunction(ctx, &runtimev1.InvokeFunctionRequest{
				RunUid: reg.GetRunUid(), RegistrationId: reg.GetRegistrationId(), InvocationId: id,
				Input: []byte(input), ContentType: tc.contentType, TimeoutMillis: tc.timeout.Milliseconds(),
			})
			requireCode(t, tc.wantCode, err)
			if tc.wantCode != codes.OK {
				return
			}
			assert.Equal(t, id, resp.GetInvocationId(), "the invocation ID is always echoed")
			if tc.wantError != "" {
				require.NotNil(t, resp.GetError(), "want function error %s", tc.wantError)
				assert.Equal(t, tc.wantError, resp.GetError().GetType())
				assert.Empty(t, resp.GetOutput())
			} else {
				require.Nil(t, resp.GetError())
			}
			if tc.check != nil {
				tc.check(t, resp)
			}
		})
	}
}

// commonInvokeCases hold for every language; handler names are mapped per
// language by the caller.
func commonInvokeCases(handler func(string) string) []invokeCase {
	return []invokeCase{
		{name: "input reaches the handler and IDs are echoed", handler: handler("echo"), input: `{"a":[1,2]}`, id: "inv-1", check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			var out map[string]any
			require.NoError(t, json.Unmarshal(resp.GetOutput(), &out))
			assert.Equal(t, map[string]any{"a": []any{1.0, 2.0}}, out["event"])
			assert.Equal(t, "inv-1", out["invocation_id"])
			assert.Equal(t, "invoke-a", out["run_uid"])
			assert.Equal(t, map[string]string{"invocation": "inv-1"}, resp.GetOutputs())
			assert.Contains(t, string(resp.GetStderr()), "to stderr")
			assert.Equal(t, "application/json", resp.GetContentType())
		}},
		{name: "a handler that returns nothing outputs null", handler: handler("noop"), check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			assert.JSONEq(t, "null", string(resp.GetOutput()))
		}},
		{name: "invocation ID of 128 bytes is accepted", handler: handler("noop"), id: strings.Repeat("i", 128)},
		{name: "invocation ID over 128 bytes is InvalidArgument", handler: handler("noop"), id: strings.Repeat("i", 129), wantCode: codes.InvalidArgument},
		{name: "input over 1 MiB is InvalidArgument", handler: handler("noop"), input: `"` + strings.Repeat("x", 1<<20) + `"`, wantCode: codes.InvalidArgument},
		{name: "input that is not JSON is InvalidArgument", handler: handler("noop"), input: `{nope`, wantCode: codes.InvalidArgument},
		{name: "output over 1 MiB is an OutputTooLarge function error", handler: handler("big_output"), wantError: "OutputTooLarge"},
		{name: "logs over 64 KiB are truncated", handler: handler("chatty"), check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			logs, truncated := resp.GetStdout(), resp.GetStdoutTruncated()
			if len(resp.GetStderr()) > 0 {
				logs, truncated = resp.GetStderr(), resp.GetStderrTruncated()
			}
			assert.Len(t, logs, 64<<10)
			assert.True(t, truncated)
		}},
		{name: "deadline is DeadlineExceeded", handler: handler("sleep"), input: `{"seconds":30}`, timeout: 300 * time.Millisecond, wantCode: codes.DeadlineExceeded},
	}
}

func TestInvokeFunctionPython(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)
	cases := commonInvokeCases(func(name string) string { return "handlers." + name })
	cases = append(cases,
		invokeCase{name: "print output is captured per invocation", handler: "handlers.echo", check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			assert.Equal(t, "to stdout\n", string(resp.GetStdout()))
			assert.Equal(t, "to stderr\n", string(resp.GetStderr()))
			assert.True(t, resp.GetWorkerWarm(), "the worker started at registration was running")
		}},
		invokeCase{name: "context carries a deadline when the invocation has one", handler: "handlers.echo", timeout: 10 * time.Second, check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			var out map[string]any
			require.NoError(t, json.Unmarshal(resp.GetOutput(), &out))
			assert.Equal(t, true, out["has_deadline"])
		}},
		invokeCase{name: "handler exception is a structured function error in a successful RPC", handler: "handlers.boom", wantError: "ValueError", check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			assert.Equal(t, "bad input", resp.GetError().GetMessage())
			assert.Contains(t, resp.GetError().GetStack(), "Traceback")
		}},
		invokeCase{name: "65 outputs are an OutputsTooLarge function error", handler: "handlers.too_many_outputs", wantError: "OutputsTooLarge"},
		invokeCase{name: "invalid output key is an OutputsInvalid function error", handler: "handlers.bad_output_key", wantError: "OutputsInvalid"},
		invokeCase{name: "return value that is not JSON is a function error", handler: "handlers.not_json", wantError: "OutputNotSerializable"},
		invokeCase{name: "worker that dies fails the invocation as a function error", handler: "handlers.die", wantError: "WorkerExited", check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			assert.Contains(t, resp.GetError().GetMessage(), "code 7")
		}},
		invokeCase{name: "input the caller labels application/json is not scanned again: a mislabelled one fails in the worker's parse, before the handler", handler: "handlers.echo",
			input: `{nope`, contentType: invocation.ContentTypeJSON, wantError: "JSONDecodeError", check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
				assert.Empty(t, resp.GetStdout(), "the handler did not run")
			}},
	)
	runInvokeCases(t, h, cases)
}

func TestInvokeFunctionBash(t *testing.T) {
	h := newHarness(t, "bash")
	writeBashHandlers(t, h)
	cases := commonInvokeCases(func(name string) string { return name + ".sh" })
	cases = append(cases,
		invokeCase{name: "stdout that is not JSON becomes a JSON string", handler: "text.sh", check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			assert.JSONEq(t, `"hello world"`, string(resp.GetOutput()))
			assert.False(t, resp.GetWorkerWarm(), "bash starts a process per invocation")
		}},
		invokeCase{name: "non-zero exit is a function error carrying the stderr tail", handler: "fail.sh", wantError: "NonZeroExit", check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
			assert.Contains(t, resp.GetError().GetMessage(), "code 3")
			assert.Contains(t, resp.GetError().GetStack(), "something broke")
		}},
		invokeCase{name: "invalid outputs file is an OutputsInvalid function error", handler: "bad_outputs.sh", wantError: "OutputsInvalid"},
		invokeCase{name: "input the caller labels application/json is not scanned again: it reaches the script as it is", handler: "echo.sh",
			input: `{nope`, contentType: invocation.ContentTypeJSON, check: func(t *testing.T, resp *runtimev1.InvokeFunctionResponse) {
				var out string
				require.NoError(t, json.Unmarshal(resp.GetOutput(), &out), "stdout that is not JSON becomes a JSON string")
				assert.Contains(t, out, `{"event":{nope,`)
			}},
	)
	runInvokeCases(t, h, cases)

	t.Run("missing handler script fails the registration", func(t *testing.T) {
		reg := h.register(t, "bash-missing", 1, "d1", "absent.sh")
		assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_FAILED, reg.GetState())
		assert.Contains(t, reg.GetFatalError(), "absent.sh")
	})
	t.Run("handler path escaping the working dir fails the registration", func(t *testing.T) {
		reg := h.register(t, "bash-escape", 1, "d1", "../outside.sh")
		assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_FAILED, reg.GetState())
	})
}

// TestRegistrationSurvivesInvocationFailures pins that an invocation's
// deadline or a dying worker costs that invocation only.
func TestRegistrationSurvivesInvocationFailures(t *testing.T) {
	type survivalCase struct {
		name    string
		handler string
		input   string
		timeout time.Duration
		// wantCode and wantError are how the failing invocation fails: the
		// RPC's code, and the type of the function error it carries.
		wantCode  codes.Code
		wantError string
		// restartsWorker says the failure took the warm worker down, so the
		// next invocation must be served by another process.
		restartsWorker bool
	}
	for _, lang := range []string{"python", "bash"} {
		h := newHarness(t, lang)
		h.writeFile(t, "handlers.py", pythonHandlers)
		writeBashHandlers(t, h)
		handler := map[string]func(string) string{
			"python": func(n string) string { return "handlers." + n },
			"bash":   func(n string) string { return n + ".sh" },
		}[lang]
		tests := []survivalCase{
			{name: lang + ": after DeadlineExceeded the registration stays usable", handler: handler("sleep"), input: `{"seconds":30}`, timeout: 200 * time.Millisecond, wantCode: codes.DeadlineExceeded},
			{name: lang + ": after a handler error the registration stays usable", handler: handler("boom"), wantError: map[string]string{"python": "ValueError", "bash": "NonZeroExit"}[lang]},
		}
		if lang == "python" {
			tests = append(tests, survivalCase{name: "python: after the worker died it is restarted", handler: handler("pid_or_die"), input: `{"die":true}`, wantError: "WorkerExited", restartsWorker: true})
		}
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctx := testContext(t)
				reg := h.registerReady(t, lang+"-survive-"+string(rune('a'+i)), tc.handler)
				workerPID := func() float64 {
					t.Helper()
					resp, err := h.invoke(ctx, reg, `{}`, 0)
					require.NoError(t, err)
					require.Nil(t, resp.GetError())
					var out map[string]float64
					require.NoError(t, json.Unmarshal(resp.GetOutput(), &out))
					require.NotZero(t, out["pid"])
					return out["pid"]
				}
				var pidBefore float64
				if tc.restartsWorker {
					pidBefore = workerPID()
				}
				input := tc.input
				if input == "" {
					input = `{}`
				}
				failed, err := h.invoke(ctx, reg, input, tc.timeout)
				requireCode(t, tc.wantCode, err)
				if tc.wantError != "" {
					require.NotNil(t, failed.GetError(), "the invocation was meant to fail")
					require.Equal(t, tc.wantError, failed.GetError().GetType())
				}
				if tc.restartsWorker {
					assert.NotEqual(t, pidBefore, workerPID(), "the next invocation was served by the worker that died")
				}
				// The same registration ID serves the next invocation; give it
				// input that makes every fixture return promptly.
				resp, err := h.invoke(ctx, reg, `{"seconds":0}`, 0)
				require.NoError(t, err)
				if tc.handler == handler("sleep") {
					assert.Nil(t, resp.GetError())
				}
				st := h.waitForStatus(t, reg, func(st *runtimev1.RegistrationStatus) bool { return st.GetInFlight() == 0 })
				assert.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, st.GetState())
			})
		}
	}
}

func TestWorkerRestartWithUnimportableModuleFailsRegistration(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "fragile.py", "import os\ndef die(event, context):\n    os._exit(1)\n")
	ctx := testContext(t)
	reg := h.registerReady(t, "fragile", "fragile.die")

	// The source changes under the running worker: only a restart notices.
	h.writeFile(t, "fragile.py", "raise RuntimeError('broken at import time')\n")
	require.NoError(t, os.RemoveAll(filepath.Join(h.workDir, "__pycache__")))
	resp, err := h.invoke(ctx, reg, `{}`, 0)
	require.NoError(t, err)
	require.Equal(t, "WorkerExited", resp.GetError().GetType())

	st := h.waitForStatus(t, reg, func(st *runtimev1.RegistrationStatus) bool {
		return st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_FAILED
	})
	assert.Contains(t, st.GetFatalError(), "broken at import time")
	assert.LessOrEqual(t, len(st.GetFatalError()), 4096)
	_, err = h.invoke(ctx, reg, `{}`, 0)
	requireCode(t, codes.FailedPrecondition, err)
}

func TestInFlightLimitAndUnregister(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)

	type outcome struct {
		resp *runtimev1.InvokeFunctionResponse
		err  error
	}
	startSleeping := func(t *testing.T, reg *runtimev1.RegistrationStatus, seconds string) <-chan outcome {
		done := make(chan outcome, 1)
		go func() {
			resp, err := h.invoke(testContext(t), reg, `{"seconds":`+seconds+`}`, 0)
			done <- outcome{resp, err}
		}()
		h.waitForStatus(t, reg, func(st *runtimev1.RegistrationStatus) bool { return st.GetInFlight() == 1 })
		return done
	}

	tests := []struct {
		name              string
		sleepSeconds      string
		unregister        *runtimev1.UnregisterFunctionRequest
		wantCancelled     bool
		wantInvokeCode    codes.Code
		checkWhileRunning func(t *testing.T, reg *runtimev1.RegistrationStatus)
	}{
		{
			name:         "second invocation while one is in flight is ResourceExhausted",
			sleepSeconds: "30",
			unregister:   &runtimev1.UnregisterFunctionRequest{CancelInFlight: true},
			checkWhileRunning: func(t *testing.T, reg *runtimev1.RegistrationStatus) {
				_, err := h.invoke(testContext(t), reg, `{}`, 0)
				requireCode(t, codes.ResourceExhausted, err)
			},
			wantCancelled:  true,
			wantInvokeCode: codes.Aborted,
		},
		{
			name:           "unregister drains the in-flight invocation",
			sleepSeconds:   "0.3",
			unregister:     &runtimev1.UnregisterFunctionRequest{DrainTimeoutMillis: 20000},
			wantInvokeCode: codes.OK,
		},
		{
			name:           "unregister cancels the in-flight invocation after the drain bound",
			sleepSeconds:   "30",
			unregister:     &runtimev1.UnregisterFunctionRequest{DrainTimeoutMillis: 100},
			wantCancelled:  true,
			wantInvokeCode: codes.Aborted,
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := h.registerReady(t, "inflight-"+string(rune('a'+i)), "handlers.sleep")
			done := startSleeping(t, reg, tc.sleepSeconds)
			if tc.checkWhileRunning != nil {
				tc.checkWhileRunning(t, reg)
			}
			req := tc.unregister
			req.RunUid, req.RegistrationId = reg.GetRunUid(), reg.GetRegistrationId()
			resp, err := h.functions.UnregisterFunction(testContext(t), req)
			require.NoError(t, err)
			assert.Equal(t, tc.wantCancelled, resp.GetCancelledInFlight())
			select {
			case got := <-done:
				requireCode(t, tc.wantInvokeCode, got.err)
			case <-time.After(20 * time.Second):
				t.Fatal("the in-flight invocation did not end after UnregisterFunction returned")
			}
		})
	}
}

func TestLastActivityClock(t *testing.T) {
	h := newHarness(t, "python")
	h.writeFile(t, "handlers.py", pythonHandlers)
	ctx := testContext(t)
	st, err := h.functions.RegisterFunction(ctx, &runtimev1.RegisterFunctionRequest{
		RunUid: "idle", RegistrationAttempt: 1, RegistrationDigest: "d", WorkingDir: h.workDir, Handler: "handlers.noop", IdleTimeoutSeconds: 60,
	})
	require.NoError(t, err)
	require.Equal(t, runtimev1.FunctionState_FUNCTION_STATE_READY, st.GetState())
	assert.Equal(t, st.GetRegisteredUnixNano(), st.GetLastActivityUnixNano(), "a fresh generation starts its idle clock at registration")
	assert.Equal(t, st.GetLastActivityUnixNano()+int64(60*time.Second), st.GetIdleDeadlineUnixNano())

	_, err = h.invoke(ctx, st, `{}`, 0)
	require.NoError(t, err)
	after, err := h.functions.FunctionStatus(ctx, &runtimev1.FunctionStatusRequest{RunUid: "idle", RegistrationId: st.GetRegistrationId()})
	require.NoError(t, err)
	assert.Greater(t, after.GetLastActivityUnixNano(), st.GetLastActivityUnixNano(), "an invocation moves the clock")
	assert.Equal(t, after.GetLastActivityUnixNano()+int64(60*time.Second), after.GetIdleDeadlineUnixNano())

	next := h.register(t, "idle", 2, "d", "handlers.noop")
	assert.Greater(t, next.GetLastActivityUnixNano(), after.GetLastActivityUnixNano(), "a new generation gets its own clock")
}

func codeOf(err error) codes.Code { return status.Code(err) }
