package integration

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	runregistry "kruntimes.io/kruntimes/registry/run"
	logstore "kruntimes.io/kruntimes/registry/runlog"
	"kruntimes.io/kruntimes/registry/storage/embedded"
)

// logBackend is a storage backend the log test restarts the server on and
// looks into.
type logBackend struct {
	start func(t *testing.T) *testServer
	// stored says whether a log record of the Run named run (whose UID is
	// uid) is in storage; the server is stopped for the embedded backend,
	// whose file it locks.
	stored func(t *testing.T, run string, uid types.UID, attempt int32) bool
}

// TestRunLogKeptOnEveryBackend hands a log over as runtimed does and reads
// it back through runs/log on both storage backends.
func TestRunLogKeptOnEveryBackend(t *testing.T) {
	dir := t.TempDir()
	cfg := testserver.NewTestConfig(t)
	etcd := testserver.RunEtcd(t, cfg)
	backends := map[string]logBackend{
		"embedded": {
			start: func(t *testing.T) *testServer { return startServer(t, dir) },
			stored: func(t *testing.T, run string, uid types.UID, attempt int32) bool {
				backend, err := embedded.Open(dir, embedded.Options{})
				require.NoError(t, err)
				defer backend.Close()
				store, err := logstore.NewStore(backend.RESTOptionsGetter(*storagebackend.NewDefaultConfig("/registry/kruntimes.io", apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion))), logstore.Limits{})
				require.NoError(t, err)
				defer store.Destroy()
				record, err := store.Get(context.Background(), namespace, run, uid, attempt)
				require.NoError(t, err)
				return record != nil
			},
		},
		"etcd3": {
			start: func(t *testing.T) *testServer {
				return startServer(t, "", "--storage-backend=etcd3", "--etcd-servers="+strings.Join(etcd.Endpoints(), ","))
			},
			stored: func(t *testing.T, run string, _ types.UID, attempt int32) bool {
				resp, err := etcd.KV.Get(context.Background(), "/registry/kruntimes.io/kruntimes.io/runlogs/"+namespace+"/"+run+"/"+strconv.Itoa(int(attempt)), clientv3.WithCountOnly())
				require.NoError(t, err)
				return resp.Count > 0
			},
		},
	}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) { testRunLog(t, b) })
	}
}

