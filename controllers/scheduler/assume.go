package scheduler

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// assumeTTL bounds how long a reservation outlives a bind whose outcome
// the informer never showed (e.g. the update timed out and did not apply).
const assumeTTL = 30 * time.Second

// reservation is a slot the scheduler took on a Pod for a Run it is binding
// or has bound but not yet seen bound in its informer.
type reservation struct {
	runUID  types.UID
	podUID  types.UID
	expires time.Time // zero while the bind is in flight
	// bound: the server accepted the bind; the informer has not shown it.
	bound bool
}

// assumeCache holds reservations, like kube-scheduler's assumed Pods: a
// slot is counted from the moment it is chosen, so the next decision does
// not give it away again before the informer catches up.
type assumeCache struct {
	mu sync.Mutex
	// byRun is keyed by Run UID: one reservation per Run.
	byRun map[types.UID]reservation
}

func newAssumeCache() *assumeCache {
	return &assumeCache{byRun: map[types.UID]reservation{}}
}

// assume reserves a slot on podUID for runUID.
func (a *assumeCache) assume(runUID, podUID types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byRun[runUID] = reservation{runUID: runUID, podUID: podUID}
}

// finishBinding starts the reservation's expiry once the bind returned;
// bound says whether the server accepted it (false: outcome unknown).
func (a *assumeCache) finishBinding(runUID types.UID, now time.Time, bound bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.byRun[runUID]; ok {
		r.expires, r.bound = now.Add(assumeTTL), bound
		a.byRun[runUID] = r
	}
}

// bound reports whether the server accepted runUID's bind and the
// informer has not caught up yet (within the reservation's lifetime).
func (a *assumeCache) bound(runUID types.UID, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.byRun[runUID]
	return ok && r.bound && !now.After(r.expires)
}

// forget drops the reservation of runUID: the bind failed, or the informer
// now shows the Run where it is, so it is counted from there.
func (a *assumeCache) forget(runUID types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byRun, runUID)
}

// holds reports whether runUID holds an unexpired reservation at now.
func (a *assumeCache) holds(runUID types.UID, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.byRun[runUID]
	return ok && (r.expires.IsZero() || !now.After(r.expires))
}

// reservedOn returns the Runs holding reservations on podUID at now, and
// drops expired ones.
func (a *assumeCache) reservedOn(podUID types.UID, now time.Time) []types.UID {
	a.mu.Lock()
	defer a.mu.Unlock()
	var uids []types.UID
	for uid, r := range a.byRun {
		if !r.expires.IsZero() && now.After(r.expires) {
			delete(a.byRun, uid)
			continue
		}
		if r.podUID == podUID {
			uids = append(uids, uid)
		}
	}
	return uids
}
