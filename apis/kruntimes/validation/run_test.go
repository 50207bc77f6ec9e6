package validation

import (
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// The bounds below are written as the numbers docs/api.md and the design
// give, not as the constants of validation.go, so that changing a constant
// by accident fails here.

// taskRun is a minimal valid task Run, as defaulting leaves it.
func taskRun() *kruntimes.Run {
	return &kruntimes.Run{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: kruntimes.RunSpec{
			Runtime:     "bash",
			Source:      kruntimes.RunSource{Inline: "echo hello"},
			Mode:        kruntimes.RunMode{Task: &kruntimes.TaskMode{}},
			RetryPolicy: &kruntimes.RetryPolicy{MaxAttempts: 1},
		},
	}
}

// functionRun is a minimal valid function Run with inline source.
func functionRun() *kruntimes.Run {
	run := taskRun()
	run.Spec.Runtime = "python"
	run.Spec.Source = kruntimes.RunSource{Inline: "def handle(event, context):\n    return event\n", InlinePath: "handler.py"}
	run.Spec.Mode = kruntimes.RunMode{Function: &kruntimes.FunctionMode{Handler: "handler.handle"}}
	return run
}

// asFunction turns the Run a case starts from into a valid function Run.
func asFunction(run *kruntimes.Run) { run.Spec = functionRun().Spec }

// bytesOf is n bytes of text.
func bytesOf(n int) string { return strings.Repeat("x", n) }

// cleanPathOf is a clean relative path of n bytes, in segments short enough
// to be file names.
func cleanPathOf(n int) string {
	b := []byte(bytesOf(n))
	for i := 63; i < n-1; i += 64 {
		b[i] = '/'
	}
	return string(b)
}

func envVars(n int) []kruntimes.EnvVar {
	env := make([]kruntimes.EnvVar, n)
	for i := range env {
		env[i] = kruntimes.EnvVar{Name: fmt.Sprintf("VAR_%d", i), Value: "v"}
	}
	return env
}

func ptrTo[T any](v T) *T { return &v }

// argsTotaling is task args of n bytes in all, each within the per-arg bound.
func argsTotaling(n int) []string {
	var args []string
	for n > 0 {
		size := min(n, 16<<10)
		args = append(args, bytesOf(size))
		n -= size
	}
	return args
}

func durationOf(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func withBackoff(run *kruntimes.Run, b kruntimes.RetryBackoff) {
	run.Spec.RetryPolicy = &kruntimes.RetryPolicy{MaxAttempts: 3, Backoff: &b}
}

func TestMinimalRunsAreValid(t *testing.T) {
	assert.Empty(t, ValidateRun(taskRun()), "task Run")
	assert.Empty(t, ValidateRun(functionRun()), "function Run")
}

func TestRunSpecBounds(t *testing.T) {
	type c = boundCase[*kruntimes.Run]
	cases := []c{
		accepted("inline source of exactly 256 KiB is accepted",
			func(r *kruntimes.Run) { r.Spec.Source.Inline = bytesOf(256 << 10) }),
		rejected("inline source of 256 KiB + 1 byte is rejected at spec.source.inline",
			func(r *kruntimes.Run) { r.Spec.Source.Inline = bytesOf(256<<10 + 1) },
			field.ErrorTypeTooLong, "spec.source.inline"),

		accepted("inlinePath of exactly 1024 bytes is accepted",
			func(r *kruntimes.Run) { asFunction(r); r.Spec.Source.InlinePath = cleanPathOf(1024) }),
		rejected("inlinePath of 1025 bytes is rejected at spec.source.inlinePath",
			func(r *kruntimes.Run) { asFunction(r); r.Spec.Source.InlinePath = cleanPathOf(1025) },
			field.ErrorTypeTooLong, "spec.source.inlinePath"),

		accepted("256 env vars are accepted",
			func(r *kruntimes.Run) { r.Spec.Env = envVars(256) }),
		rejected("257 env vars are rejected at spec.env",
			func(r *kruntimes.Run) { r.Spec.Env = envVars(257) },
			field.ErrorTypeTooMany, "spec.env"),

		accepted("env value of exactly 32 KiB is accepted",
			func(r *kruntimes.Run) { r.Spec.Env = []kruntimes.EnvVar{{Name: "BIG", Value: bytesOf(32 << 10)}} }),
		rejected("env value of 32 KiB + 1 byte is rejected at spec.env[0].value",
			func(r *kruntimes.Run) { r.Spec.Env = []kruntimes.EnvVar{{Name: "BIG", Value: bytesOf(32<<10 + 1)}} },
			field.ErrorTypeTooLong, "spec.env[0].value"),

		accepted("256 task args are accepted",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Args = make([]string, 256) }),
		rejected("257 task args are rejected at spec.mode.task.args",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Args = make([]string, 257) },
			field.ErrorTypeTooMany, "spec.mode.task.args"),

		accepted("entrypoint of exactly 4096 bytes is accepted",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Entrypoint = bytesOf(4096) }),
		rejected("entrypoint of 4097 bytes is rejected at spec.mode.task.entrypoint",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Entrypoint = bytesOf(4097) },
			field.ErrorTypeTooLong, "spec.mode.task.entrypoint"),
		rejected("entrypoint with NUL is rejected at spec.mode.task.entrypoint",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Entrypoint = "run\x00.sh" },
			field.ErrorTypeInvalid, "spec.mode.task.entrypoint"),
		accepted("task arg of exactly 32 KiB is accepted",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Args = []string{"a", bytesOf(32 << 10)} }),
		rejected("task arg of 32 KiB + 1 byte is rejected at spec.mode.task.args[1]",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Args = []string{"a", bytesOf(32<<10 + 1)} },
			field.ErrorTypeTooLong, "spec.mode.task.args[1]"),
		rejected("task arg with NUL is rejected at spec.mode.task.args[0]",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Args = []string{"a\x00b"} },
			field.ErrorTypeInvalid, "spec.mode.task.args[0]"),
		accepted("task args of exactly 256 KiB in all are accepted",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Args = argsTotaling(256 << 10) }),
		rejected("task args of 256 KiB + 1 byte in all are rejected at spec.mode.task.args",
			func(r *kruntimes.Run) { r.Spec.Mode.Task.Args = argsTotaling(256<<10 + 1) },
			field.ErrorTypeTooLong, "spec.mode.task.args"),

		accepted("timeout of exactly 168h is accepted",
			func(r *kruntimes.Run) { r.Spec.Timeout = durationOf(168 * time.Hour) }),
		rejected("timeout of 168h + 1ns is rejected at spec.timeout",
			func(r *kruntimes.Run) { r.Spec.Timeout = durationOf(168*time.Hour + 1) },
			field.ErrorTypeInvalid, "spec.timeout"),
		accepted("backoff initial and max of exactly 1h are accepted",
			func(r *kruntimes.Run) {
				withBackoff(r, kruntimes.RetryBackoff{Initial: durationOf(time.Hour), Max: durationOf(time.Hour)})
			}),
		rejected("backoff initial of 1h + 1ns is rejected at spec.retryPolicy.backoff.initial",
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Initial: durationOf(time.Hour + 1)}) },
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.initial"),
		rejected("backoff max of 1h + 1ns is rejected at spec.retryPolicy.backoff.max",
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Max: durationOf(time.Hour + 1)}) },
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.max"),
		accepted("ttlSecondsAfterFinished of exactly 365 days is accepted",
			func(r *kruntimes.Run) { r.Spec.TTLSecondsAfterFinished = ptrTo(int32(31536000)) }),
		rejected("ttlSecondsAfterFinished of 365 days + 1s is rejected at spec.ttlSecondsAfterFinished",
			func(r *kruntimes.Run) { r.Spec.TTLSecondsAfterFinished = ptrTo(int32(31536001)) },
			field.ErrorTypeInvalid, "spec.ttlSecondsAfterFinished"),
		accepted("idleTimeoutSeconds of exactly 7 days is accepted",
			func(r *kruntimes.Run) { asFunction(r); r.Spec.Mode.Function.IdleTimeoutSeconds = ptrTo(int32(604800)) }),
		rejected("idleTimeoutSeconds of 7 days + 1s is rejected at spec.mode.function.idleTimeoutSeconds",
			func(r *kruntimes.Run) { asFunction(r); r.Spec.Mode.Function.IdleTimeoutSeconds = ptrTo(int32(604801)) },
			field.ErrorTypeInvalid, "spec.mode.function.idleTimeoutSeconds"),

		accepted("handler of exactly 1024 bytes is accepted",
			func(r *kruntimes.Run) { asFunction(r); r.Spec.Mode.Function.Handler = bytesOf(1024) }),
		rejected("handler of 1025 bytes is rejected at spec.mode.function.handler",
			func(r *kruntimes.Run) { asFunction(r); r.Spec.Mode.Function.Handler = bytesOf(1025) },
			field.ErrorTypeTooLong, "spec.mode.function.handler"),

		accepted("maxAttempts 1 is accepted",
			func(r *kruntimes.Run) { r.Spec.RetryPolicy.MaxAttempts = 1 }),
		rejected("maxAttempts 0 is rejected at spec.retryPolicy.maxAttempts",
			func(r *kruntimes.Run) { r.Spec.RetryPolicy.MaxAttempts = 0 },
			field.ErrorTypeInvalid, "spec.retryPolicy.maxAttempts"),
		accepted("maxAttempts 100 is accepted",
			func(r *kruntimes.Run) { r.Spec.RetryPolicy.MaxAttempts = 100 }),
		rejected("maxAttempts 101 is rejected at spec.retryPolicy.maxAttempts",
			func(r *kruntimes.Run) { r.Spec.RetryPolicy.MaxAttempts = 101 },
			field.ErrorTypeInvalid, "spec.retryPolicy.maxAttempts"),

		accepted("backoff initial of zero is accepted",
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Initial: durationOf(0)}) }),
		rejected("backoff initial of -1ns is rejected at spec.retryPolicy.backoff.initial",
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Initial: durationOf(-1)}) },
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.initial"),
		accepted("backoff max of zero is accepted",
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Max: durationOf(0)}) }),
		rejected("backoff max of -1ns is rejected at spec.retryPolicy.backoff.max",
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Max: durationOf(-1)}) },
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.max"),
		accepted("backoff max equal to initial is accepted",
			func(r *kruntimes.Run) {
				withBackoff(r, kruntimes.RetryBackoff{Initial: durationOf(time.Second), Max: durationOf(time.Second)})
			}),
		rejected("backoff max 1ns below initial is rejected at spec.retryPolicy.backoff.max",
			func(r *kruntimes.Run) {
				withBackoff(r, kruntimes.RetryBackoff{Initial: durationOf(time.Second), Max: durationOf(time.Second - 1)})
			},
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.max"),
		accepted(`backoff factor "1" is accepted`,
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Factor: "1"}) }),
		rejected(`backoff factor "0.99" is rejected at spec.retryPolicy.backoff.factor`,
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Factor: "0.99"}) },
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.factor"),
		accepted(`backoff factor "10" is accepted`,
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Factor: "10"}) }),
		rejected(`backoff factor "10.01" is rejected at spec.retryPolicy.backoff.factor`,
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Factor: "10.01"}) },
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.factor"),
		rejected(`backoff factor "NaN" is rejected at spec.retryPolicy.backoff.factor`,
			func(r *kruntimes.Run) { withBackoff(r, kruntimes.RetryBackoff{Factor: "NaN"}) },
			field.ErrorTypeInvalid, "spec.retryPolicy.backoff.factor"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := taskRun()
			tc.mutate(run)
			tc.assertErrors(t, ValidateRun(run))
		})
	}
}

