package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientretry "k8s.io/client-go/util/retry"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/client/clientset/versioned"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/test/e2e/framework"
	"kruntimes.io/kruntimes/test/localcluster/nodeagent"
)

// sleepingTask is a task Run of runtime that stays Running until its
// timeout, so it stays assigned while the test acts on it.
func sleepingTask(name, runtime string) *v1alpha1.Run {
	run := newTaskRun(name, runtime)
	run.Spec.Source.Inline = "sleep 600"
	run.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Minute}
	return run
}

// runtimePodToken reads the token the node agent projected into pod's
// runtimed container, as a process in that container would.
func runtimePodToken(ctx context.Context, t *testing.T, f *framework.Framework, pod *corev1.Pod) string {
	t.Helper()
	path := filepath.Join(nodeagent.VolumeDir(filepath.Join(f.Cluster.Config().StateDir, "pods"), pod.UID, runtimepod.VolumeRuntimedAPIAccess), "token")
	var token []byte
	err := framework.Poll(ctx, framework.PollInterval, framework.ShortTimeout, func(_ context.Context, seen *framework.Observed) (bool, error) {
		var err error
		token, err = os.ReadFile(path)
		return !seen.Err(err) && len(token) > 0, nil
	})
	require.NoError(t, err, "runtimed's projected token at %s", path)
	return string(token)
}

// refused says whether err is the answer to a request runtimed may not make.
func refused(err error) bool { return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) }

