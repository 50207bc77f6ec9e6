package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// fakeRuns answers as kruntimes-apiserver would for one Run in namespace
// ns: create, list and watch by metadata.name, patch, and runs/log.
type fakeRuns struct {
	t *testing.T

	mu          sync.Mutex
	created     *v1alpha1.Run
	state       v1alpha1.RunStatus // what list answers
	listStatus  int                // non-zero: list answers this code
	createCode  int                // non-zero: create answers this code
	patches     []string
	patchTypes  []string
	logRequests []string

	events  chan v1alpha1.RunStatus // sent on the watch
	patched chan struct{}
	done    chan struct{}
}

func newFakeRuns(t *testing.T) (*fakeRuns, *httptest.Server) {
	f := &fakeRuns{t: t, events: make(chan v1alpha1.RunStatus, 8), patched: make(chan struct{}, 8), done: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.done) }) // runs first: ends hanging watches
	return f, srv
}

func (f *fakeRuns) run(status v1alpha1.RunStatus, rv string) *v1alpha1.Run {
	r := f.created.DeepCopy()
	r.TypeMeta = metav1.TypeMeta{APIVersion: "kruntimes.io/v1alpha1", Kind: "Run"}
	r.ResourceVersion = rv
	r.Status = status
	return r
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func status(code int, reason, message string) map[string]any {
	return map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
}

func (f *fakeRuns) serve(w http.ResponseWriter, r *http.Request) {
	const base = "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs"
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == base:
		if f.createCode != 0 {
			writeJSON(w, f.createCode, status(f.createCode, "Invalid", "Run.kruntimes.io \"x\" is invalid"))
			return
		}
		run := &v1alpha1.Run{}
		require.NoError(f.t, json.NewDecoder(r.Body).Decode(run))
		if run.Name == "" {
			run.Name = run.GenerateName + "abcde"
		}
		run.Namespace, run.UID = "ns", "uid-1"
		f.created = run
		writeJSON(w, http.StatusCreated, f.run(v1alpha1.RunStatus{Phase: lifecycle.Pending}, "1"))
	case r.Method == http.MethodGet && r.URL.Path == base && r.URL.Query().Get("watch") == "true":
		if f.listStatus != 0 {
			writeJSON(w, f.listStatus, status(f.listStatus, "InternalError", "down"))
			return
		}
		assert.Equal(f.t, "metadata.name="+f.created.Name, r.URL.Query().Get("fieldSelector"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// client-go's reflector streams the list (WatchList): the
			// current state, then the bookmark that ends the initial events.
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "ADDED", "object": f.run(f.state, "5")})
			bookmark := f.run(v1alpha1.RunStatus{}, "5")
			bookmark.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "BOOKMARK", "object": bookmark})
		}
		w.(http.Flusher).Flush()
		f.mu.Unlock()
		defer f.mu.Lock()
		for rv := 10; ; rv++ {
			select {
			case <-r.Context().Done():
				return
			case <-f.done:
				return
			case s := <-f.events:
				f.mu.Lock()
				obj := f.run(s, fmt.Sprint(rv))
				f.mu.Unlock()
				_ = json.NewEncoder(w).Encode(map[string]any{"type": "MODIFIED", "object": obj})
				w.(http.Flusher).Flush()
			}
		}
	case r.Method == http.MethodGet && r.URL.Path == base:
		if f.listStatus != 0 {
			writeJSON(w, f.listStatus, status(f.listStatus, "InternalError", "down"))
			return
		}
		assert.Equal(f.t, "metadata.name="+f.created.Name, r.URL.Query().Get("fieldSelector"))
		writeJSON(w, http.StatusOK, map[string]any{
			"kind": "RunList", "apiVersion": "kruntimes.io/v1alpha1",
			"metadata": map[string]any{"resourceVersion": "5"},
			"items":    []any{f.run(f.state, "5")},
		})
	case r.Method == http.MethodPatch && f.created != nil && r.URL.Path == base+"/"+f.created.Name:
		body, _ := io.ReadAll(r.Body)
		f.patches = append(f.patches, string(body))
		f.patchTypes = append(f.patchTypes, r.Header.Get("Content-Type"))
		f.patched <- struct{}{}
		writeJSON(w, http.StatusOK, f.run(f.state, "6"))
	case r.Method == http.MethodGet && f.created != nil && r.URL.Path == base+"/"+f.created.Name+"/log":
		q := r.URL.Query()
		f.logRequests = append(f.logRequests, r.URL.RawQuery)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s\x00\xff\n", strings.ToLower(q.Get("stream")), q.Get("attempt"))
	default:
		writeJSON(w, http.StatusNotFound, status(404, "NotFound", r.Method+" "+r.URL.String()))
	}
}

func streamsOf(in string) (genericiooptions.IOStreams, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return genericiooptions.IOStreams{In: strings.NewReader(in), Out: &out, ErrOut: &errOut}, &out, &errOut
}

