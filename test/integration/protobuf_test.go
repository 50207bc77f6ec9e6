package integration

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/client-go/rest"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	"kruntimes.io/kruntimes/registry/storage/embedded"
)

// protobufMagic prefixes every Kubernetes protobuf envelope, on the wire and
// in storage.
var protobufMagic = []byte("k8s\x00")

// exchange is one HTTP request a client made and the content types of its
// body and of the response.
type exchange struct {
	method, path, requestType, responseType string
}

// recordingTransport records the exchanges of a client.
type recordingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []exchange
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	r.mu.Lock()
	r.seen = append(r.seen, exchange{req.Method, req.URL.Path, req.Header.Get("Content-Type"), resp.Header.Get("Content-Type")})
	r.mu.Unlock()
	return resp, nil
}

func (r *recordingTransport) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.seen...)
}

// fullRun is a Run with every field the API lets a client set.
func fullRun(name string) *v1alpha1.Run {
	run := taskRun(name)
	run.Labels = map[string]string{"team": "a"}
	run.Annotations = map[string]string{"note": "protobuf"}
	run.Spec.Mode.Task.Entrypoint = "/bin/bash"
	run.Spec.Mode.Task.Args = []string{"-c", "echo hi"}
	run.Spec.Timeout = &metav1.Duration{Duration: 90 * time.Second}
	run.Spec.RetryPolicy = &v1alpha1.RetryPolicy{
		MaxAttempts: 3,
		Backoff: &v1alpha1.RetryBackoff{
			Initial: &metav1.Duration{Duration: time.Second},
			Max:     &metav1.Duration{Duration: time.Minute},
			Factor:  "1.5",
		},
		RetryableReasons: []string{lifecycle.ReasonExecutionLost},
	}
	run.Spec.TTLSecondsAfterFinished = ptr[int32](600)
	return run
}