// runningTask is a task Run as runtimed sees it while it runs: the status
// update old → run is valid until a case changes one field of run.
func runningTask() (run, old *kruntimes.Run) {
	old = taskRun()
	old.ResourceVersion = "7"
	start := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	old.Status = kruntimes.RunStatus{
		Phase:          lifecycle.Running,
		Attempt:        1,
		AssignedPod:    "runtime-bash-5d8f7-abcde",
		AssignedPodUID: "0b6c1c2e-0f7a-4f38-9d64-3c1f6a0c5b11",
		ScheduledTime:  &start,
		StartTime:      &start,
	}
	return old.DeepCopy(), old
}

// readyFunction is a function Run that is Ready with an endpoint.
func readyFunction() (run, old *kruntimes.Run) {
	_, old = runningTask()
	old.Spec = functionRun().Spec
	old.Status.Phase = lifecycle.Ready
	old.Status.Endpoint = &kruntimes.RunEndpoint{
		Protocol: kruntimes.RunEndpointProtocolHTTPS,
		URL:      "https://kruntimes-apiserver.kruntimes-system.svc/apis/kruntimes.io/v1alpha1/namespaces/default/runs/hello/invoke?uid=0b6c1c2e",
	}
	return old.DeepCopy(), old
}

func conditions(n int) []metav1.Condition {
	conds := make([]metav1.Condition, n)
	for i := range conds {
		conds[i] = metav1.Condition{
			Type:               fmt.Sprintf("Condition%d", i),
			Status:             metav1.ConditionTrue,
			Reason:             "Testing",
			LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		}
	}
	return conds
}

