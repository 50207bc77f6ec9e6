package python

import (
	"slices"
	"strings"
	"sync"
)

// sparePool keeps workers started ahead of need: a registration then costs
// the import of its handler, not an interpreter start (most of the time a
// Python registration takes). A spare serves nothing until a registration
// sends it what to load, so it is never shared.
type sparePool struct {
	interpreter string
	// env is the environment spares start with; dir their directory.
	env  []string
	dir  string
	size int

	mu       sync.Mutex
	spares   []*worker
	starting int
	closed   bool
}

func newSparePool(interpreter string, env []string, dir string, size int) *sparePool {
	return &sparePool{interpreter: interpreter, env: env, dir: dir, size: size}
}

// take returns a live spare that may serve a registration with env, and
// starts its replacement; nil when there is none, or when env sets a
// variable the interpreter reads at start (PYTHON*) differently from the
// spares: such a registration needs an interpreter of its own.
func (p *sparePool) take(env []string) *worker {
	if p == nil || p.size == 0 || !sameInterpreterEnv(p.env, env) {
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

// fillLocked must be called with p.mu held; starting happens outside it.
func (p *sparePool) fillLocked() {
	for !p.closed && len(p.spares)+p.starting < p.size {
		p.starting++
		go func() {
			w, err := spawn(p.interpreter, p.env, p.dir)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.starting--
			if err != nil {
				// The next registration starts its own worker and reports
				// the error; spares are only a shortcut.
				return
			}
			if p.closed {
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

// sameInterpreterEnv reports whether the PYTHON* variables, which the
// interpreter reads once at start, are the same in a and b.
func sameInterpreterEnv(a, b []string) bool {
	return slices.Equal(interpreterEnv(a), interpreterEnv(b))
}

func interpreterEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "PYTHON") {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}
