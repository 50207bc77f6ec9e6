package invokerouter

import (
	"sync"

	"k8s.io/client-go/tools/cache"
)

// routeChanges tells invocations that wait for a function on its way to
// Ready, and follows of runs/log that wait for a Run to start, move or end,
// when its route may have changed: at each event of its Run (a task Run's
// too, though the cache does not keep it), and of any Runtime Pod (a Pod's
// address, readiness or deletion moves routes). Only refused invocations
// and follows between two streams wait, so it holds few channels.
type routeChanges struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

func newRouteChanges() *routeChanges {
	return &routeChanges{waiters: map[string]map[chan struct{}]struct{}{}}
}

// watch returns a channel closed at the next change of the Run key, and a
// func that gives it up.
func (c *routeChanges) watch(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiters[key] == nil {
		c.waiters[key] = map[chan struct{}]struct{}{}
	}
	c.waiters[key][ch] = struct{}{}
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if chans, ok := c.waiters[key]; ok {
			delete(chans, ch)
			if len(chans) == 0 {
				delete(c.waiters, key)
			}
		}
	}
}

// changed wakes the waiters of the Run key.
func (c *routeChanges) changed(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.waiters[key] {
		close(ch)
	}
	delete(c.waiters, key)
}

// changedAll wakes every waiter.
func (c *routeChanges) changedAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, chans := range c.waiters {
		for ch := range chans {
			close(ch)
		}
	}
	clear(c.waiters)
}

// runHandler wakes the waiters of each Run the informer hears of.
func (c *routeChanges) runHandler() cache.ResourceEventHandler {
	wake := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.changed(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { wake(obj) },
		UpdateFunc: func(_, cur any) { wake(cur) },
		DeleteFunc: wake,
	}
}

// podHandler wakes every waiter at each change of a Runtime Pod.
func (c *routeChanges) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.changedAll() },
		UpdateFunc: func(any, any) { c.changedAll() },
		DeleteFunc: func(any) { c.changedAll() },
	}
}