// outputsOf is n outputs with short keys.
func outputsOf(n int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("KEY_%d", i)] = "v"
	}
	return out
}

// outputsTotaling is outputs whose keys and values add up to exactly total
// bytes, every value within its own bound.
func outputsTotaling(total int) map[string]string {
	out := map[string]string{}
	for i := 0; total > 0; i++ {
		k := fmt.Sprintf("K%02d", i)
		v := bytesOf(min(8<<10, total-len(k)))
		out[k] = v
		total -= len(k) + len(v)
	}
	return out
}

// pemBundleOf is a bundle of exactly n bytes: one CERTIFICATE block as large
// as fits, then the newlines a bundle file may end with. Validation checks
// PEM framing, not the certificate inside.
func pemBundleOf(n int) []byte {
	for size := n * 3 / 4; size > 0; size-- {
		block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: make([]byte, size)})
		if len(block) <= n {
			return append(block, strings.Repeat("\n", n-len(block))...)
		}
	}
	panic(fmt.Sprintf("no PEM block fits in %d bytes", n))
}

func urlOf(base string, n int) string {
	return base + "&pad=" + bytesOf(n-len(base)-len("&pad="))
}

// secretEnv is one variable read from key of Secret name.
func secretEnv(name, key string) kruntimes.EnvVar {
	return kruntimes.EnvVar{Name: "TOKEN", ValueFrom: &kruntimes.EnvVarSource{
		SecretKeyRef: &kruntimes.SecretKeySelector{Name: name, Key: key}}}
}

