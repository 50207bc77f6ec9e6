package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/runtimed/metrics"
)

// Heartbeat renews the Pod's Lease.
type Heartbeat struct {
	leases coordinationclient.LeasesGetter
	pod    runtimepod.Pod
	clock  clock.Clock

	mu    sync.Mutex
	lease *coordinationv1.Lease
	// renewed is the Lease as last written successfully; unlike lease, a
	// failed renewal does not clear it, so Fresh stays true until it ages.
	renewed *coordinationv1.Lease
}

// New returns a Heartbeat for pod.
func New(leases coordinationclient.LeasesGetter, pod runtimepod.Pod, clk clock.Clock) *Heartbeat {
	return &Heartbeat{leases: leases, pod: pod, clock: clk}
}

// Run renews the Lease every runtimepod.HeartbeatRenewInterval until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(h.pod.Namespace, runtimepod.LeaseName(h.pod.Name)))
	ctx = klog.NewContext(ctx, logger)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := h.Renew(ctx); err != nil {
			metrics.HeartbeatRenewals.WithLabelValues("error").Inc()
			logger.Error(err, "Heartbeat renewal failed; the scheduler stops binding Runs here once the Lease expires")
			return
		}
		metrics.HeartbeatRenewals.WithLabelValues("ok").Inc()
	}, runtimepod.HeartbeatRenewInterval)
}

// Fresh reports whether the last successful renewal is younger than the
// Lease duration, i.e. whether the scheduler sees this Pod as alive.
func (h *Heartbeat) Fresh() error {
	h.mu.Lock()
	lease := h.renewed
	h.mu.Unlock()
	switch {
	case lease == nil || lease.Spec.RenewTime == nil:
		return fmt.Errorf("the heartbeat Lease was not renewed yet")
	case !runtimepod.HeartbeatFresh(lease, h.clock.Now()):
		return fmt.Errorf("the heartbeat Lease was last renewed %s ago, longer than its %s duration",
			h.clock.Since(lease.Spec.RenewTime.Time).Round(time.Second), runtimepod.HeartbeatLeaseDuration)
	}
	return nil
}

// Renew creates or renews the Lease once. It updates the copy it wrote last
// and falls back to a fresh read on a conflict or when it has none, so a
// healthy renewal is one API call.
func (h *Heartbeat) Renew(ctx context.Context) error {
	h.mu.Lock()
	cached := h.lease
	h.mu.Unlock()
	client := h.leases.Leases(h.pod.Namespace)
	name := runtimepod.LeaseName(h.pod.Name)
	now := metav1.NewMicroTime(h.clock.Now())

	if cached == nil {
		got, err := client.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := client.Create(ctx, h.desired(nil, now), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create heartbeat Lease %s/%s: %w; runtimed's Role must allow create on leases", h.pod.Namespace, name, err)
			}
			h.store(created)
			return nil
		case err != nil:
			return fmt.Errorf("get heartbeat Lease %s/%s: %w", h.pod.Namespace, name, err)
		}
		cached = got
	}
	updated, err := client.Update(ctx, h.desired(cached, now), metav1.UpdateOptions{})
	if err != nil {
		h.mu.Lock()
		h.lease = nil // re-read next time
		h.mu.Unlock()
		return fmt.Errorf("renew heartbeat Lease %s/%s: %w", h.pod.Namespace, name, err)
	}
	h.store(updated)
	return nil
}

func (h *Heartbeat) store(lease *coordinationv1.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lease = lease
	h.renewed = lease
}

// desired is the Lease as this Pod holds it, based on current when set.
func (h *Heartbeat) desired(current *coordinationv1.Lease, now metav1.MicroTime) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: runtimepod.LeaseName(h.pod.Name), Namespace: h.pod.Namespace}}
	if current != nil {
		lease = current.DeepCopy()
	}
	holder := string(h.pod.UID)
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder {
		// A new holder: a Pod that reused the name, or the first renewal.
		lease.Spec.HolderIdentity = &holder
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, -1) + 1)
	}
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(runtimepod.HeartbeatLeaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	// Owned by the Pod, so the garbage collector removes it with the Pod.
	owner := metav1.OwnerReference{APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Pod", Name: h.pod.Name, UID: h.pod.UID}
	owned := false
	for _, ref := range lease.OwnerReferences {
		if ref.UID == owner.UID {
			owned = true
		}
	}
	if !owned {
		refs := lease.OwnerReferences[:0]
		for _, ref := range lease.OwnerReferences {
			// A previous Pod of the same name no longer owns it.
			if ref.Kind != owner.Kind || ref.APIVersion != owner.APIVersion {
				refs = append(refs, ref)
			}
		}
		lease.OwnerReferences = append(refs, owner)
	}
	return lease
}

// ErrLapsed is the cause of a context Bound ended: the Lease lapsed.
var ErrLapsed = errors.New("this Pod's heartbeat Lease lapsed: recovery may move its functions, so nothing may run on here")

// Bound returns a context that ends, with cause ErrLapsed, when the Lease
// lapses without a renewal (or at once when it is not fresh): the other
// half of self-fencing. Admitting no invocation past the Lease is not
// enough, since one admitted just before it lapsed could run on for its
// whole timeout while recovery, a grace period later, registers the
// function elsewhere. Call the CancelFunc when the work is done.
func (h *Heartbeat) Bound(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		for {
			lapse, ok := h.lapsesAt()
			wait := lapse.Sub(h.clock.Now())
			if !ok || wait <= 0 {
				cancel(ErrLapsed)
				return
			}
			timer := h.clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C():
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// lapsesAt is when the last successful renewal stops being fresh; false
// when there was none.
func (h *Heartbeat) lapsesAt() (time.Time, bool) {
	h.mu.Lock()
	lease := h.renewed
	h.mu.Unlock()
	return runtimepod.HeartbeatExpiry(lease)
}
