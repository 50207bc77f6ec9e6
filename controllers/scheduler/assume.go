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

// finishBinding starts the reservation's expiry once the bind returned.
func (a *assumeCache) finishBinding(runUID types.UID, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r, ok := a.byRun[runUID]; ok {
		r.expires = now.Add(assumeTTL)
		a.byRun[runUID] = r
	}
}

// forget drops the reservation of runUID: the bind failed, or the informer
// now shows the Run where it is, so it is counted from there.
func (a *assumeCache) forget(runUID types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byRun, runUID)
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