func TestRunEnvValueFrom(t *testing.T) {
	type c = boundCase[*kruntimes.Run]
	cases := []c{
		accepted("a secretKeyRef with a Secret name and key is accepted",
			func(r *kruntimes.Run) { r.Spec.Env = []kruntimes.EnvVar{secretEnv("db-credentials", "password")} }),
		accepted("an optional secretKeyRef is accepted",
			func(r *kruntimes.Run) {
				e := secretEnv("db-credentials", "password")
				e.ValueFrom.SecretKeyRef.Optional = ptrTo(true)
				r.Spec.Env = []kruntimes.EnvVar{e}
			}),
		accepted("a key with dots, dashes and underscores is accepted",
			func(r *kruntimes.Run) { r.Spec.Env = []kruntimes.EnvVar{secretEnv("db", ".tls_key-1.pem")} }),
		accepted("a plain empty value next to a secretKeyRef variable is accepted",
			func(r *kruntimes.Run) {
				r.Spec.Env = []kruntimes.EnvVar{{Name: "EMPTY"}, secretEnv("db", "password")}
			}),
		rejected("value and valueFrom together are rejected at spec.env[0].valueFrom",
			func(r *kruntimes.Run) {
				e := secretEnv("db", "password")
				e.Value = "inline"
				r.Spec.Env = []kruntimes.EnvVar{e}
			},
			field.ErrorTypeInvalid, "spec.env[0].valueFrom"),
		rejected("a valueFrom without secretKeyRef is rejected at spec.env[0].valueFrom.secretKeyRef",
			func(r *kruntimes.Run) {
				r.Spec.Env = []kruntimes.EnvVar{{Name: "TOKEN", ValueFrom: &kruntimes.EnvVarSource{}}}
			},
			field.ErrorTypeRequired, "spec.env[0].valueFrom.secretKeyRef"),
		rejected("a secretKeyRef without a name is rejected at spec.env[1].valueFrom.secretKeyRef.name",
			func(r *kruntimes.Run) {
				r.Spec.Env = []kruntimes.EnvVar{{Name: "PLAIN", Value: "v"}, secretEnv("", "password")}
			},
			field.ErrorTypeRequired, "spec.env[1].valueFrom.secretKeyRef.name"),
		rejected("a Secret name that is no DNS subdomain is rejected at spec.env[0].valueFrom.secretKeyRef.name",
			func(r *kruntimes.Run) { r.Spec.Env = []kruntimes.EnvVar{secretEnv("DB_Credentials", "password")} },
			field.ErrorTypeInvalid, "spec.env[0].valueFrom.secretKeyRef.name"),
		rejected("a secretKeyRef without a key is rejected at spec.env[0].valueFrom.secretKeyRef.key",
			func(r *kruntimes.Run) { r.Spec.Env = []kruntimes.EnvVar{secretEnv("db", "")} },
			field.ErrorTypeRequired, "spec.env[0].valueFrom.secretKeyRef.key"),
		rejected("a key with a slash is rejected at spec.env[0].valueFrom.secretKeyRef.key",
			func(r *kruntimes.Run) { r.Spec.Env = []kruntimes.EnvVar{secretEnv("db", "db/password")} },
			field.ErrorTypeInvalid, "spec.env[0].valueFrom.secretKeyRef.key"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := taskRun()
			tc.mutate(run)
			tc.assertErrors(t, ValidateRun(run))
		})
	}
}

