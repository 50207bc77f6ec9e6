package functions

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/lifecycle"
	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
	"kruntimes.io/kruntimes/runtimed/metrics"
)

// listTimeout bounds one ListFunctions call.
const listTimeout = 5 * time.Second

// sweepTimeout bounds the wait for the Runtime Server's first answer at
// start; past it, the sweep is skipped and adoption waits for the watch.
const sweepTimeout = 20 * time.Second

// watchRegistrations lists every registration once per interval and wakes
// the Runs whose registration was lost or whose idle deadline moved: the
// cost is one call per tick, however many functions this Pod holds.
func (c *Controller) watchRegistrations(ctx context.Context) {
	ticker := c.clock.NewTicker(c.watchInterval)
	defer ticker.Stop()
	for {
		c.listRegistrations(ctx)
		c.watching.Progress()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// listRegistrations refreshes the view and enqueues what changed; it
// reports whether the Runtime Server answered.
func (c *Controller) listRegistrations(ctx context.Context) bool {
	listedAt := c.clock.Now()
	rpcCtx, cancel := context.WithTimeout(ctx, listTimeout)
	resp, err := c.runtimeServer.ListFunctions(rpcCtx, &runtimev1.ListFunctionsRequest{})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			countRPCError("ListFunctions", err)
			klog.FromContext(ctx).V(2).Info("Listing the Runtime Server's registrations failed; keeping the last answer", "err", err)
		}
		return false
	}
	byUID := make(map[types.UID]*runtimev1.RegistrationStatus, len(resp.GetRegistrations()))
	for _, st := range resp.GetRegistrations() {
		byUID[types.UID(st.GetRunUid())] = st
	}
	var lost, idleMoved []*registration
	c.mu.Lock()
	c.view = serverView{listedAt: listedAt, registrations: byUID}
	for _, reg := range c.regs {
		if reg.id == "" || !listedAt.After(reg.registeredAt) {
			continue
		}
		st := byUID[reg.uid]
		if st == nil || st.GetRegistrationId() != reg.id || st.GetState() == runtimev1.FunctionState_FUNCTION_STATE_FAILED {
			lost = append(lost, reg)
			continue
		}
		var deadline time.Time
		if ns := st.GetIdleDeadlineUnixNano(); ns != 0 {
			deadline = time.Unix(0, ns)
		}
		if !deadline.Equal(reg.idleDeadline) {
			reg.idleDeadline = deadline
			if !deadline.IsZero() {
				idleMoved = append(idleMoved, reg)
			}
		}
	}
	c.mu.Unlock()
	for _, reg := range lost {
		c.queue.Add(reg.key)
	}
	for _, reg := range idleMoved {
		// The workqueue keeps the earliest of several delays for a key.
		c.mu.RLock()
		wait := reg.idleDeadline.Sub(c.clock.Now())
		c.mu.RUnlock()
		c.queue.AddAfter(reg.key, wait)
	}
	return true
}

// sweepOrphans runs once before the first sync: it waits for the Runtime
// Server's first answer, then unregisters every registration that no
// function Run of this Pod holds at its attempt, e.g. one whose Run was
// deleted while runtimed was down.
func (c *Controller) sweepOrphans(ctx context.Context) {
	logger := klog.FromContext(ctx)
	waitCtx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(waitCtx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return c.listRegistrations(ctx), nil
	})
	if err != nil {
		logger.Info("The Runtime Server did not answer ListFunctions; adopting registrations once it does", "timeout", sweepTimeout)
		return
	}
	runs, err := c.lister.Runs(c.pod.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	held := map[types.UID]int32{}
	for _, run := range runs {
		if run.Spec.Mode.Function != nil && run.Status.AssignedPodUID == c.pod.UID &&
			(run.Status.Phase == lifecycle.Running || run.Status.Phase == lifecycle.Ready) && run.DeletionTimestamp == nil {
			held[run.UID] = run.Status.Attempt
		}
	}
	c.mu.RLock()
	view := c.view.registrations
	c.mu.RUnlock()
	for uid, st := range view {
		if attempt, ok := held[uid]; ok && int64(attempt) == st.GetRegistrationAttempt() {
			continue
		}
		if err := c.unregister(ctx, uid, int32(st.GetRegistrationAttempt()), st.GetRegistrationId(), cancelInFlight); err != nil {
			logger.Error(err, "Unregistering a registration no Run holds failed", "runUID", uid)
			continue
		}
		logger.Info("Unregistered a registration no Run of this Pod holds", "runUID", uid, "attempt", st.GetRegistrationAttempt())
	}
}

func countRPCError(rpc string, err error) {
	metrics.RuntimeServerErrors.WithLabelValues(rpc, status.Code(err).String()).Inc()
}

func publishRegistrations(n int) {
	metrics.Registrations.Set(float64(n))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