// TestProtobufClient: a client preferring protobuf creates, gets, lists,
// watches and updates the status of Runs and Runtimes, every response is
// protobuf, and the objects are exactly those a JSON client sees.
func TestProtobufClient(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *testServer) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		recorder := &recordingTransport{}
		config := preferProtobuf(s.config)
		config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			recorder.next = rt
			return recorder
		})
		pb, err := versioned.NewForConfig(config)
		require.NoError(t, err)
		runs := pb.KruntimesV1alpha1().Runs(namespace)
		jsonRuns := s.client.KruntimesV1alpha1().Runs(namespace)

		w, err := runs.Watch(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		defer w.Stop()

		created, err := runs.Create(ctx, fullRun("proto"), metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, lifecycle.Pending, created.Status.Phase)
		assert.Equal(t, "1.5", created.Spec.RetryPolicy.Backoff.Factor)

		got, err := runs.Get(ctx, "proto", metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, apiequality.Semantic.DeepEqual(created, got), "get differs from create")

		// Through runs/status to a final status with every field.
		updated := got
		final := func(s *v1alpha1.RunStatus) {
			succeeded(s)
			s.Message = "done"
			s.Outputs = map[string]string{"answer": "42", "empty": ""}
			s.Conditions = []metav1.Condition{{
				Type: "Finished", Status: metav1.ConditionTrue, Reason: "Exited", Message: "exit 0",
				LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), ObservedGeneration: 1,
			}}
		}
		for _, step := range steps(scheduled, running, final) {
			sent := updated.DeepCopy()
			step(&sent.Status)
			updated, err = runs.UpdateStatus(ctx, sent, metav1.UpdateOptions{})
			require.NoError(t, err)
			// Timestamps are stored with microsecond precision.
			for _, ts := range []**metav1.MicroTime{&sent.Status.ScheduledTime, &sent.Status.StartTime, &sent.Status.CompletionTime} {
				if *ts != nil {
					*ts = ptr(metav1.NewMicroTime((*ts).Truncate(time.Microsecond)))
				}
			}
			assert.True(t, apiequality.Semantic.DeepEqual(sent.Status, updated.Status), "status changed on the way: %s", cmp.Diff(sent.Status, updated.Status))
		}
		assert.Equal(t, lifecycle.Succeeded, updated.Status.Phase)
		assert.Equal(t, "42", updated.Status.Outputs["answer"])

		list, err := runs.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.Len(t, list.Items, 1)
		assert.True(t, apiequality.Semantic.DeepEqual(*updated, list.Items[0]), "list differs from the status update")

		viaJSON, err := jsonRuns.Get(ctx, "proto", metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, apiequality.Semantic.DeepEqual(updated, viaJSON), "the JSON client sees another object")

		// The watch delivers the create and the three status updates, decoded.
		var events []watch.Event
		timeout := time.After(10 * time.Second)
		for len(events) < 4 {
			select {
			case ev, ok := <-w.ResultChan():
				require.True(t, ok, "watch closed")
				events = append(events, ev)
			case <-timeout:
				t.Fatalf("got %d watch events, want 4", len(events))
			}
		}
		assert.Equal(t, watch.Added, events[0].Type)
		assert.True(t, apiequality.Semantic.DeepEqual(created, events[0].Object), "ADDED differs from create")
		assert.Equal(t, watch.Modified, events[3].Type)
		assert.True(t, apiequality.Semantic.DeepEqual(updated, events[3].Object), "last MODIFIED differs from the last status update")

		// A Runtime, whose template embeds core/v1 types.
		runtimes := pb.KruntimesV1alpha1().Runtimes(namespace)
		rt := bashRuntime("bash")
		rt.Spec.Template.Labels = map[string]string{"app": "bash"}
		rt.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
		createdRT, err := runtimes.Create(ctx, rt, metav1.CreateOptions{})
		require.NoError(t, err)
		createdRT.Status.Replicas, createdRT.Status.ReadyReplicas, createdRT.Status.ObservedGeneration = 1, 1, createdRT.Generation
		updatedRT, err := runtimes.UpdateStatus(ctx, createdRT, metav1.UpdateOptions{})
		require.NoError(t, err)
		rtList, err := runtimes.List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.Len(t, rtList.Items, 1)
		assert.True(t, apiequality.Semantic.DeepEqual(*updatedRT, rtList.Items[0]))
		rtViaJSON, err := s.client.KruntimesV1alpha1().Runtimes(namespace).Get(ctx, "bash", metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, apiequality.Semantic.DeepEqual(updatedRT, rtViaJSON), "the JSON client sees another Runtime")

		// Every body went out and came back as protobuf.
		exchanges := recorder.exchanges()
		require.GreaterOrEqual(t, len(exchanges), 10)
		for _, e := range exchanges {
			assert.True(t, strings.HasPrefix(e.responseType, runtime.ContentTypeProtobuf),
				"%s %s answered %q", e.method, e.path, e.responseType)
			if e.method == http.MethodPost || e.method == http.MethodPut {
				assert.Equal(t, runtime.ContentTypeProtobuf, e.requestType, "%s %s sent", e.method, e.path)
			}
		}
	})
}

