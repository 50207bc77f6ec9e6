package functions

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/runtimed/runstatus"
)

// Relocate gives back every function Run this Pod holds because the Pod is
// shutting down gracefully (SIGTERM: a rollout, a drain, an eviction, a
// scale-down). It stops claiming and stops the workers, then, for all Runs
// at once: closes the invoke gate (refusals say the invocation did not
// start, so the apiserver answers 503 with Retry-After), lets the
// invocation in flight finish for up to drain before the Runtime Server
// cancels it, unregisters, and writes the Run back to Pending at the same
// attempt with reason Relocating, for the scheduler to place it on another
// Pod. Nothing of a relocated Run runs here once its Pending status is
// written, so it never executes on two Pods at once.
//
// A Run that was deleted, ended or cancelled meanwhile is finalized as
// usual instead. Relocate returns when every Run is handled or ctx ends;
// what is left then is recovery's, once the Pod is gone (an attempt spent).
func (c *Controller) Relocate(ctx context.Context, drain time.Duration) {
	logger := klog.FromContext(ctx)
	c.slots.Close()
	c.stopWorkOnce.Do(func() { close(c.stopWork) })
	if c.running.Load() {
		select {
		case <-c.workDone:
		case <-ctx.Done():
			logger.Info("The function workers did not stop in time; relocating anyway")
		}
	}
	c.mu.RLock()
	regs := slices.Collect(maps.Values(c.regs))
	c.mu.RUnlock()
	why := fmt.Sprintf("Pod %s (uid %s) is shutting down", c.pod.Name, c.pod.UID)
	logger.Info("Relocating the function Runs of this Pod", "runs", len(regs), "drain", drain)
	var wg sync.WaitGroup
	for _, reg := range regs {
		wg.Go(func() {
			if err := c.relocate(ctx, reg, drain, why); err != nil {
				reg.logger.Error(err, "Relocating the function Run failed; recovery moves it once the Pod is gone")
			}
		})
	}
	wg.Wait()
}

// relocate releases reg with a bounded drain, then gives its Run back.
func (c *Controller) relocate(ctx context.Context, reg *registration, drain time.Duration, why string) error {
	c.mu.RLock()
	attempt := reg.attempt
	c.mu.RUnlock()
	if err := c.release(ctx, reg, unregisterMode{drain: drain}); err != nil {
		return err
	}
	namespace, name, err := cache.SplitMetaNamespaceKey(reg.key)
	if err != nil {
		return err
	}
	run, err := c.lister.Runs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	// The informer copy first; on a conflict, a fresh read.
	return wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: 5}, func(ctx context.Context) (bool, error) {
		err := c.giveBack(ctx, run, reg, attempt, why)
		if !apierrors.IsConflict(err) {
			return err == nil, err
		}
		run, err = c.runs.Runs(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// giveBack writes what becomes of run, whose registration at attempt this
// Pod released: Pending at the same attempt (reason Relocating); or, for a
// Run deleted, ended or cancelled meanwhile, its usual end.
func (c *Controller) giveBack(ctx context.Context, run *v1alpha1.Run, reg *registration, attempt int32, why string) error {
	switch {
	case run.UID != reg.uid || run.Status.AssignedPodUID != c.pod.UID || run.Status.Attempt != attempt:
		return nil // another incarnation, Pod or attempt: not this Pod's to write
	case run.DeletionTimestamp != nil || lifecycle.IsTerminal(run.Status.Phase):
		_, err := c.removeFinalizer(ctx, run)
		return err
	case run.Spec.CancelRequested:
		updated, err := c.writeOutcome(ctx, run, runstatus.Outcome{Phase: lifecycle.Cancelled, Reason: lifecycle.ReasonCancelled,
			Message: "the function was cancelled because spec.cancelRequested is true"})
		if err != nil {
			return err
		}
		_, err = c.removeFinalizer(ctx, updated)
		return err
	case run.Status.Phase != lifecycle.Running && run.Status.Phase != lifecycle.Ready:
		return nil
	}
	// Going back to Pending also drops the registration-cleanup finalizer
	// (the registry does): nothing of the Run is left on this Pod.
	if _, err := runstatus.Update(ctx, c.runs, runstatus.Relocate(run, why, c.clock.Now())); err != nil {
		return fmt.Errorf("give back Run %s for relocation: %w", reg.key, err)
	}
	c.markEnded(reg.key, run)
	reg.logger.Info("Function Run given back for relocation", "phase", run.Status.Phase)
	c.recorder.Eventf(run, corev1.EventTypeNormal, lifecycle.ReasonRelocating,
		"%s; attempt %d stopped there and moves to another Pod", why, attempt)
	return nil
}
