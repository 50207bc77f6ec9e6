package server

import (
	"sync"
	"time"

	"kruntimes.io/kruntimes/apis/runlog"
	"kruntimes.io/kruntimes/runtimes/language"
)

// Bounds of what a registration keeps of its background commands' output.
const (
	// commandLogBytes bounds the kept tail of one command's output.
	commandLogBytes = 1 << 20
	// maxCommandLogs bounds the commands whose logs a registration keeps:
	// beyond it, the oldest ended ones are forgotten. The sandbox keeps
	// the status of as many ended commands, and runs fewer at once.
	maxCommandLogs = 64
)

// commandLog is what one background command wrote, until it ended.
type commandLog struct {
	log *runlog.Recorder
	// done is closed when the command ended.
	done chan struct{}
}

func (cmd *commandLog) ended() bool {
	select {
	case <-cmd.done:
		return true
	default:
		return false
	}
}

// commandLogs keeps the logs of a registration's background commands, for
// FollowFunctionLog with a command_id. It is the registration's
// language.CommandOutput, and goes with the registration.
type commandLogs struct {
	now func() time.Time

	mu   sync.Mutex
	byID map[string]*commandLog
	// order holds the IDs in byID, oldest start first.
	order []string
}

var _ language.CommandOutput = (*commandLogs)(nil)

func newCommandLogs(now func() time.Time) *commandLogs {
	return &commandLogs{now: now, byID: map[string]*commandLog{}}
}

// Start implements language.CommandOutput.
func (c *commandLogs) Start(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byID[id]; ok {
		// An ID names one command; a second start replaces the first.
		c.endLocked(old)
		c.removeLocked(id)
	}
	c.byID[id] = &commandLog{log: runlog.NewTailRecorder(commandLogBytes, c.now), done: make(chan struct{})}
	c.order = append(c.order, id)
	c.forgetLocked()
}

// Write implements language.CommandOutput.
func (c *commandLogs) Write(id string, s runlog.Stream, p []byte) {
	c.mu.Lock()
	cmd := c.byID[id]
	c.mu.Unlock()
	if cmd != nil {
		cmd.log.WriteInvocation(s, "", p)
	}
}

// End implements language.CommandOutput.
func (c *commandLogs) End(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cmd := c.byID[id]; cmd != nil {
		c.endLocked(cmd)
		c.forgetLocked()
	}
}

// lookup is the log of command id, and a channel closed when it ended.
func (c *commandLogs) lookup(id string) (*runlog.Recorder, <-chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd, ok := c.byID[id]
	if !ok {
		return nil, nil, false
	}
	return cmd.log, cmd.done, true
}

func (c *commandLogs) endLocked(cmd *commandLog) {
	if !cmd.ended() {
		close(cmd.done)
	}
}

// forgetLocked drops the oldest ended commands beyond maxCommandLogs. A
// running command is never dropped: the sandbox bounds those itself.
func (c *commandLogs) forgetLocked() {
	for i := 0; len(c.byID) > maxCommandLogs && i < len(c.order); {
		id := c.order[i]
		if !c.byID[id].ended() {
			i++
			continue
		}
		c.removeLocked(id)
	}
}

func (c *commandLogs) removeLocked(id string) {
	delete(c.byID, id)
	for i, o := range c.order {
		if o == id {
			c.order = append(c.order[:i], c.order[i+1:]...)
			return
		}
	}
}