func TestMinimalRunStatusUpdatesAreValid(t *testing.T) {
	run, old := runningTask()
	assert.Empty(t, ValidateRunStatusUpdate(run, old), "running task")
	run, old = readyFunction()
	assert.Empty(t, ValidateRunStatusUpdate(run, old), "ready function")
}

func TestRunStatusBounds(t *testing.T) {
	type c = boundCase[*kruntimes.Run]
	cases := []c{
		accepted("16 conditions are accepted",
			func(r *kruntimes.Run) { r.Status.Conditions = conditions(16) }),
		rejected("17 conditions are rejected at status.conditions",
			func(r *kruntimes.Run) { r.Status.Conditions = conditions(17) },
			field.ErrorTypeTooMany, "status.conditions"),

		accepted("message of exactly 4 KiB is accepted",
			func(r *kruntimes.Run) { r.Status.Message = bytesOf(4 << 10) }),
		rejected("message of 4 KiB + 1 byte is rejected at status.message",
			func(r *kruntimes.Run) { r.Status.Message = bytesOf(4<<10 + 1) },
			field.ErrorTypeTooLong, "status.message"),

		accepted("64 outputs are accepted",
			func(r *kruntimes.Run) { r.Status.Outputs = outputsOf(64) }),
		rejected("65 outputs are rejected at status.outputs",
			func(r *kruntimes.Run) { r.Status.Outputs = outputsOf(65) },
			field.ErrorTypeTooMany, "status.outputs"),

		accepted("output key of exactly 128 bytes is accepted",
			func(r *kruntimes.Run) { r.Status.Outputs = map[string]string{bytesOf(128): "v"} }),
		rejected("output key of 129 bytes is rejected at status.outputs[<its first 32 bytes>…]",
			func(r *kruntimes.Run) { r.Status.Outputs = map[string]string{bytesOf(129): "v"} },
			field.ErrorTypeTooLong, "status.outputs["+bytesOf(32)+"…]"),

		accepted("output value of exactly 8 KiB is accepted",
			func(r *kruntimes.Run) { r.Status.Outputs = map[string]string{"RESULT": bytesOf(8 << 10)} }),
		rejected("output value of 8 KiB + 1 byte is rejected at status.outputs[RESULT]",
			func(r *kruntimes.Run) { r.Status.Outputs = map[string]string{"RESULT": bytesOf(8<<10 + 1)} },
			field.ErrorTypeTooLong, "status.outputs[RESULT]"),

		accepted("outputs of exactly 64 KiB in all are accepted",
			func(r *kruntimes.Run) { r.Status.Outputs = outputsTotaling(64 << 10) }),
		rejected("outputs of 64 KiB + 1 byte in all are rejected at status.outputs",
			func(r *kruntimes.Run) { r.Status.Outputs = outputsTotaling(64<<10 + 1) },
			field.ErrorTypeTooLong, "status.outputs"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run, old := runningTask()
			tc.mutate(run)
			tc.assertErrors(t, ValidateRunStatusUpdate(run, old))
		})
	}
}

