package scheduler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/lifecycle"
)

// note is why a parked Run waits: the reason of its Scheduled=False
// condition and the message beside it.
type note struct {
	reason, message string
}

// noteLater has the note worker write n on the Run of key, if the Run is
// still parked then and its condition gives another reason. The scheduler's
// workers never wait for such a write: parking thousands of Runs costs
// thousands of writes, which must not delay placing the Runs that can be
// placed.
func (s *Scheduler) noteLater(key string, n note) {
	s.noteMu.Lock()
	s.want[key] = n
	s.noteMu.Unlock()
	s.notes.Add(key)
	queueDepth.WithLabelValues(queueNotes).Set(float64(s.notes.Len()))
}

// noteWanted reports whether a note for the Run of key waits to be written.
func (s *Scheduler) noteWanted(key string) bool {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	_, ok := s.want[key]
	return ok
}

func (s *Scheduler) forgetNote(key string) {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	delete(s.want, key)
}

// takeNote returns the note wanted for key.
func (s *Scheduler) takeNote(key string) (note, bool) {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	n, ok := s.want[key]
	return n, ok
}

// wrote drops the wanted note of key if it is still n.
func (s *Scheduler) wrote(key string, n note) {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	if s.want[key] == n {
		delete(s.want, key)
	}
}

func (s *Scheduler) noteWorker(ctx context.Context) {
	for {
		key, quit := s.notes.Get()
		if quit {
			return
		}
		err := s.writeNote(ctx, key)
		switch {
		case err == nil:
			s.notes.Forget(key)
		case apierrors.IsConflict(err):
			// The newer copy's update event queues the note again.
			s.notes.Forget(key)
			klog.FromContext(ctx).V(4).Info("Conflict writing a Pending note, waiting for the newer copy", "key", key)
		default:
			utilruntime.HandleErrorWithContext(ctx, err, "Failed to write why a Run is Pending, will retry", "key", key)
			s.notes.AddRateLimited(key)
		}
		s.notes.Done(key)
		queueDepth.WithLabelValues(queueNotes).Set(float64(s.notes.Len()))
	}
}

// writeNote writes the wanted note of the Run of key, in status.message
// and a Scheduled=False condition, unless the Run is no longer parked (a
// note about a Run that is being tried again, or was bound, is stale) or
// its condition already gives that reason: a note is written once per
// reason, and its message may go stale while the reason holds.
func (s *Scheduler) writeNote(ctx context.Context, key string) error {
	n, ok := s.takeNote(key)
	if !ok {
		return nil
	}
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	run, err := s.runs.Runs(namespace).Get(name)
	if err != nil || !wantsScheduling(run) || !s.lines.isParked(key) {
		s.wrote(key, n)
		return nil
	}
	if cond := apimeta.FindStatusCondition(run.Status.Conditions, lifecycle.ConditionScheduled); cond != nil &&
		cond.Status == metav1.ConditionFalse && cond.Reason == n.reason {
		s.wrote(key, n)
		return nil
	}
	update, changed := unschedulableUpdate(run, n.reason, n.message, s.clock.Now())
	if !changed {
		s.wrote(key, n)
		return nil
	}
	if _, err := s.client.KruntimesV1alpha1().Runs(namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("recording why Run %s cannot be scheduled: %w", key, err)
	}
	s.wrote(key, n)
	klog.FromContext(ctx).V(2).Info("Run cannot be scheduled", "run", klog.KObj(run), "reason", n.reason, "message", n.message)
	s.recorder.Event(run, corev1.EventTypeWarning, eventFailedScheduling, n.message)
	return nil
}