func testRunLog(t *testing.T, b logBackend) {
	ctx := context.Background()
	s := b.start(t)
	runs := s.client.KruntimesV1alpha1().Runs(namespace)
	run, err := runs.Create(ctx, taskRun("printer"), metav1.CreateOptions{})
	require.NoError(t, err)
	logPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/printer/log"

	// Not started: an empty 200.
	code, body := s.raw(t, http.MethodGet, logPath, "", nil, nil)
	assert.Equal(t, http.StatusOK, code, string(body))
	assert.Empty(t, body)

	for _, step := range steps(scheduled, running) {
		step(&run.Status)
		run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	const t0 = int64(1767323045000000000) // 2026-01-02T03:04:05Z
	// In protobuf, as runtimed hands a log over.
	pb, err := versioned.NewForConfig(preferProtobuf(s.config))
	require.NoError(t, err)
	err = pb.KruntimesV1alpha1().Runs(namespace).SaveLog(ctx, "printer", 1, &v1alpha1.RunLog{Chunks: []v1alpha1.RunLogChunk{
		{Stream: v1alpha1.RunLogStreamStdout, UnixNano: t0, Data: []byte("one\n")},
		{Stream: v1alpha1.RunLogStreamStderr, UnixNano: t0 + 1000, Data: []byte("\xff\x00\x1b[31m\n")},
		{Stream: v1alpha1.RunLogStreamStdout, UnixNano: t0 + 2000, Data: []byte("three\n")},
	}})
	require.NoError(t, err)
	run.Status.Phase = lifecycle.Succeeded
	run.Status.ExitCode = ptr[int32](0)
	_, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
	require.NoError(t, err)

	get := func(t *testing.T, s *testServer, opts *v1alpha1.RunLogOptions) string {
		t.Helper()
		b, err := s.client.KruntimesV1alpha1().Runs(namespace).GetLogs("printer", opts).DoRaw(ctx)
		require.NoError(t, err)
		return string(b)
	}
	check := func(t *testing.T, s *testServer) {
		assert.Equal(t, "one\n\xff\x00\x1b[31m\nthree\n", get(t, s, &v1alpha1.RunLogOptions{}), "both streams in write order, bytes exact")
		assert.Equal(t, "one\nthree\n", get(t, s, &v1alpha1.RunLogOptions{Stream: string(v1alpha1.RunLogStreamStdout)}))
		assert.Equal(t, "\xff\x00\x1b[31m\n", get(t, s, &v1alpha1.RunLogOptions{Stream: string(v1alpha1.RunLogStreamStderr)}))
		assert.Equal(t, "three\n", get(t, s, &v1alpha1.RunLogOptions{TailLines: ptr[int64](1)}))
		assert.Equal(t, "one", get(t, s, &v1alpha1.RunLogOptions{LimitBytes: ptr[int64](3)}))
		assert.Equal(t, "2026-01-02T03:04:05Z one\n", get(t, s, &v1alpha1.RunLogOptions{Timestamps: true, LimitBytes: ptr[int64](25)}))
		assert.Equal(t, "one\n\xff\x00\x1b[31m\nthree\n", get(t, s, &v1alpha1.RunLogOptions{Attempt: ptr[int32](1)}))
	}
	check(t, s)

	// An attempt that wrote nothing: runtimed saves no log for it, and
	// its log reads as an empty 200 all the same, follow or not, before
	// and after a restart, with no record in storage. Nothing of the read
	// asks for the Pod, which is gone by then in a cluster.
	silent, err := runs.Create(ctx, taskRun("silent"), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, step := range steps(scheduled, running, succeeded) {
		step(&silent.Status)
		silent, err = runs.UpdateStatus(ctx, silent, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	checkSilent := func(t *testing.T, s *testServer) {
		t.Helper()
		for _, opts := range []*v1alpha1.RunLogOptions{{}, {Attempt: ptr[int32](1)}, {Follow: true}, {TailLines: ptr[int64](1)}} {
			b, err := s.client.KruntimesV1alpha1().Runs(namespace).GetLogs("silent", opts).DoRaw(ctx)
			require.NoError(t, err, "%+v", opts)
			assert.Empty(t, b, "%+v", opts)
		}
	}
	checkSilent(t, s)

	t.Run("answers", func(t *testing.T) {
		code, body := s.raw(t, http.MethodGet, logPath, "", nil, nil)
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "one\n\xff\x00\x1b[31m\nthree\n", string(body))
		code, body = s.raw(t, http.MethodGet, logPath+"?attempt=2", "", nil, nil)
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Contains(t, string(body), "attempt 1 exists")
		for _, q := range []string{"tailLines=-1", "limitBytes=0", "attempt=0", "stream=Both"} {
			code, body = s.raw(t, http.MethodGet, logPath+"?"+q, "", nil, nil)
			assert.Equal(t, http.StatusUnprocessableEntity, code, "%s: %s", q, body)
		}
		code, _ = s.raw(t, http.MethodGet, "/apis/kruntimes.io/v1alpha1/namespaces/"+namespace+"/runs/absent/log", "", nil, nil)
		assert.Equal(t, http.StatusNotFound, code)
		_, err := runs.Create(ctx, functionRun("fn"), metav1.CreateOptions{})
		require.NoError(t, err)
		code, _ = s.raw(t, http.MethodGet, "/apis/kruntimes.io/v1alpha1/namespaces/"+namespace+"/runs/fn/log", "", nil, nil)
		assert.Equal(t, http.StatusBadRequest, code, "a function Run has no kept log")
	})

	t.Run("hand-overs", func(t *testing.T) {
		handed, err := runs.Create(ctx, taskRun("handed"), metav1.CreateOptions{})
		require.NoError(t, err)
		for _, step := range steps(scheduled, running) {
			step(&handed.Status)
			handed, err = runs.UpdateStatus(ctx, handed, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		handPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/handed/log?attempt=1"
		code, body := s.raw(t, http.MethodPost, handPath, "text/plain", []byte("hi\n"), nil)
		assert.Equal(t, http.StatusUnsupportedMediaType, code, "a body that is not a RunLog: %s", body)
		code, body = s.raw(t, http.MethodPost, handPath, "application/json", []byte(`{"chunks":[`), nil)
		assert.Equal(t, http.StatusBadRequest, code, "a RunLog cut short: %s", body)
		assert.Contains(t, string(body), "decode the RunLog")
		code, body = s.raw(t, http.MethodPost, handPath, "application/json", []byte(`{"apiVersion":"v1","kind":"Pod"}`), nil)
		assert.Equal(t, http.StatusBadRequest, code, "another kind: %s", body)
		// In JSON without apiVersion and kind, as the runtimed of the
		// release before sent it.
		code, body = s.raw(t, http.MethodPost, handPath, "application/json", []byte(`{"chunks":[{"stream":"Stdout","unixNano":1,"data":"aGkK"}]}`), nil)
		require.Equal(t, http.StatusCreated, code, string(body))
		code, body = s.raw(t, http.MethodGet, "/apis/kruntimes.io/v1alpha1/namespaces/"+namespace+"/runs/handed/log?attempt=1", "", nil, nil)
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "hi\n", string(body))
	})

	// A task retried twelve times keeps the logs of its last ten attempts.
	retried, err := runs.Create(ctx, taskRun("retried"), metav1.CreateOptions{})
	require.NoError(t, err)
	for attempt := int32(1); attempt <= 12; attempt++ {
		if attempt > 1 {
			// Recovered: Pending again, one attempt on.
			retried.Status.Phase, retried.Status.Attempt = lifecycle.Pending, attempt
			retried.Status.AssignedPod, retried.Status.AssignedPodUID = "", ""
			retried, err = runs.UpdateStatus(ctx, retried, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		for _, step := range steps(scheduled, running) {
			step(&retried.Status)
			retried, err = runs.UpdateStatus(ctx, retried, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		require.Equal(t, attempt, retried.Status.Attempt)
		require.NoError(t, pb.KruntimesV1alpha1().Runs(namespace).SaveLog(ctx, "retried", attempt, &v1alpha1.RunLog{Chunks: []v1alpha1.RunLogChunk{
			{Stream: v1alpha1.RunLogStreamStdout, UnixNano: t0, Data: []byte(fmt.Sprintf("attempt %d\n", attempt))},
		}}))
	}
	t.Run("the last attempts' logs are kept", func(t *testing.T) {
		retriedPath := "/apis/kruntimes.io/v1alpha1/namespaces/" + namespace + "/runs/retried/log?attempt="
		for attempt := 1; attempt <= 12-runregistry.KeptAttempts; attempt++ {
			code, body := s.raw(t, http.MethodGet, retriedPath+strconv.Itoa(attempt), "", nil, nil)
			assert.Equal(t, http.StatusGone, code, "attempt %d: %s", attempt, body)
			assert.Contains(t, string(body), "only the last 10 attempts' logs are (attempts 3 to 12)")
		}
		for attempt := 12 - runregistry.KeptAttempts + 1; attempt <= 12; attempt++ {
			code, body := s.raw(t, http.MethodGet, retriedPath+strconv.Itoa(attempt), "", nil, nil)
			assert.Equal(t, http.StatusOK, code, "attempt %d: %s", attempt, body)
			assert.Equal(t, fmt.Sprintf("attempt %d\n", attempt), string(body))
		}
	})

	t.Run("a list of Runs carries no log", func(t *testing.T) {
		code, body := s.raw(t, http.MethodGet, "/apis/kruntimes.io/v1alpha1/namespaces/"+namespace+"/runs", "", nil, nil)
		require.Equal(t, http.StatusOK, code)
		assert.NotContains(t, string(body), "three")
	})

	// Served after a restart; the record is in storage, outside the Run.
	s.stop()
	require.True(t, b.stored(t, "printer", run.UID, 1), "the log is kept in storage")
	assert.False(t, b.stored(t, "silent", silent.UID, 1), "a silent attempt has no log record")
	assert.False(t, b.stored(t, "retried", retried.UID, 12-runregistry.KeptAttempts), "the log of an attempt past the last ones kept is deleted")
	assert.True(t, b.stored(t, "retried", retried.UID, 12-runregistry.KeptAttempts+1), "the oldest log kept is in storage")
	s = b.start(t)
	check(t, s)
	checkSilent(t, s)

	require.NoError(t, s.client.KruntimesV1alpha1().Runs(namespace).Delete(ctx, "printer", metav1.DeleteOptions{}))
	s.stop()
	assert.False(t, b.stored(t, "printer", run.UID, 1), "the log is gone from storage with its Run")
}

// TestRunLogNamespaceLimit: past --max-log-bytes-per-namespace a hand-over
// still succeeds, with a Warning, and the log is kept cut around a marker
// that says why; the logs kept before stay whole, and a deleted Run's
// bytes make room again. On both backends.
func TestRunLogNamespaceLimit(t *testing.T) {
	cfg := testserver.NewTestConfig(t)
	etcd := testserver.RunEtcd(t, cfg)
	const limit = "--max-log-bytes-per-namespace=8192"
	for name, start := range map[string]func(t *testing.T) *testServer{
		"embedded": func(t *testing.T) *testServer { return startServer(t, "", limit) },
		"etcd3": func(t *testing.T) *testServer {
			return startServer(t, "", limit, "--storage-backend=etcd3", "--etcd-servers="+strings.Join(etcd.Endpoints(), ","), "--etcd-prefix=/limit")
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := start(t)
			runs := s.client.KruntimesV1alpha1().Runs(namespace)
			running := func(name string) {
				run, err := runs.Create(ctx, taskRun(name), metav1.CreateOptions{})
				require.NoError(t, err)
				for _, step := range steps(scheduled, running) {
					step(&run.Status)
					run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
					require.NoError(t, err)
				}
			}
			handOver := func(name string, data string) (int, string) {
				body := fmt.Sprintf(`{"chunks":[{"stream":"Stdout","unixNano":1,"data":%q}]}`, base64.StdEncoding.EncodeToString([]byte(data)))
				httpClient, err := rest.HTTPClientFor(s.config)
				require.NoError(t, err)
				resp, err := httpClient.Post(s.config.Host+"/apis/kruntimes.io/v1alpha1/namespaces/"+namespace+"/runs/"+name+"/log?attempt=1", "application/json", strings.NewReader(body))
				require.NoError(t, err)
				defer resp.Body.Close()
				return resp.StatusCode, resp.Header.Get("Warning")
			}
			read := func(name string) string {
				b, err := runs.GetLogs(name, &v1alpha1.RunLogOptions{}).DoRaw(ctx)
				require.NoError(t, err)
				return string(b)
			}
			first := strings.Repeat("1", 5000) + "\n"
			running("first")
			code, warning := handOver("first", first)
			require.Equal(t, http.StatusCreated, code)
			assert.Empty(t, warning, "within the limit")

			second := strings.Repeat("2", 2000) + "\n" + strings.Repeat("3", 3000) + "\n"
			running("second")
			code, warning = handOver("second", second)
			require.Equal(t, http.StatusCreated, code, "over the limit the hand-over succeeds all the same")
			assert.Contains(t, warning, "holds its limit of 8192 bytes of kept logs")
			got := read("second")
			head, tail, found := strings.Cut(got, "[kruntimes: ")
			require.True(t, found, "a marker line: %q", got)
			marker, tail, _ := strings.Cut(tail, "\n")
			assert.Contains(t, marker, "its namespace held its limit of kept-log bytes")
			// The marker starts a line of its own: a head cut mid-line
			// is ended for it.
			head = strings.TrimSuffix(head, "\n")
			assert.True(t, strings.HasPrefix(second, head), "the first bytes are kept")
			assert.True(t, strings.HasSuffix(second, tail), "the last bytes are kept")
			dropped := len(second) - len(head) - len(tail)
			assert.Contains(t, marker, fmt.Sprintf("%d bytes of this log were dropped here", dropped), "every byte not kept is told")
			assert.LessOrEqual(t, len(first)+len(head)+len(tail), 8192)
			assert.Equal(t, first, read("first"), "a log kept before stays whole")

			require.NoError(t, runs.Delete(ctx, "first", metav1.DeleteOptions{}))
			running("third")
			code, warning = handOver("third", first)
			require.Equal(t, http.StatusCreated, code)
			assert.Empty(t, warning, "a deleted Run's bytes make room")
			assert.Equal(t, first, read("third"))
		})
	}
}

// TestRunLogOrphansSwept: a log record whose Run is gone (a crash between
// the Run's delete and its hook) is deleted by the sweep kruntimes-apiserver
// runs at start, and the record of a Run that stays is not.
func TestRunLogOrphansSwept(t *testing.T) {
	ctx := context.Background()
	cfg := testserver.NewTestConfig(t)
	etcd := testserver.RunEtcd(t, cfg)
	args := []string{"--storage-backend=etcd3", "--etcd-servers=" + strings.Join(etcd.Endpoints(), ",")}
	s := startServer(t, "", args...)
	runs := s.client.KruntimesV1alpha1().Runs(namespace)
	run, err := runs.Create(ctx, taskRun("stays"), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, step := range steps(scheduled, running) {
		step(&run.Status)
		run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	require.NoError(t, runs.SaveLog(ctx, "stays", 1, &v1alpha1.RunLog{Chunks: []v1alpha1.RunLogChunk{{Stream: v1alpha1.RunLogStreamStdout, UnixNano: 1, Data: []byte("kept\n")}}}))
	s.stop()

	// Left behind by a Run that no longer exists, as the server keeps it.
	config := storagebackend.NewDefaultConfig("/registry/kruntimes.io", apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion))
	config.Transport.ServerList = etcd.Endpoints()
	store, err := logstore.NewStore(etcdRESTOptions{config: *config}, logstore.Limits{})
	require.NoError(t, err)
	defer store.Destroy()
	orphan := &kruntimes.RunLog{Chunks: []kruntimes.RunLogChunk{{Stream: kruntimes.RunLogStreamStdout, UnixNano: 1, Data: []byte("orphan\n")}}}
	_, err = store.Save(ctx, namespace, "gone", "uid-gone", 1, orphan)
	require.NoError(t, err)
	stored := func(key string) bool {
		resp, err := etcd.KV.Get(ctx, "/registry/kruntimes.io/kruntimes.io/runlogs/"+namespace+"/"+key, clientv3.WithCountOnly())
		require.NoError(t, err)
		return resp.Count > 0
	}
	require.True(t, stored("gone/1"))

	s = startServer(t, "", args...)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return !stored("gone/1"), nil
	}), "the orphan is swept")
	assert.True(t, stored("stays/1"), "the log of a Run that stays is kept")
	b, err := s.client.KruntimesV1alpha1().Runs(namespace).GetLogs("stays", &v1alpha1.RunLogOptions{}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Equal(t, "kept\n", string(b))
	used, err := store.Usage(ctx, namespace)
	require.NoError(t, err)
	assert.Equal(t, int64(len("kept\n"))+logstore.ChunkOverhead, used, "the namespace counts the bytes of the log that stays, not the orphan's")
}

// etcdRESTOptions is the etcd3 backend without a watch cache, as the log
// store gets it from kruntimes-apiserver.
type etcdRESTOptions struct{ config storagebackend.Config }

func (g etcdRESTOptions) GetRESTOptions(gr schema.GroupResource, _ k8sruntime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{StorageConfig: g.config.ForResource(gr), Decorator: generic.UndecoratedStorage, ResourcePrefix: gr.Group + "/" + gr.Resource}, nil
}

// TestRunLogCutIsAnEvent: a hand-over kept cut at the namespace's limit
// leaves a Warning Event LogCut on its Run, naming the limit and its flag,
// where kubectl describe run shows it; one kept whole leaves none.
func TestRunLogCutIsAnEvent(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	s := startInvokeServerWith(t, func(c *apiserver.Config) { c.Events = kube.CoreV1() }, "--max-log-bytes-per-namespace=8192")
	client, err := versioned.NewForConfig(s.config)
	require.NoError(t, err)
	runs := client.KruntimesV1alpha1().Runs(namespace)
	handOver := func(name, data string) *v1alpha1.Run {
		run, err := runs.Create(ctx, taskRun(name), metav1.CreateOptions{})
		require.NoError(t, err)
		for _, step := range steps(scheduled, running) {
			step(&run.Status)
			run, err = runs.UpdateStatus(ctx, run, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		require.NoError(t, runs.SaveLog(ctx, name, 1, &v1alpha1.RunLog{Chunks: []v1alpha1.RunLogChunk{{Stream: v1alpha1.RunLogStreamStdout, UnixNano: 1, Data: []byte(data)}}}))
		return run
	}
	whole := handOver("whole", strings.Repeat("1", 5000)+"\n")
	cut := handOver("cut", strings.Repeat("2", 5000)+"\n")

	var event corev1.Event
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID == cut.UID {
				event = e
				return true, nil
			}
		}
		return false, nil
	}), "an Event on the Run whose log was cut")
	assert.Equal(t, corev1.EventTypeWarning, event.Type)
	assert.Equal(t, lifecycle.ReasonLogCut, event.Reason)
	assert.Contains(t, event.Message, "holds its limit of 8192 bytes of kept logs")
	assert.Contains(t, event.Message, "--max-log-bytes-per-namespace")
	assert.Equal(t, corev1.ObjectReference{
		APIVersion: "kruntimes.io/v1alpha1", Kind: "Run", Namespace: namespace, Name: "cut", UID: cut.UID, ResourceVersion: cut.ResourceVersion,
	}, event.InvolvedObject, "kubectl describe run finds it by kind, name and UID")
	assert.Equal(t, "kruntimes-apiserver", event.Source.Component)

	list, err := kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, e := range list.Items {
		assert.NotEqual(t, whole.UID, e.InvolvedObject.UID, "a log kept whole: no Event")
	}
}
