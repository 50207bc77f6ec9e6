package python

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/runtimes/language"
)

const envHandler = "import os\ndef handle(event, context):\n    return {'x': os.environ.get('X'), 'base': os.environ.get('BASE'), 'cwd': os.getcwd()}\n"

// readySpare waits until the pool holds a started spare and returns its PID.
func readySpare(t *testing.T, p *sparePool) int {
	t.Helper()
	var pid int
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.spares) > 0 {
			pid = p.spares[0].group.Pid()
			return true, nil
		}
		return false, nil
	})
	require.NoError(t, err, "a spare worker starts")
	return pid
}

func loadIn(t *testing.T, l *Language, env ...string) (language.Function, string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mod.py"), []byte(envHandler), 0o644))
	fn, err := l.LoadFunction(t.Context(), language.FunctionSpec{RunUID: "u", WorkingDir: dir, Handler: "mod.handle",
		Env: append([]string{"PATH=" + os.Getenv("PATH")}, env...)})
	require.NoError(t, err)
	t.Cleanup(fn.Close)
	return fn, dir
}

// TestSpareWorkerServesARegistration: a registration takes the worker that
// was started ahead of it, with the registration's own environment and
// directory, and a new spare replaces it.
func TestSpareWorkerServesARegistration(t *testing.T) {
	l := New("")
	l.KeepSpares(1, 0, []string{"PATH=" + os.Getenv("PATH"), "BASE=spare"})
	t.Cleanup(l.Close)
	spare := readySpare(t, l.spares)

	fn, dir := loadIn(t, l, "X=from-the-run")
	f := fn.(*function)
	f.mu.Lock()
	assert.Equal(t, spare, f.worker.group.Pid(), "the spare serves the registration")
	f.mu.Unlock()
	res, err := fn.Invoke(t.Context(), language.Invocation{ID: "1", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
	require.NoError(t, err)
	require.Nil(t, res.Error)
	assert.JSONEq(t, `{"x":"from-the-run","base":null,"cwd":"`+dir+`"}`, string(res.Output),
		"the registration's environment replaces the spare's")

	next := readySpare(t, l.spares)
	assert.NotEqual(t, spare, next, "a new spare replaces the one taken")
}

// TestSpareServesARegistrationThatSetsPythonVariables: workers start
// isolated, so a spare serves a registration that sets PYTHON* variables
// as well as a fresh interpreter would, and the worker applies the two
// that matter to an import: PYTHONPATH and PYTHONDONTWRITEBYTECODE.
func TestSpareServesARegistrationThatSetsPythonVariables(t *testing.T) {
	l := New("")
	l.KeepSpares(1, 0, []string{"PATH=" + os.Getenv("PATH")})
	t.Cleanup(l.Close)
	spare := readySpare(t, l.spares)

	lib := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(lib, "helper.py"), []byte("VALUE = 'from PYTHONPATH'\n"), 0o644))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mod.py"), []byte("import sys, helper\ndef handle(event, context):\n    return {'value': helper.VALUE, 'nobytecode': sys.dont_write_bytecode, 'first': sys.path[:2]}\n"), 0o644))
	fn, err := l.LoadFunction(t.Context(), language.FunctionSpec{RunUID: "u", WorkingDir: dir, Handler: "mod.handle",
		Env: []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + lib, "PYTHONDONTWRITEBYTECODE=1"}})
	require.NoError(t, err)
	t.Cleanup(fn.Close)
	f := fn.(*function)
	f.mu.Lock()
	assert.Equal(t, spare, f.worker.group.Pid(), "the spare serves the registration")
	f.mu.Unlock()
	res, err := fn.Invoke(t.Context(), language.Invocation{ID: "1", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
	require.NoError(t, err)
	require.Nil(t, res.Error)
	assert.JSONEq(t, `{"value":"from PYTHONPATH","nobytecode":true,"first":["`+dir+`","`+lib+`"]}`, string(res.Output))
}

// TestCloseStopsTheSpares: no spare outlives its Runtime Server.
func TestCloseStopsTheSpares(t *testing.T) {
	l := New("")
	l.KeepSpares(2, 0, []string{"PATH=" + os.Getenv("PATH")})
	readySpare(t, l.spares)
	l.spares.mu.Lock()
	spares := append([]*worker(nil), l.spares.spares...)
	l.spares.mu.Unlock()
	l.Close()
	for _, w := range spares {
		select {
		case <-w.exited:
		case <-time.After(10 * time.Second):
			t.Fatalf("spare %d still runs after Close", w.group.Pid())
		}
	}
}

// spareCount is how many spares the pool holds or starts.
func spareCount(p *sparePool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.spares) + p.starting
}

// waitSpares waits until the pool holds exactly n started spares.
func waitSpares(t *testing.T, p *sparePool, n int, why string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.spares) == n && p.starting == 0, nil
	})
	require.NoError(t, err, "%s: want %d spares, have %d", why, n, spareCount(p))
}

// TestSparesFollowTheFreeSlots: with the Pod's capacity known, the pool
// keeps a spare for each free slot (up to its size): an empty Pod has one
// for each Run a rollout may move onto it at once, a full one none, and a
// function that goes frees its slot's spare again.
func TestSparesFollowTheFreeSlots(t *testing.T) {
	l := New("")
	l.KeepSpares(8, 2, []string{"PATH=" + os.Getenv("PATH")})
	t.Cleanup(l.Close)
	waitSpares(t, l.spares, 2, "an empty Pod of capacity 2")

	first, _ := loadIn(t, l)
	waitSpares(t, l.spares, 1, "one function loaded")
	second, _ := loadIn(t, l)
	waitSpares(t, l.spares, 0, "the Pod is full")

	second.Close()
	waitSpares(t, l.spares, 1, "one slot freed")
	first.Close()
	waitSpares(t, l.spares, 2, "both slots freed")
}

// TestSparesImportNothingATenantLeftInTheServersHome: a tenant can write
// the Runtime Server's own HOME (the image's, e.g. /home/nonroot), where
// an interpreter started normally finds a usercustomize to run at start:
// spares start isolated and import none of it.
func TestSparesImportNothingATenantLeftInTheServersHome(t *testing.T) {
	home := t.TempDir()
	out, err := exec.Command(New("").Interpreter, "-c", "import site; print(site.getusersitepackages())").Output()
	require.NoError(t, err)
	userSite := filepath.Join(home, strings.TrimPrefix(strings.TrimSpace(string(out)), os.Getenv("HOME")))
	require.NoError(t, os.MkdirAll(userSite, 0o755))
	marker := filepath.Join(home, "imported")
	for _, name := range []string{"usercustomize", "json"} {
		require.NoError(t, os.WriteFile(filepath.Join(userSite, name+".py"), []byte("open(\""+marker+"\", \"w\").close()\n"), 0o644))
	}

	l := New("")
	l.KeepSpares(1, 0, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home})
	t.Cleanup(l.Close)
	readySpare(t, l.spares)
	fn, _ := loadIn(t, l, "HOME="+home)
	res, err := fn.Invoke(t.Context(), language.Invocation{ID: "1", Input: []byte(`{}`), ContentType: invocation.ContentTypeJSON})
	require.NoError(t, err)
	require.Nil(t, res.Error)
	assert.NoFileExists(t, marker, "a worker imported what was left in its HOME's user site-packages")
}