// A Runtime Pod's own token, from its projected volume, reaches only that
// Pod's Runs and Lease through kube-apiserver and aggregation, and only
// for what runtimed does.
func TestRuntimedTokenIsRestrictedToItsPod(t *testing.T) {
	f := framework.Get(t)
	admin := controllersClient(t, f)
	ns := f.CreateNamespace(t, "restrict")
	ctx := framework.Context(t, 5*time.Minute)

	for _, name := range []string{"bash", "other"} {
		_, err := admin.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime(name, 1, 2), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	pod := waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"=bash", "")
	otherPod := waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"=other", "")
	createRun(ctx, t, admin, ns, sleepingTask("mine", "bash"))
	createRun(ctx, t, admin, ns, sleepingTask("theirs", "other"))
	mine := waitForRun(ctx, t, admin, ns, "mine", functionTimeout, "Running", inPhase(lifecycle.Running))
	theirs := waitForRun(ctx, t, admin, ns, "theirs", functionTimeout, "Running", inPhase(lifecycle.Running))
	require.Equal(t, pod.UID, mine.Status.AssignedPodUID)
	require.Equal(t, otherPod.UID, theirs.Status.AssignedPodUID)

	config := rest.AnonymousClientConfig(f.AdminConfig)
	config.BearerToken = runtimePodToken(ctx, t, f, pod)
	asPod, err := versioned.NewForConfig(config)
	require.NoError(t, err)
	podRuns := asPod.KruntimesV1alpha1().Runs(ns)
	podKube, err := kubernetes.NewForConfig(config)
	require.NoError(t, err)
	// runtimed selects its Runs by its Pod's name and UID.
	assignedTo := func(p *corev1.Pod) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.SelectorFromSet(fields.Set{
			lifecycle.FieldStatusAssignedPod: p.Name, lifecycle.FieldStatusAssignedPodUID: string(p.UID),
		}).String()}
	}
	// byName alone would let a Pod re-created under a deleted Pod's name
	// list that Pod's Runs.
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector(lifecycle.FieldStatusAssignedPod, pod.Name).String()}

	t.Run("allowed: what runtimed does on its own Runs and Lease", func(t *testing.T) {
		list, err := podRuns.List(ctx, assignedTo(pod))
		require.NoError(t, err, "list with its own Pod's selector")
		require.Len(t, list.Items, 1)
		assert.Equal(t, "mine", list.Items[0].Name)

		w, err := podRuns.Watch(ctx, assignedTo(pod))
		require.NoError(t, err, "watch with its own Pod's selector")
		w.Stop()

		got, err := podRuns.Get(ctx, "mine", metav1.GetOptions{})
		require.NoError(t, err, "get of its own Run")
		_, err = podRuns.UpdateStatus(ctx, got, metav1.UpdateOptions{})
		require.NoError(t, err, "status write of its own Run")

		got, err = podRuns.Get(ctx, "mine", metav1.GetOptions{})
		require.NoError(t, err)
		got.Finalizers = append(got.Finalizers, lifecycle.FinalizerRegistrationCleanup)
		got, err = podRuns.Update(ctx, got, metav1.UpdateOptions{})
		require.NoError(t, err, "adding %s", lifecycle.FinalizerRegistrationCleanup)
		got.Finalizers = nil
		_, err = podRuns.Update(ctx, got, metav1.UpdateOptions{})
		require.NoError(t, err, "removing %s", lifecycle.FinalizerRegistrationCleanup)

		err = clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
			lease, err := podKube.CoordinationV1().Leases(ns).Get(ctx, runtimepod.LeaseName(pod.Name), metav1.GetOptions{})
			require.NoError(t, err)
			_, err = podKube.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{})
			return err
		})
		require.NoError(t, err, "renewing its own Lease")
	})

	t.Run("forbidden: other Pods' Runs and Lease, and what runtimed never does", func(t *testing.T) {
		mutate := func(name string, change func(*v1alpha1.Run)) *v1alpha1.Run {
			run, err := admin.KruntimesV1alpha1().Runs(ns).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			change(run)
			return run
		}
		cases := []struct {
			name string
			do   func() error
		}{
			{"list without the assignedPod selector", func() error {
				_, err := podRuns.List(ctx, metav1.ListOptions{})
				return err
			}},
			{"list with another Pod's selector", func() error {
				_, err := podRuns.List(ctx, assignedTo(otherPod))
				return err
			}},
			{"list by its Pod's name alone, not its UID", func() error {
				_, err := podRuns.List(ctx, byName)
				return err
			}},
			{"watch by its Pod's name alone, not its UID", func() error {
				w, err := podRuns.Watch(ctx, byName)
				if err == nil {
					w.Stop()
				}
				return err
			}},
			{"watch without the assignedPod selector", func() error {
				w, err := podRuns.Watch(ctx, metav1.ListOptions{})
				if err == nil {
					w.Stop()
				}
				return err
			}},
			{"get of another Pod's and Runtime's Run", func() error {
				_, err := podRuns.Get(ctx, "theirs", metav1.GetOptions{})
				return err
			}},
			{"status write of another Pod's and Runtime's Run", func() error {
				_, err := podRuns.UpdateStatus(ctx, mutate("theirs", func(r *v1alpha1.Run) { r.Status.Message = "stolen" }), metav1.UpdateOptions{})
				return err
			}},
			{"moving its own Run to another Pod", func() error {
				_, err := podRuns.UpdateStatus(ctx, mutate("mine", func(r *v1alpha1.Run) {
					r.Status.AssignedPod, r.Status.AssignedPodUID = otherPod.Name, otherPod.UID
				}), metav1.UpdateOptions{})
				return err
			}},
			{"changing spec of its own Run", func() error {
				_, err := podRuns.Update(ctx, mutate("mine", func(r *v1alpha1.Run) { r.Spec.CancelRequested = true }), metav1.UpdateOptions{})
				return err
			}},
			{"adding another finalizer to its own Run", func() error {
				_, err := podRuns.Update(ctx, mutate("mine", func(r *v1alpha1.Run) { r.Finalizers = append(r.Finalizers, "example.com/keep") }), metav1.UpdateOptions{})
				return err
			}},
			{"adding registration-cleanup to another Pod's Run", func() error {
				_, err := podRuns.Update(ctx, mutate("theirs", func(r *v1alpha1.Run) {
					r.Finalizers = append(r.Finalizers, lifecycle.FinalizerRegistrationCleanup)
				}), metav1.UpdateOptions{})
				return err
			}},
			{"deleting its own Run", func() error {
				return podRuns.Delete(ctx, "mine", metav1.DeleteOptions{})
			}},
			{"creating a Run", func() error {
				_, err := podRuns.Create(ctx, sleepingTask("planted", "bash"), metav1.CreateOptions{})
				return err
			}},
			{"reading a Runtime", func() error {
				_, err := asPod.KruntimesV1alpha1().Runtimes(ns).Get(ctx, "bash", metav1.GetOptions{})
				return err
			}},
			{"renewing another Pod's Lease", func() error {
				// That Pod's runtimed renews it too: retry a conflict, which
				// says nothing about who may write it.
				return clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
					lease, err := f.Client.CoordinationV1().Leases(ns).Get(ctx, runtimepod.LeaseName(otherPod.Name), metav1.GetOptions{})
					require.NoError(t, err)
					_, err = podKube.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{})
					return err
				})
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.do()
				require.Error(t, err, "runtimed of Pod %s was allowed to do this", pod.Name)
				assert.True(t, refused(err), "want 403 or 422, got %v", err)
			})
		}
	})

	t.Run("forbidden: runs/log of its own Runs and another Pod's, through aggregation and directly", func(t *testing.T) {
		// runtimed hands a log over (create runs/log) and never reads one:
		// a Runtime Pod runs code of many users. Two finished tasks with a
		// kept log, one on each Pod, besides the two running ones.
		for name, runtime := range map[string]string{"mine-printed": "bash", "theirs-printed": "other"} {
			run := newTaskRun(name, runtime)
			run.Spec.Source.Inline = "echo secret of " + name
			createRun(ctx, t, admin, ns, run)
		}
		minePrinted := waitForRun(ctx, t, admin, ns, "mine-printed", functionTimeout, "Succeeded", inPhase(lifecycle.Succeeded))
		theirsPrinted := waitForRun(ctx, t, admin, ns, "theirs-printed", functionTimeout, "Succeeded", inPhase(lifecycle.Succeeded))
		require.Equal(t, pod.UID, minePrinted.Status.AssignedPodUID)
		require.Equal(t, otherPod.UID, theirsPrinted.Status.AssignedPodUID)
		for _, name := range []string{"mine-printed", "theirs-printed"} {
			got, err := admin.KruntimesV1alpha1().Runs(ns).GetLogs(name, &v1alpha1.RunLogOptions{}).DoRaw(ctx)
			require.NoError(t, err, "the admin reads the kept log of %s", name)
			assert.Equal(t, "secret of "+name+"\n", string(got))
		}

		// Through kube-apiserver, its RBAC refuses (runtimed's Role has
		// create runs/log only); directly, kruntimes-apiserver's runtimed
		// authorizer does.
		direct, err := versioned.NewForConfig(directConfig(f, config.BearerToken))
		require.NoError(t, err)
		for _, way := range []struct {
			name string
			runs typedv1alpha1.RunInterface
			says string
		}{
			{"through aggregation", podRuns, `cannot get resource "runs/log"`},
			{"directly", direct.KruntimesV1alpha1().Runs(ns), "may only create runs/log"},
		} {
			for _, name := range []string{"mine", "mine-printed", "theirs", "theirs-printed"} {
				for _, follow := range []bool{false, true} {
					t.Run(way.name+"/"+name+"/follow="+strconv.FormatBool(follow), func(t *testing.T) {
						req := way.runs.GetLogs(name, &v1alpha1.RunLogOptions{Follow: follow})
						var err error
						if follow {
							var stream io.ReadCloser
							if stream, err = req.Stream(ctx); err == nil {
								_ = stream.Close()
							}
						} else {
							// Error, unlike DoRaw, decodes the Status with its message.
							result := req.Do(ctx)
							got, _ := result.Raw()
							assert.NotContains(t, string(got), "secret")
							err = result.Error()
						}
						require.Error(t, err, "runtimed of Pod %s read the log of %s", pod.Name, name)
						assert.True(t, apierrors.IsForbidden(err), "want 403, got %v", err)
						assert.Contains(t, err.Error(), way.says)
					})
				}
			}
		}
	})

	t.Run("the Runs were not changed", func(t *testing.T) {
		got, err := admin.KruntimesV1alpha1().Runs(ns).Get(ctx, "theirs", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, otherPod.UID, got.Status.AssignedPodUID)
		assert.NotEqual(t, "stolen", got.Status.Message)
		assert.Empty(t, got.Finalizers)
		got, err = admin.KruntimesV1alpha1().Runs(ns).Get(ctx, "mine", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, pod.UID, got.Status.AssignedPodUID)
		assert.False(t, got.Spec.CancelRequested)
		assert.Empty(t, got.Finalizers)
	})
}

