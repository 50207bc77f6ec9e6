package logfanout

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	runtimev1 "kruntimes.io/kruntimes/proto/runtimev1"
)

// DefaultWindowBytes is how much of a shared stream's latest output is held
// for its followers: four of the Runtime Server's 64 KiB responses. A
// follower further behind reads on its own until it is back within it.
const DefaultWindowBytes = 256 << 10

// Stream is a follow of an attempt's log, as runtimed's FollowLog answers
// it: responses until io.EOF (the attempt, or the function's registration,
// ended and everything was sent) or an error.
type Stream interface {
	Recv() (*runtimev1.FollowLogResponse, error)
}

// Open opens a stream of the attempt's log from offset on the runtimed that
// runs it; the stream ends with ctx.
type Open func(ctx context.Context, offset int64) (Stream, error)

// Key names a followed attempt on the Pod that runs it.
type Key struct {
	RunUID  types.UID
	Attempt int32
	PodUID  types.UID
	// Function says the attempt is a function Run's registration, whose
	// follows FollowFunctionLog answers: the first response comes at once
	// (empty when nothing is kept from the offset on), and an offset past
	// what was written is OutOfRange at once (the Runtime Server restarted
	// and registered the function again, so its log starts anew). Every
	// follower of a shared function stream gets the same.
	Function bool
	// Command, with Function, names a background command of the
	// registration, whose own output is followed instead.
	Command string
}

// Fanout holds the shared streams of one kruntimes-apiserver.
type Fanout struct {
	windowBytes int

	mu     sync.Mutex
	shares map[Key]*share

	upstreams atomic.Int64
}

// New returns a Fanout whose shared streams each hold windowBytes of their
// latest output (DefaultWindowBytes when not positive).
func New(windowBytes int) *Fanout {
	if windowBytes <= 0 {
		windowBytes = DefaultWindowBytes
	}
	registerMetrics()
	return &Fanout{windowBytes: windowBytes, shares: map[Key]*share{}}
}

// Upstreams is how many streams f holds open to runtimeds now: one per
// shared attempt, plus one per follower catching up on its own.
func (f *Fanout) Upstreams() int { return int(f.upstreams.Load()) }

func (f *Fanout) opened() {
	f.upstreams.Add(1)
	upstreamStreams.Inc()
}

func (f *Fanout) closed() {
	f.upstreams.Add(-1)
	upstreamStreams.Dec()
}

// Follow returns a stream of key's log from offset that ends with ctx. It
// joins the attempt's shared stream, opening it with open from offset when
// it is the first. A follower whose offset the shared stream no longer
// holds (it joined late, or fell behind) reads from its offset on a stream
// of its own until it is back within the shared one: it gets every byte
// the Runtime Server still keeps, and never holds the others up.
func (f *Fanout) Follow(ctx context.Context, key Key, offset int64, open Open) Stream {
	f.mu.Lock()
	s := f.shares[key]
	if s == nil {
		upCtx, cancel := context.WithCancel(context.Background())
		s = &share{fanout: f, key: key, cancel: cancel, begin: offset, end: offset, changed: make(chan struct{})}
		f.shares[key] = s
		f.opened()
		go s.pump(upCtx, open, offset)
	}
	s.followers++
	f.mu.Unlock()
	fl := &follower{ctx: ctx, share: s, open: open, offset: offset}
	context.AfterFunc(ctx, fl.leave)
	return fl
}

// leave takes a follower off s; the last one closes its upstream.
func (f *Fanout) leave(s *share) {
	f.mu.Lock()
	s.followers--
	last := s.followers == 0
	if last && f.shares[s.key] == s {
		delete(f.shares, s.key)
	}
	f.mu.Unlock()
	if last {
		s.cancel()
	}
}

// share is one upstream stream of an attempt and the window of its latest
// responses.
type share struct {
	fanout *Fanout
	key    Key
	cancel context.CancelFunc
	// followers is guarded by fanout.mu.
	followers int

	mu sync.Mutex
	// window holds the latest responses, contiguous: each begins where
	// the previous one ended.
	window []entry
	bytes  int
	// begin is the first offset the window answers from, end the offset
	// after its last byte.
	begin, end int64
	// err is how the upstream ended (io.EOF: the attempt ended), once
	// done.
	err  error
	done bool
	// changed is closed, and replaced, when the window grows or the
	// upstream ends.
	changed chan struct{}
	// answered says the upstream sent a response; written is what the
	// latest one said the attempt had written.
	answered bool
	written  int64
}

// entry is one upstream response, covering [begin, end): its skipped
// bytes, then its chunks.
type entry struct {
	begin, end int64
	resp       *runtimev1.FollowLogResponse
}

// pump reads the upstream into the window, never waiting for a follower,
// until it ends or the last follower left.
func (s *share) pump(ctx context.Context, open Open, offset int64) {
	up, err := open(ctx, offset)
	for err == nil {
		var resp *runtimev1.FollowLogResponse
		if resp, err = up.Recv(); err == nil {
			s.add(resp)
		}
	}
	f := s.fanout
	f.mu.Lock()
	if f.shares[s.key] == s {
		delete(f.shares, s.key) // the next follow opens a new one
	}
	f.mu.Unlock()
	s.cancel()
	f.closed()
	s.mu.Lock()
	s.err, s.done = err, true
	close(s.changed)
	s.mu.Unlock()
}

