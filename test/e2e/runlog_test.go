package e2e

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	kruntimesv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// TestRunLogOfTasks runs a task on a real Runtime Pod and reads what it
// printed through kube-apiserver's aggregation: runtimed handed the log over
// (create runs/log, granted by the runtime controller) before the outcome.
func TestRunLogOfTasks(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "runlog")
	ctx := framework.Context(t, 4*time.Minute)
	examples := filepath.Join(f.RepoRoot, "artifacts", "examples")

	out, err := f.Kubectl(ctx, "-n", ns, "apply", "-f", filepath.Join(examples, "runtime-bash.yaml"))
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "runtime/bash", "--timeout=3m")
	require.NoError(t, err, out)

	// The writes are 300 ms apart: stdout and stderr are two pipes, and only
	// writes that far apart have an order to keep.
	printer := strings.NewReplacer("name: hello", "name: printer",
		`echo "hello, $NAME"`, `echo one; sleep 0.3; printf '\377\000\033[31m\n' >&2; sleep 0.3; echo three`).
		Replace(mustRead(t, filepath.Join(examples, "run-task.yaml")))
	out, err = f.KubectlWithInput(ctx, printer, "-n", ns, "create", "-f", "-")
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=jsonpath={.status.phase}=Succeeded", "run/printer", "--timeout=90s")
	require.NoError(t, err, out)

	// Read right after Succeeded: the log was kept before the outcome.
	const want = "one\n\xff\x00\x1b[31m\nthree\n"
	logPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + ns + "/runs/printer/log"
	out, err = f.Kubectl(ctx, "get", "--raw", logPath)
	require.NoError(t, err, out)
	assert.Equal(t, want, out, "kubectl get --raw through aggregation: bytes exact, write order")

	runs := client.KruntimesV1alpha1().Runs(ns)
	got, err := runs.GetLogs("printer", &v1alpha1.RunLogOptions{Stream: string(v1alpha1.RunLogStreamStderr)}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Equal(t, "\xff\x00\x1b[31m\n", string(got))
	got, err = runs.GetLogs("printer", &v1alpha1.RunLogOptions{TailLines: ptrTo[int64](1)}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Equal(t, "three\n", string(got))

	require.NoError(t, runs.Delete(ctx, "printer", metav1.DeleteOptions{}))
	err = framework.Poll(ctx, framework.PollInterval, time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		_, err := runs.GetLogs("printer", &v1alpha1.RunLogOptions{}).DoRaw(ctx)
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "the log of a deleted Run is 404")
}

func ptrTo[T any](v T) *T { return &v }

// TestRunLogOfFunctions follows a Ready Python function Run through
// kube-apiserver's aggregation with the Go client's GetLogs(…).Stream, as
// kubectl logs -f would, and with the krt binary's krt logs -f: a
// handler's print reaches each follower prefixed with its invocation ID
// once the invocation ends, and both follows end with the Run.
func TestRunLogOfFunctions(t *testing.T) {
	f := framework.Get(t)
	client := controllersClient(t, f)
	ns := f.CreateNamespace(t, "fnlog")
	ctx := framework.Context(t, 4*time.Minute)
	examples := filepath.Join(f.RepoRoot, "artifacts", "examples")

	out, err := f.Kubectl(ctx, "-n", ns, "apply", "-f", filepath.Join(examples, "runtime-python.yaml"))
	require.NoError(t, err, out)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "runtime/python", "--timeout=3m")
	require.NoError(t, err, out)
	runs := client.KruntimesV1alpha1().Runs(ns)
	_, err = runs.Create(ctx, functionRun("greet", "python", "handler.py",
		"import sys\n\ndef handle(event, context):\n    print('hello', event['name'])\n    print('careful', file=sys.stderr)\n    return 'ok'\n", "handler.handle"), metav1.CreateOptions{})
	require.NoError(t, err)
	out, err = f.Kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "run/greet", "--timeout=90s")
	require.NoError(t, err, out)

	logPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + ns + "/runs/greet/log"
	out, err = f.Kubectl(ctx, "get", "--raw", logPath)
	require.Error(t, err, "without follow a function's log is 400: nothing is kept")
	assert.Contains(t, out+err.Error(), "follow=true")

	stream, err := runs.GetLogs("greet", &v1alpha1.RunLogOptions{Follow: true}).Stream(ctx)
	require.NoError(t, err)
	defer stream.Close()
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		r := bufio.NewReader(stream)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	// krt logs -f, the real binary, follows the same Run through
	// aggregation. Started before the invocations or not, it sees them: a
	// follow starts with the bounded tail the Runtime Server keeps.
	krt := exec.CommandContext(ctx, filepath.Join(f.RepoRoot, "bin", "krt"), "--kubeconfig="+f.Kubeconfig, "-n", ns, "logs", "-f", "greet")
	krtOut, err := krt.StdoutPipe()
	require.NoError(t, err)
	var krtErr strings.Builder // read after Wait only
	krt.Stderr = &krtErr
	require.NoError(t, krt.Start())
	krtLines := readArrivedLines(krtOut)
	next := func(who string, ch <-chan string) []string {
		var got []string
		for len(got) < 2 {
			select {
			case l, ok := <-ch:
				require.True(t, ok, "%s: the follow ended early after %q", who, got)
				got = append(got, l)
			case <-ctx.Done():
				t.Fatalf("%s did not see the invocation: %q", who, got)
			}
		}
		return got
	}
	krtText := make(chan string, 256)
	go func() {
		defer close(krtText)
		for l := range krtLines {
			krtText <- l.text
		}
	}()
	for _, id := range []string{"e2e-first", "e2e-second"} {
		res, err := runs.Invoke(ctx, "greet", []byte(`{"name":"`+id+`"}`), kruntimesv1alpha1.InvokeOptions{InvocationID: id})
		require.NoError(t, err)
		assert.Equal(t, id, res.InvocationID)
		want := []string{"[invocation/" + id + "] hello " + id + "\n", "[invocation/" + id + "] careful\n"}
		assert.Equal(t, want, next("GetLogs(…).Stream", lines))
		assert.Equal(t, want, next("krt logs -f", krtText))
	}

	// The Run ends: so do its follows.
	require.NoError(t, runs.Delete(ctx, "greet", metav1.DeleteOptions{}))
	for who, ch := range map[string]<-chan string{"GetLogs(…).Stream": lines, "krt logs -f": krtText} {
		for ended := false; !ended; {
			select {
			case l, ok := <-ch:
				if !ok {
					ended = true
					break
				}
				t.Errorf("%s: a line after the invocations: %q", who, l)
			case <-ctx.Done():
				t.Fatalf("%s: the follow did not end with the Run", who)
			}
		}
	}
	require.NoError(t, krt.Wait(), "krt logs -f exits 0 when the Run ends: %s", krtErr.String())
}