// noSignals keeps tests from subscribing to the process's real signals.
func noSignals(t *testing.T) chan chan<- os.Signal {
	subscribed := make(chan chan<- os.Signal, 1)
	old := notifySignals
	notifySignals = func(c chan<- os.Signal) func() { subscribed <- c; return func() {} }
	t.Cleanup(func() { notifySignals = old })
	return subscribed
}

func TestRunExitCode(t *testing.T) {
	cases := []struct {
		phase    lifecycle.Phase
		exitCode *int32
		want     int
	}{
		{lifecycle.Succeeded, ptr.To[int32](0), 0},
		{lifecycle.Succeeded, nil, 0},
		{lifecycle.Failed, ptr.To[int32](3), 3},
		{lifecycle.Failed, ptr.To[int32](255), 255},
		{lifecycle.Failed, nil, ExitRunNoExitCode},
		{lifecycle.Failed, ptr.To[int32](0), ExitRunNoExitCode},
		{lifecycle.Timeout, nil, ExitRunTimeout},
		{lifecycle.Timeout, ptr.To[int32](137), ExitRunTimeout},
		{lifecycle.Cancelled, nil, ExitRunCancelled},
		{lifecycle.Running, nil, ExitRunKrtFailed},
	}
	for _, tc := range cases {
		run := &v1alpha1.Run{Status: v1alpha1.RunStatus{Phase: tc.phase, ExitCode: tc.exitCode}}
		assert.Equal(t, tc.want, runExitCode(run), "%s exit code %v", tc.phase, tc.exitCode)
	}
	for _, p := range lifecycle.Phases() {
		if lifecycle.IsTerminal(p) {
			assert.NotEqual(t, ExitRunKrtFailed, runExitCode(&v1alpha1.Run{Status: v1alpha1.RunStatus{Phase: p}}), "terminal %s has its own code", p)
		}
	}
}

// build is the Run krt run makes of o and its arguments: Complete,
// Validate, newRun.
func (o *runOptions) build(args []string, atDash int, stdin io.Reader) (*v1alpha1.Run, error) {
	if err := o.Complete(args, atDash, stdin); err != nil {
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return o.newRun(), nil
}

func TestRunBuild(t *testing.T) {
	run, err := (&runOptions{runtime: "bash", env: []string{"A=1", "B=x=y", "C="}, timeout: 90 * time.Second}).build([]string{"sh", "-c", "echo hi"}, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, "run-", run.GenerateName)
	assert.Equal(t, "bash", run.Spec.Runtime)
	assert.Equal(t, "exec \"$@\"\n", run.Spec.Source.Inline)
	assert.Equal(t, []string{"sh", "-c", "echo hi"}, run.Spec.Mode.Task.Args)
	assert.Nil(t, run.Spec.Mode.Function)
	assert.Equal(t, []v1alpha1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "x=y"}, {Name: "C"}}, run.Spec.Env)
	assert.Equal(t, 90*time.Second, run.Spec.Timeout.Duration)

	script := filepath.Join(t.TempDir(), "s.sh")
	require.NoError(t, os.WriteFile(script, []byte("echo \"$1\"\n"), 0o600))
	run, err = (&runOptions{runtime: "py", name: "n", file: script}).build([]string{"a"}, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, "n", run.Name)
	assert.Equal(t, "py", run.Spec.Runtime)
	assert.Equal(t, "echo \"$1\"\n", run.Spec.Source.Inline)
	assert.Equal(t, []string{"a"}, run.Spec.Mode.Task.Args)
	assert.Nil(t, run.Spec.Timeout)

	run, err = (&runOptions{runtime: "bash", file: "-"}).build(nil, -1, strings.NewReader("echo stdin"))
	require.NoError(t, err)
	assert.Equal(t, "echo stdin", run.Spec.Source.Inline)
	assert.Nil(t, run.Spec.Mode.Task.Args)

	for name, tc := range map[string]struct {
		o      runOptions
		args   []string
		atDash int
		want   string
	}{
		"no program":           {runOptions{runtime: "bash"}, nil, -1, "-f SCRIPT or the command after --"},
		"args without --":      {runOptions{runtime: "bash"}, []string{"echo"}, -1, "put the command after --"},
		"args before --":       {runOptions{runtime: "bash"}, []string{"x", "echo"}, 1, `["x"]`},
		"env without =":        {runOptions{runtime: "bash", env: []string{"A"}}, []string{"true"}, 0, "NAME=VALUE"},
		"env without name":     {runOptions{runtime: "bash", env: []string{"=1"}}, []string{"true"}, 0, "NAME=VALUE"},
		"empty runtime":        {runOptions{}, []string{"true"}, 0, "--runtime"},
		"negative timeout":     {runOptions{runtime: "bash", timeout: -time.Second}, []string{"true"}, 0, "--timeout"},
		"a script that is not": {runOptions{runtime: "bash", file: filepath.Join(t.TempDir(), "absent")}, nil, -1, "no such file"},
	} {
		_, err := tc.o.build(tc.args, tc.atDash, nil)
		assert.ErrorContains(t, err, tc.want, name)
	}
}

