package tasks

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

// sweepRetained forgets the executions the Runtime Server retained for
// attempts that no Run of this Pod still runs, e.g. when runtimed stopped
// between writing an outcome and forgetting it, and removes their
// workspaces. Running Runs whose execution is retained are adopted by sync.
// Workspaces that no execution is left for are swept by runtimed's wiring,
// which knows the Runs of both modes.
func (c *Controller) sweepRetained(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	var list *runtimev1.ListResponse
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		list, err = c.runtimeServer.List(ctx, &runtimev1.ListRequest{})
		return err == nil, nil
	})
	if err != nil {
		logger.Info("The Runtime Server did not answer List; skipping the sweep of retained executions", "timeout", adoptTimeout)
		return
	}
	runs, err := c.lister.Runs(c.pod.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	active := map[types.UID]int32{}
	for _, run := range runs {
		if run.Status.AssignedPodUID == c.pod.UID && run.Status.Phase == lifecycle.Running {
			active[run.UID] = run.Status.Attempt
		}
	}
	for _, ts := range list.GetTasks() {
		uid, attempt, ok := runstatus.ParseExecutionID(ts.GetTaskId())
		if !ok {
			continue
		}
		if a, running := active[uid]; running && a == attempt {
			continue
		}
		l := logger.WithValues("runUID", uid, "attempt", attempt, "executionID", ts.GetTaskId())
		if _, err := c.runtimeServer.Cancel(ctx, &runtimev1.CancelRequest{TaskId: ts.GetTaskId()}); err != nil {
			l.Error(err, "Cancelling a retained execution no Run holds failed")
			continue
		}
		if ts.GetState() == runtimev1.TaskState_TASK_STATE_RUNNING {
			waitCtx, cancel := context.WithTimeout(ctx, releaseTimeout)
			_, _ = c.runtimeServer.Wait(waitCtx, &runtimev1.WaitRequest{TaskId: ts.GetTaskId()})
			cancel()
		}
		if _, err := c.runtimeServer.Forget(ctx, &runtimev1.ForgetRequest{TaskId: ts.GetTaskId()}); err != nil {
			l.Error(err, "Forgetting a retained execution no Run holds failed")
			continue
		}
		if _, running := active[uid]; !running {
			if err := c.workspace.Remove(uid); err != nil {
				l.Error(err, "Removing the workspace of a released execution failed")
			}
		}
		l.Info("Forgot retained execution that no Run holds")
	}
}
