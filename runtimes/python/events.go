package python

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/runlog"
	"kruntimes.io/kruntimes/runtimes/framing"
	"kruntimes.io/kruntimes/runtimes/language"
)

// A worker reports what its background commands do on a third pipe, fd 5,
// written by the threads that read the commands' output as well as by the
// invocation that starts them: a frame per event, a JSON head (its length
// in 4 bytes, then the head) and, for output, the bytes as they are.

// eventHead is the head of an event frame.
type eventHead struct {
	// Type is "start", "output" or "end".
	Type string `json:"type"`
	ID   string `json:"id"`
	// Stream is "stdout" or "stderr", for output.
	Stream string `json:"stream"`
}

// decodeEvent reads one event frame; the data is output's bytes, sliced
// out of the frame.
func decodeEvent(frame []byte) (ev eventHead, stream runlog.Stream, data []byte, err error) {
	head, body, err := splitHeaded(frame)
	if err != nil {
		return ev, "", nil, err
	}
	if err := json.Unmarshal(head, &ev); err != nil {
		return ev, "", nil, err
	}
	if ev.ID == "" {
		return ev, "", nil, errors.New("an event names no command")
	}
	switch ev.Type {
	case "start", "end":
	case "output":
		switch ev.Stream {
		case "stdout":
			stream = runlog.StreamStdout
		case "stderr":
			stream = runlog.StreamStderr
		default:
			return ev, "", nil, fmt.Errorf("output of command %q names no stream", ev.ID)
		}
	default:
		return ev, "", nil, fmt.Errorf("unknown event type %q", ev.Type)
	}
	return ev, stream, body, nil
}

// commandEvents reads a worker's event pipe and hands the events to the
// function's sink. It counts what it handled, so that Invoke can wait for
// the events the worker wrote before its answer (see await).
type commandEvents struct {
	file   *os.File // our end of fd 5
	reader *framing.Reader

	mu      sync.Mutex
	changed sync.Cond
	handled int64
	// ended is set once the reader stopped: no event comes any more.
	ended bool
	// done is closed when the reader stopped; nil until it started.
	done chan struct{}
}

func newCommandEvents(file *os.File) *commandEvents {
	e := &commandEvents{file: file, reader: framing.NewReader(file, maxFrame)}
	e.changed.L = &e.mu
	return e
}

// start reads events in the background, once the worker serves a
// registration, handing them to sink (nil discards them) and counting each
// start in started. A frame it cannot read means the worker broke the
// protocol: it calls kill.
func (e *commandEvents) start(sink language.CommandOutput, started *atomic.Int64, kill func()) {
	if sink == nil {
		sink = discardCommands{}
	}
	e.mu.Lock()
	e.done = make(chan struct{})
	e.mu.Unlock()
	go e.read(sink, started, kill)
}

// read handles events until the worker's end of the pipe closes (the
// worker died or was killed), then ends every command it started and did
// not end: its commands died with it.
func (e *commandEvents) read(sink language.CommandOutput, started *atomic.Int64, kill func()) {
	open := map[string]struct{}{}
	for {
		frame, err := e.reader.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				klog.Background().Error(err, "Could not read a worker's command events; killing it")
				kill()
			}
			break
		}
		ev, stream, data, err := decodeEvent(frame)
		if err != nil {
			klog.Background().Error(err, "A worker sent an unreadable command event; killing it")
			kill()
			break
		}
		_, known := open[ev.ID]
		switch {
		case ev.Type == "start" && !known:
			open[ev.ID] = struct{}{}
			started.Add(1)
			sink.Start(ev.ID)
		case ev.Type == "output" && known:
			sink.Write(ev.ID, stream, data)
		case ev.Type == "end" && known:
			delete(open, ev.ID)
			sink.End(ev.ID)
		}
		e.mu.Lock()
		e.handled++
		e.changed.Broadcast()
		e.mu.Unlock()
	}
	for id := range open {
		sink.End(id)
	}
	e.mu.Lock()
	e.ended = true
	e.changed.Broadcast()
	close(e.done)
	e.mu.Unlock()
}

// await returns once n events were handled, or no more will be. It costs
// nothing when n is 0, as it is for an invocation of a worker that never
// started a command.
func (e *commandEvents) await(n int64) {
	if n == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.handled < n && !e.ended && e.done != nil {
		e.changed.Wait()
	}
}

// close stops reading once the worker is dead: it lets the reader drain
// what the worker wrote before it died, for a while, and waits for it to
// end the commands left running.
func (e *commandEvents) close() {
	e.mu.Lock()
	done := e.done
	e.mu.Unlock()
	if done != nil {
		timer := time.NewTimer(eventDrainGrace)
		select {
		case <-done:
		case <-timer.C:
		}
		timer.Stop()
	}
	// Closing unblocks a reader held up by a writer that outlived the
	// worker, which cannot be but for a bug.
	_ = e.file.Close()
	if done != nil {
		<-done
	}
}

// discardCommands is the sink of a function that gave none.
type discardCommands struct{}

func (discardCommands) Start(string)                        {}
func (discardCommands) Write(string, runlog.Stream, []byte) {}
func (discardCommands) End(string)                          {}
