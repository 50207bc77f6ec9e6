package lifecycle

import "fmt"

// Phase is the lifecycle phase of a Run.
//
// +enum
type Phase string

// The Run phases. Tasks walk Pending → Scheduled → Running → a terminal
// phase; functions walk Pending → Scheduled → Running (registering) → Ready
// and leave Ready only through recovery or a terminal phase.
const (
	Pending   Phase = "Pending"
	Scheduled Phase = "Scheduled"
	Running   Phase = "Running"
	Ready     Phase = "Ready"
	Succeeded Phase = "Succeeded"
	Failed    Phase = "Failed"
	Timeout   Phase = "Timeout"
	Cancelled Phase = "Cancelled"
)

// Mode says whether a Run is a one-shot task or a long-lived function; some
// transitions are open to only one of them.
type Mode string

const (
	ModeTask     Mode = "Task"
	ModeFunction Mode = "Function"
)

// Class is everything a component needs to know about a phase. Every phase
// has an explicit entry in classes: adding a phase without classifying it
// fails TestEveryPhaseIsClassified.
type Class struct {
	// Terminal phases never change again.
	Terminal bool
	// Active phases are neither terminal nor waiting to be scheduled.
	Active bool
	// HoldsCapacity phases count against the assigned Pod's capacity.
	HoldsCapacity bool
	// Assigned phases must name an assigned Pod (and its UID).
	Assigned bool
	// Routable phases may receive invokes.
	Routable bool
	// next lists the phases reachable in one transition, per mode.
	next map[Mode][]Phase
}

var (
	both         = func(p ...Phase) map[Mode][]Phase { return map[Mode][]Phase{ModeTask: p, ModeFunction: p} }
	terminalExit = []Phase{Failed, Timeout, Cancelled}
)

var classes = map[Phase]Class{
	Pending: {
		next: both(Scheduled, Failed, Cancelled),
	},
	Scheduled: {
		Active: true, HoldsCapacity: true, Assigned: true,
		// Back to Pending when the bound Pod disappears before it claimed the Run.
		next: both(Running, Pending, Failed, Cancelled),
	},
	Running: {
		Active: true, HoldsCapacity: true, Assigned: true,
		next: map[Mode][]Phase{
			ModeTask:     append([]Phase{Succeeded, Pending}, terminalExit...),
			ModeFunction: append([]Phase{Ready, Pending}, terminalExit...),
		},
	},
	Ready: {
		Active: true, HoldsCapacity: true, Assigned: true, Routable: true,
		// Running: re-registering on the same Pod; Pending: retry after a fence.
		next: map[Mode][]Phase{ModeFunction: append([]Phase{Running, Pending}, terminalExit...)},
	},
	Succeeded: {Terminal: true},
	Failed:    {Terminal: true},
	Timeout:   {Terminal: true},
	Cancelled: {Terminal: true},
}

// Phases lists every known phase in lifecycle order.
func Phases() []Phase {
	return []Phase{Pending, Scheduled, Running, Ready, Succeeded, Failed, Timeout, Cancelled}
}

// Classify returns the class of p and whether p is a known phase.
func Classify(p Phase) (Class, bool) {
	c, ok := classes[p]
	return c, ok
}

// IsKnown reports whether p is one of the phases above.
func IsKnown(p Phase) bool { _, ok := classes[p]; return ok }

// IsTerminal reports whether p is final: Succeeded, Failed, Timeout or Cancelled.
func IsTerminal(p Phase) bool { return classes[p].Terminal }

// IsActive reports whether p is assigned and not yet terminal.
func IsActive(p Phase) bool { return classes[p].Active }

// HoldsCapacity reports whether a Run in p counts against its Pod's capacity.
func HoldsCapacity(p Phase) bool { return classes[p].HoldsCapacity }

// IsAssigned reports whether a Run in p must carry assignedPod and assignedPodUID.
func IsAssigned(p Phase) bool { return classes[p].Assigned }

// IsRoutable reports whether invokes may be routed to a Run in p.
func IsRoutable(p Phase) bool { return classes[p].Routable }

// IsRetry reports whether from → to is a retry, which must add one to
// status.attempt: an active Run that already ran goes back to Pending, or a
// Ready function that lost its registration registers again on its Pod.
func IsRetry(from, to Phase) bool {
	return (to == Pending && (from == Running || from == Ready)) || (from == Ready && to == Running)
}

// IsRelocation reports whether a function Run moving from one phase to the
// other with Ready reason readyReason is a relocation: its Pod shuts down
// gracefully and its runtimed gave back a claimed function (Running or
// Ready) to Pending, having stopped it. A relocation keeps the attempt: it
// is no failure of the function.
func IsRelocation(mode Mode, from, to Phase, readyReason string) bool {
	return mode == ModeFunction && to == Pending && (from == Running || from == Ready) && readyReason == ReasonRelocating
}

// CheckTransition returns nil when a Run of the given mode may move from one
// phase to the other in a single status update, and an error that names the
// allowed targets otherwise. Staying in the same phase is always allowed,
// except that a task can never be Ready.
func CheckTransition(mode Mode, from, to Phase) error {
	if !IsKnown(to) {
		return fmt.Errorf("unknown phase %q", to)
	}
	if mode == ModeTask && to == Ready {
		return fmt.Errorf("a task Run is never Ready; only function Runs are")
	}
	if from == to {
		return nil
	}
	c, ok := classes[from]
	if !ok {
		return fmt.Errorf("unknown phase %q", from)
	}
	if c.Terminal {
		return fmt.Errorf("%s is terminal and never changes", from)
	}
	for _, p := range c.next[mode] {
		if p == to {
			return nil
		}
	}
	return fmt.Errorf("a %s Run cannot move from %s to %s; allowed: %v", modeNoun(mode), from, to, c.next[mode])
}

func modeNoun(m Mode) string {
	if m == ModeFunction {
		return "function"
	}
	return "task"
}