// TestRunPrintsTheLogAndExitsWithTheTaskCode runs krt run from its flags to
// its exit: the Run created, every attempt's log (retries included) byte-exact
// on the right stream, the task's exit code.
func TestRunPrintsTheLogAndExitsWithTheTaskCode(t *testing.T) {
	noSignals(t)
	f, srv := newFakeRuns(t)
	f.state = v1alpha1.RunStatus{Phase: lifecycle.Failed, Attempt: 2, ExitCode: ptr.To[int32](3)}
	streams, out, errOut := streamsOf("")
	code := Run([]string{"--server", srv.URL, "-n", "ns", "run", "-r", "sh", "--name", "hi", "--env", "A=1", "--timeout", "90s", "--", "sh", "-c", "echo hi; exit 3"}, streams)
	assert.Equal(t, 3, code, errOut.String())
	assert.Equal(t, "stdout 1\x00\xff\nstdout 2\x00\xff\n", out.String(), "each attempt's stdout, bytes unchanged")
	assert.Contains(t, errOut.String(), "stderr 1\x00\xff\n")
	assert.Contains(t, errOut.String(), "stderr 2\x00\xff\n")
	assert.Contains(t, errOut.String(), "run/hi Failed (exit code 3)")
	assert.ElementsMatch(t, []string{"attempt=1&follow=true&stream=Stdout", "attempt=1&follow=true&stream=Stderr", "attempt=2&follow=true&stream=Stdout", "attempt=2&follow=true&stream=Stderr"}, f.logRequests, "each attempt followed live, one stream a follow")

	spec := f.created.Spec
	assert.Equal(t, "hi", f.created.Name)
	assert.Equal(t, "sh", spec.Runtime)
	assert.Equal(t, inlineCommand, spec.Source.Inline)
	assert.Equal(t, []string{"sh", "-c", "echo hi; exit 3"}, spec.Mode.Task.Args)
	assert.Equal(t, []v1alpha1.EnvVar{{Name: "A", Value: "1"}}, spec.Env)
	assert.Equal(t, 90*time.Second, spec.Timeout.Duration)
}

func TestRunFromStdinAndWait(t *testing.T) {
	noSignals(t)
	f, srv := newFakeRuns(t)
	f.state = v1alpha1.RunStatus{Phase: lifecycle.Succeeded, Attempt: 1, ExitCode: ptr.To[int32](0)}
	streams, out, errOut := streamsOf("echo \"$1\"\n")
	code := Run([]string{"--server", srv.URL, "-n", "ns", "run", "--wait", "-f", "-", "--", "arg"}, streams)
	assert.Equal(t, ExitOK, code, errOut.String())
	assert.Empty(t, out.String(), "--wait prints no log")
	assert.Empty(t, f.logRequests)
	assert.Equal(t, "run-abcde", f.created.Name)
	assert.Equal(t, "echo \"$1\"\n", f.created.Spec.Source.Inline)
	assert.Equal(t, []string{"arg"}, f.created.Spec.Mode.Task.Args)
	assert.Equal(t, "bash", f.created.Spec.Runtime, "bash by default")
}

func TestRunKrtFailures(t *testing.T) {
	noSignals(t)
	f, srv := newFakeRuns(t)
	f.createCode = http.StatusUnprocessableEntity
	streams, _, errOut := streamsOf("")
	assert.Equal(t, ExitRunKrtFailed, Run([]string{"--server", srv.URL, "-n", "ns", "run", "--", "true"}, streams), "a refused create")
	assert.Contains(t, errOut.String(), "is invalid")
	assert.Equal(t, ExitRunKrtFailed, Run([]string{"--server", srv.URL, "-n", "ns", "run", "--no-such-flag", "--", "true"}, streams), "a bad flag")
	assert.Equal(t, ExitRunKrtFailed, Run([]string{"--server", srv.URL, "-n", "ns", "run", "--timeout", "soon", "--", "true"}, streams), "a bad duration")
	assert.Equal(t, ExitRunKrtFailed, Run([]string{"--server", srv.URL, "-n", "ns", "run"}, streams), "no program")
}

func TestRunLostConnection(t *testing.T) {
	noSignals(t)
	old := lostAfter
	lostAfter = 500 * time.Millisecond
	t.Cleanup(func() { lostAfter = old })
	f, srv := newFakeRuns(t)
	f.listStatus = http.StatusInternalServerError
	streams, _, errOut := streamsOf("")
	start := time.Now()
	code := Run([]string{"--server", srv.URL, "-n", "ns", "run", "--", "true"}, streams)
	assert.Equal(t, ExitRunLost, code, errOut.String())
	assert.GreaterOrEqual(t, time.Since(start), lostAfter)
	assert.Contains(t, errOut.String(), "lost the connection")
}