func (s *share) add(resp *runtimev1.FollowLogResponse) {
	n := 0
	for _, c := range resp.GetChunks() {
		n += len(c.GetData())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := entry{begin: s.end, end: resp.GetOffset() + int64(n), resp: resp}
	s.window = append(s.window, e)
	s.bytes += n
	s.end = e.end
	s.answered, s.written = true, resp.GetWritten()
	for s.bytes > s.fanout.windowBytes && len(s.window) > 1 {
		s.bytes -= int(s.window[0].end - s.window[0].resp.GetOffset())
		s.window[0] = entry{}
		s.window = s.window[1:]
		s.begin = s.window[0].begin
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// follower is one follow's place in a share.
type follower struct {
	ctx    context.Context
	share  *share
	open   Open
	offset int64
	// answered says Recv returned a response: a function's follower gets
	// its first one at once.
	answered bool
	left     sync.Once

	mu sync.Mutex
	// own, while set, is the follower's own stream, read until the share
	// holds its offset again.
	own       Stream
	ownCancel context.CancelFunc
}

// leave takes the follower off its share, once: when its context ends, or
// when its stream ended.
func (fl *follower) leave() {
	fl.left.Do(func() {
		fl.closeOwn(nil)
		fl.share.fanout.leave(fl.share)
	})
}

// closeOwn closes the follower's own stream, when it is still own (or
// whichever it is, when own is nil).
func (fl *follower) closeOwn(own Stream) {
	fl.mu.Lock()
	cancel := fl.ownCancel
	if cancel == nil || (own != nil && fl.own != own) {
		fl.mu.Unlock()
		return
	}
	fl.own, fl.ownCancel = nil, nil
	fl.mu.Unlock()
	cancel()
	fl.share.fanout.closed()
}

func (fl *follower) ownStream() Stream {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.own
}

// Recv implements Stream.
func (fl *follower) Recv() (*runtimev1.FollowLogResponse, error) {
	for {
		if fl.ctx.Err() != nil {
			fl.leave()
			return nil, status.FromContextError(fl.ctx.Err()).Err()
		}
		if own := fl.ownStream(); own != nil {
			return fl.recvOwn(own)
		}
		s := fl.share
		s.mu.Lock()
		switch {
		case fl.offset < s.begin:
			s.mu.Unlock()
			if err := fl.openOwn(); err != nil {
				return nil, err
			}
			continue
		case fl.offset < s.end:
			resp := s.from(fl.offset)
			s.mu.Unlock()
			fl.advance(resp)
			fl.answered = true
			return resp, nil
		case s.key.Function && !fl.answered && s.answered:
			// As FollowFunctionLog answers a follow that has nothing to
			// read yet: at once, saying where the log stands.
			written := s.written
			s.mu.Unlock()
			if fl.offset > written {
				fl.leave()
				return nil, status.Errorf(codes.OutOfRange, "offset %d is past the %d bytes the registration wrote", fl.offset, written)
			}
			fl.answered = true
			return &runtimev1.FollowLogResponse{Offset: fl.offset, Written: written}, nil
		case s.done:
			err := s.err
			end := s.end
			s.mu.Unlock()
			fl.leave()
			if errors.Is(err, io.EOF) && fl.offset > end {
				return nil, status.Errorf(codes.OutOfRange, "offset %d is past the %d bytes the attempt wrote", fl.offset, end)
			}
			return nil, err
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-fl.ctx.Done():
		}
	}
}

// from answers a follower at offset, which the window holds, with the
// rest of the entry that holds it, and with what the attempt wrote by now
// rather than when the entry was cut: a follower that reads the window
// after the fact has caught up (where tailLines cuts) only at its end, as
// a stream of its own would tell it. s.mu is held.
func (s *share) from(offset int64) *runtimev1.FollowLogResponse {
	i := 0
	for s.window[i].end <= offset {
		i++
	}
	r := s.window[i].resp
	if offset <= r.GetOffset() {
		return &runtimev1.FollowLogResponse{Offset: r.GetOffset(), SkippedBytes: r.GetOffset() - offset, Chunks: r.GetChunks(), Written: s.written}
	}
	cut := offset - r.GetOffset()
	out := &runtimev1.FollowLogResponse{Offset: offset, Written: s.written}
	for _, c := range r.GetChunks() {
		n := int64(len(c.GetData()))
		if cut >= n {
			cut -= n
			continue
		}
		if cut > 0 {
			c = &runtimev1.LogChunk{Stream: c.GetStream(), UnixNano: c.GetUnixNano(), Data: c.GetData()[cut:], InvocationId: c.GetInvocationId()}
			cut = 0
		}
		out.Chunks = append(out.Chunks, c)
	}
	return out
}

func (fl *follower) advance(resp *runtimev1.FollowLogResponse) {
	fl.offset = resp.GetOffset()
	for _, c := range resp.GetChunks() {
		fl.offset += int64(len(c.GetData()))
	}
}

func (fl *follower) openOwn() error {
	ctx, cancel := context.WithCancel(fl.ctx)
	own, err := fl.open(ctx, fl.offset)
	if err != nil {
		cancel()
		fl.leave()
		return err
	}
	fl.mu.Lock()
	if fl.ctx.Err() != nil {
		// The follower left meanwhile.
		fl.mu.Unlock()
		cancel()
		return status.FromContextError(fl.ctx.Err()).Err()
	}
	fl.own, fl.ownCancel = own, cancel
	fl.share.fanout.opened()
	fl.mu.Unlock()
	return nil
}

// recvOwn reads the follower's own stream, and goes back to the share once
// the share holds the offset reached.
func (fl *follower) recvOwn(own Stream) (*runtimev1.FollowLogResponse, error) {
	resp, err := own.Recv()
	if err != nil {
		fl.leave()
		return nil, err
	}
	fl.advance(resp)
	fl.answered = true
	s := fl.share
	s.mu.Lock()
	back := fl.offset >= s.begin && (fl.offset < s.end || !s.done)
	s.mu.Unlock()
	if back {
		fl.closeOwn(own)
	}
	return resp, nil
}