func TestRunEndpointBounds(t *testing.T) {
	type c = boundCase[*kruntimes.Run]
	cases := []c{
		accepted("endpoint url of exactly 2048 bytes is accepted",
			func(r *kruntimes.Run) { r.Status.Endpoint.URL = urlOf(r.Status.Endpoint.URL, 2048) }),
		rejected("endpoint url of 2049 bytes is rejected at status.endpoint.url",
			func(r *kruntimes.Run) { r.Status.Endpoint.URL = urlOf(r.Status.Endpoint.URL, 2049) },
			field.ErrorTypeTooLong, "status.endpoint.url"),

		accepted("caBundle of exactly 16 KiB is accepted",
			func(r *kruntimes.Run) { r.Status.Endpoint.CABundle = pemBundleOf(16 << 10) }),
		rejected("caBundle of 16 KiB + 1 byte is rejected at status.endpoint.caBundle",
			func(r *kruntimes.Run) { r.Status.Endpoint.CABundle = pemBundleOf(16<<10 + 1) },
			field.ErrorTypeTooLong, "status.endpoint.caBundle"),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run, old := readyFunction()
			tc.mutate(run)
			tc.assertErrors(t, ValidateRunStatusUpdate(run, old))
		})
	}
}

// The helpers must build what their names say, or the bounds above test
// something else.
func TestBoundHelpers(t *testing.T) {
	for _, n := range []int{1024, 1025} {
		p := cleanPathOf(n)
		require.Len(t, p, n)
		assert.NotContains(t, p, "//")
		assert.False(t, strings.HasSuffix(p, "/"))
	}
	for _, n := range []int{64 << 10, 64<<10 + 1} {
		total := 0
		for k, v := range outputsTotaling(n) {
			total += len(k) + len(v)
			assert.LessOrEqual(t, len(v), 8<<10)
		}
		assert.Equal(t, n, total)
	}
	for _, n := range []int{16 << 10, 16<<10 + 1} {
		b := pemBundleOf(n)
		require.Len(t, b, n)
		assert.True(t, isPEMCertificates(b), "a bundle of %d bytes is PEM", n)
	}
	assert.Len(t, urlOf("https://example.com/?uid=1", 2048), 2048)
}

// succeededTask is a task Run that ended: the record nothing may rewrite.
func succeededTask() (run, old *kruntimes.Run) {
	_, old = runningTask()
	end := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 5, 5, 0, time.UTC))
	exit := int32(0)
	old.Status.Phase = lifecycle.Succeeded
	old.Status.CompletionTime = &end
	old.Status.ExitCode = &exit
	old.Status.Outputs = map[string]string{"RESULT": "42"}
	old.Status.Conditions = conditions(1)
	return old.DeepCopy(), old
}

