package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver"
	logstore "kruntimes.io/kruntimes/registry/runlog"
	"kruntimes.io/kruntimes/registry/storage/embedded"
	"kruntimes.io/kruntimes/test/e2e/framework"
)

// Where kruntimes-apiserver keeps run log records on its embedded storage:
// its default --etcd-prefix, and registry/runlog's resource (keys
// <resource>/<namespace>/<run>/<attempt>).
const (
	storagePrefix = "/registry/kruntimes.io"
	runLogsPrefix = "/kruntimes.io/runlogs"
)

// runLogRecords counts the run log records under each prefix (below
// runLogsPrefix: NAMESPACE or NAMESPACE/RUN) in the embedded storage at
// dir, whatever Run UID they carry. kruntimes-apiserver must be stopped:
// it locks the file.
func runLogRecords(ctx context.Context, dir string, prefixes []string) (map[string]int64, error) {
	backend, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	counts := map[string]int64{}
	for _, p := range prefixes {
		s, err := backend.NewStore(embedded.StoreConfig{
			Codec:          apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion),
			Prefix:         storagePrefix,
			ResourcePrefix: runLogsPrefix + "/" + p,
			GroupResource:  logstore.Resource,
			NewFunc:        func() runtime.Object { return &kruntimes.RunLog{} },
			NewListFunc:    func() runtime.Object { return &metav1.List{} },
		})
		if err != nil {
			return nil, err
		}
		stats, err := s.Stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("counting records under %s: %w", p, err)
		}
		counts[p] = stats.ObjectCount
	}
	return counts, nil
}

// TestRunLogGoesWithItsRun: a task's kept log is removed from
// kruntimes-apiserver's storage — checked in the storage file itself, with
// the server stopped — when its Run is deleted: by a delete, by TTL GC and
// by namespace deletion. A Run re-created under a deleted one's name shows
// none of it, and the log of a Run that stays is served through
// aggregation after the restart.
func TestRunLogGoesWithItsRun(t *testing.T) {
	f := framework.Get(t)
	admin := controllersClient(t, f)
	dataDir := f.Cluster.KruntimesDataDir()
	if dataDir == "" {
		t.Skip("kruntimes-apiserver does not run on embedded storage here")
	}
	ns := f.CreateNamespace(t, "logdel")
	doomedNS := f.CreateNamespace(t, "logdelns")
	ctx := framework.Context(t, 8*time.Minute)

	printing := func(name string, ttl int32) *v1alpha1.Run {
		run := newTaskRun(name, "bash")
		run.Spec.Source.Inline = "echo log of " + name
		if ttl > 0 {
			run.Spec.TTLSecondsAfterFinished = ptr.To(ttl)
		}
		return run
	}
	for _, n := range []string{ns, doomedNS} {
		_, err := admin.KruntimesV1alpha1().Runtimes(n).Create(ctx, newTestRuntime("bash", 1, 4), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// expired is deleted by TTL GC 30 s after it ends: time to read its log.
	runs := []struct {
		ns, name string
		ttl      int32
	}{{ns, "kept", 0}, {ns, "deleted", 0}, {ns, "expired", 30}, {doomedNS, "doomed", 0}}
	for _, r := range runs {
		createRun(ctx, t, admin, r.ns, printing(r.name, r.ttl))
	}
	for _, r := range runs {
		waitForRun(ctx, t, admin, r.ns, r.name, 3*time.Minute, "Succeeded", inPhase(lifecycle.Succeeded))
		got, err := admin.KruntimesV1alpha1().Runs(r.ns).GetLogs(r.name, &v1alpha1.RunLogOptions{}).DoRaw(ctx)
		require.NoError(t, err, "the log of %s/%s", r.ns, r.name)
		require.Equal(t, "log of "+r.name+"\n", string(got), "the log of %s/%s is kept", r.ns, r.name)
	}

	nsRuns := admin.KruntimesV1alpha1().Runs(ns)
	require.NoError(t, nsRuns.Delete(ctx, "deleted", metav1.DeleteOptions{}))
	require.NoError(t, f.Client.CoreV1().Namespaces().Delete(ctx, doomedNS, metav1.DeleteOptions{}))
	gone := func(what string, get func(context.Context) error) {
		err := framework.Poll(ctx, framework.PollInterval, 3*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
			err := get(ctx)
			return apierrors.IsNotFound(err), nil
		})
		require.NoError(t, err, "%s is gone", what)
	}
	gone("the deleted Run", func(ctx context.Context) error { _, err := nsRuns.Get(ctx, "deleted", metav1.GetOptions{}); return err })
	gone("the Run past its TTL", func(ctx context.Context) error { _, err := nsRuns.Get(ctx, "expired", metav1.GetOptions{}); return err })
	gone("the deleted namespace", func(ctx context.Context) error {
		_, err := f.Client.CoreV1().Namespaces().Get(ctx, doomedNS, metav1.GetOptions{})
		return err
	})

	// A Run of the deleted one's name, which never starts (no such
	// Runtime): its log is empty, not the old one.
	again := newTaskRun("deleted", "absent")
	createRun(ctx, t, admin, ns, again)
	got, err := nsRuns.GetLogs("deleted", &v1alpha1.RunLogOptions{}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Empty(t, string(got), "a re-created Run of the name shows nothing of the old log")

	// In the storage file: kept's record, and none of the others'.
	prefixes := []string{ns + "/kept", ns + "/deleted", ns + "/expired", doomedNS}
	var counts map[string]int64
	require.NoError(t, f.Cluster.WithKruntimesReplicaStopped(ctx, 0, func() error {
		var err error
		counts, err = runLogRecords(ctx, dataDir, prefixes)
		return err
	}), "looking into kruntimes-apiserver's storage at %s while it is stopped", dataDir)
	assert.Equal(t, map[string]int64{prefixes[0]: 1, prefixes[1]: 0, prefixes[2]: 0, prefixes[3]: 0}, counts,
		"run log records in storage: kept's stays; the deleted Run's, the expired Run's and the deleted namespace's are gone")

	var kept []byte
	err = framework.Poll(ctx, framework.PollInterval, 2*time.Minute, func(ctx context.Context, seen *framework.Observed) (bool, error) {
		kept, err = nsRuns.GetLogs("kept", &v1alpha1.RunLogOptions{}).DoRaw(ctx)
		return !seen.Err(err), nil
	})
	require.NoError(t, err, "kruntimes-apiserver serves again through aggregation after its restart")
	assert.Equal(t, "log of kept\n", string(kept), "the log is served after kruntimes-apiserver restarted")
}
