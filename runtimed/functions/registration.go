package functions

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// registration is this runtimed's record of one function Run it holds a
// slot for: the attempt it registers or registered, and whether invokes may
// reach it.
type registration struct {
	key    string
	uid    types.UID
	digest string
	logger klog.Logger

	// Guarded by Controller.mu.
	attempt int32
	// id is the Runtime Server's registration ID; empty until
	// RegisterFunction returned READY for attempt.
	id string
	// registeredAt is when RegisterFunction returned: a ListFunctions
	// answer older than it says nothing about this registration.
	registeredAt time.Time
	// accepting is the invoke gate: open while the registration is live and
	// nothing is stopping it.
	accepting bool
	// readyWritten is set once phase Ready was written for attempt, so a
	// stale informer copy still showing Running is not registered again.
	readyWritten bool
	// idleDeadline is the Runtime Server's idle deadline last seen.
	idleDeadline time.Time
}

// registrationDigest is what the Runtime Server compares to tell the same
// registration from a different one at the same attempt: everything of the
// spec a registration is made of, which is immutable.
func registrationDigest(run *v1alpha1.Run) string {
	fn := run.Spec.Mode.Function
	in := struct {
		Inline, InlinePath, Handler string
		Env                         []v1alpha1.EnvVar
		IdleTimeoutSeconds          *int32
	}{run.Spec.Source.Inline, run.Spec.Source.InlinePath, fn.Handler, run.Spec.Env, fn.IdleTimeoutSeconds}
	// Marshalling a struct of strings, slices and pointers cannot fail.
	data, _ := json.Marshal(in)
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ErrNotAdmitted is wrapped by every refusal of Admit: the invocation was
// not dispatched, so the caller may say so (and a client may retry).
var ErrNotAdmitted = errors.New("not admitted")

// Admit returns the registration ID an invocation of the Run uid at attempt,
// assigned to the Pod podUID, may use: only when this runtimed holds a live,
// accepting registration of exactly that attempt on exactly this Pod. The
// apiserver routes by what its informers showed; Admit is the fence that
// refuses whatever they showed late.
func (c *Controller) Admit(uid types.UID, attempt int32, podUID types.UID) (string, error) {
	if podUID != c.pod.UID {
		return "", fmt.Errorf("%w: the invocation is for Pod UID %s, this is %s", ErrNotAdmitted, podUID, c.pod.UID)
	}
	if c.heartbeat != nil {
		// Self-fencing: past its Lease, this Pod may be declared lost and
		// its functions registered elsewhere; serving on would let one
		// function execute on two Pods.
		if err := c.heartbeat.Fresh(); err != nil {
			return "", fmt.Errorf("%w: this Pod's heartbeat has lapsed (%v); it serves no invocation until it renews", ErrNotAdmitted, err)
		}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	reg := c.byUID[uid]
	switch {
	case reg == nil:
		return "", fmt.Errorf("%w: Run %s has no registration on this Pod", ErrNotAdmitted, uid)
	case reg.attempt != attempt:
		return "", fmt.Errorf("%w: Run %s is at attempt %d here, not %d", ErrNotAdmitted, uid, reg.attempt, attempt)
	case !reg.accepting:
		return "", fmt.Errorf("%w: Run %s is not accepting invokes (registering, or stopping)", ErrNotAdmitted, uid)
	}
	return reg.id, nil
}