func TestTerminalRunStatusIsFrozen(t *testing.T) {
	type c = boundCase[*kruntimes.Run]
	exit := int32(1)
	later := metav1.NewMicroTime(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	cases := []c{
		accepted("an update that changes nothing is accepted", func(*kruntimes.Run) {}),
		rejected("rewriting outputs is rejected at status.outputs",
			func(r *kruntimes.Run) { r.Status.Outputs = map[string]string{"RESULT": "43"} },
			field.ErrorTypeForbidden, "status.outputs"),
		rejected("clearing outputs is rejected at status.outputs",
			func(r *kruntimes.Run) { r.Status.Outputs = nil },
			field.ErrorTypeForbidden, "status.outputs"),
		rejected("changing exitCode is rejected at status.exitCode",
			func(r *kruntimes.Run) { r.Status.ExitCode = &exit },
			field.ErrorTypeForbidden, "status.exitCode"),
		rejected("changing message is rejected at status.message",
			func(r *kruntimes.Run) { r.Status.Message = "all good, honestly" },
			field.ErrorTypeForbidden, "status.message"),
		rejected("changing completionTime is rejected at status.completionTime",
			func(r *kruntimes.Run) { r.Status.CompletionTime = &later },
			field.ErrorTypeForbidden, "status.completionTime"),
		rejected("changing attempt is rejected at status.attempt",
			func(r *kruntimes.Run) { r.Status.Attempt = 2 },
			field.ErrorTypeForbidden, "status.attempt"),
		rejected("changing assignedPod is rejected at status.assignedPod",
			func(r *kruntimes.Run) { r.Status.AssignedPod = "another-pod" },
			field.ErrorTypeForbidden, "status.assignedPod"),
		rejected("changing assignedPodUID is rejected at status.assignedPodUID",
			func(r *kruntimes.Run) { r.Status.AssignedPodUID = "another-uid" },
			field.ErrorTypeForbidden, "status.assignedPodUID"),
		rejected("changing a condition is rejected at status.conditions",
			func(r *kruntimes.Run) { r.Status.Conditions[0].Message = "rewritten" },
			field.ErrorTypeForbidden, "status.conditions"),
		rejected("adding a condition is rejected at status.conditions",
			func(r *kruntimes.Run) { r.Status.Conditions = conditions(2) },
			field.ErrorTypeForbidden, "status.conditions"),
		rejected("changing startTime is rejected at status.startTime",
			func(r *kruntimes.Run) { r.Status.StartTime = &later },
			field.ErrorTypeForbidden, "status.startTime"),
	}
	for _, phase := range []lifecycle.Phase{lifecycle.Succeeded, lifecycle.Failed, lifecycle.Cancelled, lifecycle.Timeout} {
		for _, tc := range cases {
			t.Run(string(phase)+": "+tc.name, func(t *testing.T) {
				run, old := succeededTask()
				old.Status.Phase, run.Status.Phase = phase, phase
				tc.mutate(run)
				tc.assertErrors(t, ValidateRunStatusUpdate(run, old))
			})
		}
	}
}

// A bound added after a Run was stored must not make the Run unchangeable:
// it applies only to a field an update changes.
func TestUpperBoundsRatchetOnUpdate(t *testing.T) {
	old := taskRun()
	old.ResourceVersion = "7"
	old.Spec.Timeout = durationOf(30 * 24 * time.Hour)
	old.Spec.TTLSecondsAfterFinished = ptrTo(int32(400 * 24 * 3600))

	run := old.DeepCopy()
	run.Spec.CancelRequested = true
	assert.Empty(t, summarize(ValidateRunUpdate(run, old)), "cancelling a Run stored with a timeout over today's bound")

	run = old.DeepCopy()
	run.Spec.TTLSecondsAfterFinished = ptrTo(int32(500 * 24 * 3600))
	assert.Equal(t, []string{"FieldValueInvalid at spec.ttlSecondsAfterFinished"}, summarize(ValidateRunUpdate(run, old)), "a changed TTL must be within the bound")
}

// TestRelocationKeepsTheAttempt: a function given back for a planned
// disruption of its Pod (Ready reason Relocating) returns to Pending at the
// same attempt; any other way back to Pending from Running or Ready is a
// retry and adds one.
func TestRelocationKeepsTheAttempt(t *testing.T) {
	type c = boundCase[*kruntimes.Run]
	toPending := func(reason string, attempt int32) func(*kruntimes.Run) {
		return func(r *kruntimes.Run) {
			r.Status.Phase = lifecycle.Pending
			r.Status.AssignedPod, r.Status.AssignedPodUID = "", ""
			r.Status.Endpoint = nil
			r.Status.Attempt = attempt
			r.Status.Conditions = []metav1.Condition{{
				Type: lifecycle.ConditionReady, Status: metav1.ConditionFalse, Reason: reason,
				LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
			}}
		}
	}
	cases := []c{
		accepted("a Ready function relocated to Pending keeps attempt 1", toPending(lifecycle.ReasonRelocating, 1)),
		rejected("a relocation that adds one to the attempt is rejected at status.attempt",
			toPending(lifecycle.ReasonRelocating, 2), field.ErrorTypeInvalid, "status.attempt"),
		rejected("Ready → Pending without reason Relocating keeping the attempt is rejected at status.attempt",
			toPending(lifecycle.ReasonOwnerLost, 1), field.ErrorTypeInvalid, "status.attempt"),
		accepted("Ready → Pending as a retry adds one", toPending(lifecycle.ReasonOwnerLost, 2)),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run, old := readyFunction()
			old.Status.Attempt, run.Status.Attempt = 1, 1
			tc.mutate(run)
			tc.assertErrors(t, ValidateRunStatusUpdate(run, old))
		})
	}
	t.Run("a task is never relocated", func(t *testing.T) {
		run, old := runningTask()
		old.Status.Attempt = 1
		run = old.DeepCopy()
		toPending(lifecycle.ReasonRelocating, 1)(run)
		rejected("", func(*kruntimes.Run) {}, field.ErrorTypeInvalid, "status.attempt").assertErrors(t, ValidateRunStatusUpdate(run, old))
	})
}
