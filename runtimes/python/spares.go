package python

import "sync"

// sparePool keeps workers started ahead of need: a registration then costs
// the import of its handler, not an interpreter start (most of the time a
// Python registration takes). A spare serves nothing until a registration
// sends it what to load, so it is never shared.
//
// With slots set (the Pod's capacity), it keeps no more spares than there
// are free slots: an empty Pod — a new one a rollout's functions move to,
// all at once — has a warm worker for each, up to size, and a full one none.
type sparePool struct {
	interpreter string
	// env is the environment spares start with.
	env  []string
	size int
	// slots is how many functions the Pod may hold; 0 when unknown.
	slots int

	mu       sync.Mutex
	spares   []*worker
	starting int
	// loaded is how many functions are loaded or loading, each holding a
	// worker of its own.
	loaded int
	closed bool
}

func newSparePool(interpreter string, env []string, size, slots int) *sparePool {
	return &sparePool{interpreter: interpreter, env: env, size: size, slots: slots}
}

// targetLocked is how many spares to keep: size, and with slots known no
// more than the slots no function holds.
func (p *sparePool) targetLocked() int {
	if p.slots <= 0 {
		return p.size
	}
	return max(0, min(p.size, p.slots-p.loaded))
}

// hold counts a function that loads, and release one that went, so the
// spares follow the free slots. hold stops no spare: the take that follows
// uses one.
func (p *sparePool) hold() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loaded++
}

func (p *sparePool) release() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loaded = max(0, p.loaded-1)
	p.fillLocked()
}

// take returns a live spare, and starts its replacement; nil when there is
// none. Any spare serves any registration: workers start isolated (-I), so
// no variable of the environment they started with acted on them.
func (p *sparePool) take() *worker {
	if p == nil || p.size == 0 {
		return nil
	}
	p.mu.Lock()
	// Deferred calls run last first: refill, then unlock.
	defer p.mu.Unlock()
	defer p.fillLocked()
	for len(p.spares) > 0 {
		w := p.spares[0]
		p.spares = p.spares[1:]
		select {
		case <-w.exited:
			continue // died while waiting (OOM killer, a kill from outside)
		default:
			return w
		}
	}
	return nil
}

// fill starts spares until size are ready or starting.
func (p *sparePool) fill() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fillLocked()
}

// fillLocked starts spares up to the target and stops those above it. It
// must be called with p.mu held; starting happens outside it.
func (p *sparePool) fillLocked() {
	target := p.targetLocked()
	for len(p.spares) > target {
		w := p.spares[len(p.spares)-1]
		p.spares = p.spares[:len(p.spares)-1]
		go w.close()
	}
	for !p.closed && len(p.spares)+p.starting < target {
		p.starting++
		go func() {
			w, err := spawn(p.interpreter, p.env)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.starting--
			if err != nil {
				// The next registration starts its own worker and reports
				// the error; spares are only a shortcut.
				return
			}
			if p.closed || len(p.spares) >= p.targetLocked() {
				go w.close()
				return
			}
			p.spares = append(p.spares, w)
		}()
	}
}

// close kills the spares and starts no more.
func (p *sparePool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	spares := p.spares
	p.spares = nil
	p.mu.Unlock()
	for _, w := range spares {
		w.close()
	}
}