// TestJSONStorageStaysReadable: objects stored as JSON (the encoding before
// protobuf became the default, or --storage-media-type=application/json)
// are read back by a server storing protobuf, and an update rewrites them as
// protobuf.
func TestJSONStorageStaysReadable(t *testing.T) {
	type backend struct {
		start func(t *testing.T, args ...string) *testServer
		// stored returns every value the backend holds for kruntimes.io.
		stored func(t *testing.T) [][]byte
	}
	backends := map[string]func(t *testing.T) backend{
		"embedded": func(t *testing.T) backend {
			dir := t.TempDir()
			return backend{
				start: func(t *testing.T, args ...string) *testServer { return startServer(t, dir, args...) },
				// The data file, whole: the values are stored untransformed.
				stored: func(t *testing.T) [][]byte {
					data, err := os.ReadFile(filepath.Join(dir, embedded.DataFileName))
					require.NoError(t, err)
					return [][]byte{data}
				},
			}
		},
		"etcd3": func(t *testing.T) backend {
			cfg := testserver.NewTestConfig(t)
			etcd := testserver.RunEtcd(t, cfg)
			return backend{
				start: func(t *testing.T, args ...string) *testServer {
					return startServer(t, "", append([]string{"--storage-backend=etcd3",
						"--etcd-servers=" + strings.Join(etcd.Endpoints(), ",")}, args...)...)
				},
				stored: func(t *testing.T) [][]byte {
					resp, err := etcd.Client.Get(context.Background(), "/registry/kruntimes.io/", clientv3.WithPrefix())
					require.NoError(t, err)
					var values [][]byte
					for _, kv := range resp.Kvs {
						values = append(values, kv.Value)
					}
					return values
				},
			}
		},
	}
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b := newBackend(t)

			s := b.start(t, "--storage-media-type=application/json")
			runs := s.client.KruntimesV1alpha1().Runs(namespace)
			untouched, err := runs.Create(ctx, fullRun("untouched"), metav1.CreateOptions{})
			require.NoError(t, err)
			toUpdate, err := runs.Create(ctx, taskRun("updated"), metav1.CreateOptions{})
			require.NoError(t, err)
			scheduled(&toUpdate.Status)
			toUpdate, err = runs.UpdateStatus(ctx, toUpdate, metav1.UpdateOptions{})
			require.NoError(t, err)
			rt, err := s.client.KruntimesV1alpha1().Runtimes(namespace).Create(ctx, bashRuntime("bash"), metav1.CreateOptions{})
			require.NoError(t, err)
			s.stop()
			values := b.stored(t)
			require.NotEmpty(t, values)
			for _, v := range values {
				require.False(t, bytes.Contains(v, protobufMagic), "stored protobuf with --storage-media-type=application/json")
				if name == "etcd3" {
					require.True(t, bytes.HasPrefix(v, []byte("{")), "not JSON: %q", v)
				}
			}

			// The default stores protobuf and reads the JSON.
			s = b.start(t)
			runs = s.client.KruntimesV1alpha1().Runs(namespace)
			got, err := runs.Get(ctx, "untouched", metav1.GetOptions{})
			require.NoError(t, err)
			assert.True(t, apiequality.Semantic.DeepEqual(untouched, got), "the JSON-stored Run reads back changed")
			gotRT, err := s.client.KruntimesV1alpha1().Runtimes(namespace).Get(ctx, "bash", metav1.GetOptions{})
			require.NoError(t, err)
			assert.True(t, apiequality.Semantic.DeepEqual(rt, gotRT), "the JSON-stored Runtime reads back changed")
			list, err := runs.List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			require.Len(t, list.Items, 2)

			got, err = runs.Get(ctx, "updated", metav1.GetOptions{})
			require.NoError(t, err)
			assert.True(t, apiequality.Semantic.DeepEqual(toUpdate, got))
			running(&got.Status)
			updated, err := runs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
			require.NoError(t, err)
			assert.Equal(t, lifecycle.Running, updated.Status.Phase)
			s.stop()
			protobufValues := 0
			for _, v := range b.stored(t) {
				if bytes.HasPrefix(v, protobufMagic) || (name == "embedded" && bytes.Contains(v, protobufMagic)) {
					protobufValues++
				}
			}
			assert.NotZero(t, protobufValues, "the update was not stored as protobuf")

			// Both encodings side by side read back after another restart.
			s = b.start(t)
			runs = s.client.KruntimesV1alpha1().Runs(namespace)
			got, err = runs.Get(ctx, "updated", metav1.GetOptions{})
			require.NoError(t, err)
			assert.True(t, apiequality.Semantic.DeepEqual(updated, got))
			got, err = runs.Get(ctx, "untouched", metav1.GetOptions{})
			require.NoError(t, err)
			assert.True(t, apiequality.Semantic.DeepEqual(untouched, got))
		})
	}
}

// preferProtobuf returns a copy of c whose typed clients send and ask for
// protobuf, falling back to JSON, as kruntimes' own components do.
func preferProtobuf(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}