// A task, which runs in the Runtime Server's container, finds no Kubernetes
// credentials: no token in its environment or at the usual paths, no
// KUBECONFIG. runtimed alone has the Pod's token.
func TestTaskFindsNoKubernetesCredentials(t *testing.T) {
	f := framework.Get(t)
	admin := controllersClient(t, f)
	ns := f.CreateNamespace(t, "nocreds")
	ctx := framework.Context(t, 5*time.Minute)
	_, err := admin.KruntimesV1alpha1().Runtimes(ns).Create(ctx, newTestRuntime("bash", 1, 2), metav1.CreateOptions{})
	require.NoError(t, err)

	run := newTaskRun("look", "bash")
	run.Spec.Source.Inline = `found=""
[ -n "${KUBECONFIG:-}" ] && found="$found KUBECONFIG"
env | grep -qi -e token -e '^KRUNTIMES_SERVICEACCOUNT_DIR=' && found="$found token-in-env"
for p in /var/run/secrets/kubernetes.io/serviceaccount/token /run/secrets/kubernetes.io/serviceaccount/token "$HOME/.kube/config"; do
  [ -e "$p" ] && found="$found $p"
done
echo "found=${found:-none}" >> "$KRUNTIMES_OUTPUTS"
`
	createRun(ctx, t, admin, ns, run)
	done := waitForRun(ctx, t, admin, ns, "look", functionTimeout, "Succeeded", inPhase(lifecycle.Succeeded))
	assert.Equal(t, "none", done.Status.Outputs["found"])

	pod := waitForReadyPod(ctx, t, f, ns, lifecycle.LabelRuntime+"=bash", "")
	assert.NotEmpty(t, runtimePodToken(ctx, t, f, pod), "runtimed itself has the Pod's token")
}