// TestRunInterrupt: the first signal patches cancelRequested and krt keeps
// following until Cancelled; two signals stop it at once.
func TestRunInterrupt(t *testing.T) {
	subscribed := noSignals(t)
	f, srv := newFakeRuns(t)
	f.state = v1alpha1.RunStatus{Phase: lifecycle.Running, Attempt: 1}
	streams, _, errOut := streamsOf("")
	codes := make(chan int, 1)
	go func() { codes <- Run([]string{"--server", srv.URL, "-n", "ns", "run", "--", "sleep", "300"}, streams) }()
	sigs := <-subscribed
	sigs <- syscall.SIGINT
	select {
	case <-f.patched:
	case <-time.After(10 * time.Second):
		t.Fatal("no cancel patch after the first signal")
	}
	select {
	case code := <-codes:
		t.Fatalf("krt run ended (%d) before the Run did", code)
	default:
	}
	f.events <- v1alpha1.RunStatus{Phase: lifecycle.Cancelled, Attempt: 1}
	select {
	case code := <-codes:
		assert.Equal(t, ExitRunCancelled, code)
	case <-time.After(10 * time.Second):
		t.Fatal("krt run did not end after the Run was Cancelled")
	}
	f.mu.Lock()
	assert.Equal(t, []string{cancelPatch}, f.patches)
	f.mu.Unlock()

	// Streams of its own: the first krt run's signal goroutine may still
	// be writing to the first ones.
	f2, srv2 := newFakeRuns(t)
	f2.state = v1alpha1.RunStatus{Phase: lifecycle.Running, Attempt: 1}
	streams, _, errOut = streamsOf("")
	go func() { codes <- Run([]string{"--server", srv2.URL, "-n", "ns", "run", "--", "sleep", "300"}, streams) }()
	sigs = <-subscribed
	sigs <- syscall.SIGINT
	<-f2.patched
	sigs <- syscall.SIGINT
	select {
	case code := <-codes:
		assert.Equal(t, ExitRunCancelled, code, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("a second signal did not stop krt run")
	}
}

func TestRunHelpListsEveryExitCode(t *testing.T) {
	streams, out, _ := streamsOf("")
	require.Equal(t, ExitOK, Run([]string{"run", "--help"}, streams))
	for _, c := range []int{ExitRunTimeout, ExitRunKrtFailed, ExitRunNoExitCode, ExitRunLost, ExitRunCancelled} {
		assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s+\S`, c)), out.String(), "exit code %d", c)
	}
	assert.Contains(t, out.String(), "0-255  the task's exit code")
	assert.Contains(t, out.String(), `exec "$@"`)
}

func TestCancel(t *testing.T) {
	noSignals(t)
	f, srv := newFakeRuns(t)
	f.created = &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns", UID: "uid-1"}}
	f.state = v1alpha1.RunStatus{Phase: lifecycle.Running, Attempt: 1}
	streams, out, errOut := streamsOf("")
	assert.Equal(t, ExitOK, Run([]string{"--server", srv.URL, "-n", "ns", "cancel", "job"}, streams), errOut.String())
	assert.Equal(t, []string{`{"spec":{"cancelRequested":true}}`}, f.patches)
	assert.Equal(t, []string{"application/merge-patch+json"}, f.patchTypes)
	assert.Contains(t, out.String(), "run/job cancel requested")
	<-f.patched

	codes := make(chan int, 1)
	go func() {
		codes <- Run([]string{"--server", srv.URL, "-n", "ns", "cancel", "job", "--wait", "--timeout", "20s"}, streams)
	}()
	<-f.patched
	f.events <- v1alpha1.RunStatus{Phase: lifecycle.Cancelled, Attempt: 1}
	select {
	case code := <-codes:
		assert.Equal(t, ExitOK, code, errOut.String())
		assert.Contains(t, out.String(), "run/job Cancelled")
	case <-time.After(10 * time.Second):
		t.Fatal("cancel --wait did not end after the Run was Cancelled")
	}

	start := time.Now()
	assert.Equal(t, ExitError, Run([]string{"--server", srv.URL, "-n", "ns", "cancel", "job", "--wait", "--timeout", "300ms"}, streams))
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, errOut.String(), "did not end within 300ms")
	<-f.patched

	assert.Equal(t, ExitError, Run([]string{"--server", srv.URL, "-n", "ns", "cancel", "absent"}, streams))
	assert.Equal(t, ExitUsage, Run([]string{"--server", srv.URL, "cancel"}, streams), "NAME is required")
}
