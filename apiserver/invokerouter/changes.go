package invokerouter

import (
	"sync"

	"k8s.io/client-go/tools/cache"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// routeChanges tells invocations that wait for a function on its way to
// Ready, and follows of runs/log that wait for a Run to start, move or end,
// when its route may have changed: at each event of its Run (a task Run's
// too, though the cache does not keep it), and of the Runtime Pod the Run
// is assigned to (a Pod's address, readiness or deletion moves its
// routes). Only refused invocations and follows between two streams wait,
// so it holds few channels.
type routeChanges struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	// taskPods is the Pod (namespace/name) of each task Run assigned one
	// and not ended: the cache keeps no task Run, and a Pod's change
	// wakes only the waiters of the Runs on it.
	taskPods map[string]string
	// functionPod is the Pod of the function Run key as the cache has
	// it, "" when it has none; nil before the cache exists.
	functionPod func(key string) string
}

func newRouteChanges() *routeChanges {
	return &routeChanges{waiters: map[string]map[chan struct{}]struct{}{}, taskPods: map[string]string{}}
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

// taskSeen notes where the task Run run is, from an event of its watch,
// and wakes its waiters.
func (c *routeChanges) taskSeen(run *kruntimes.Run, deleted bool) {
	key := run.Namespace + "/" + run.Name
	c.mu.Lock()
	if deleted || run.Status.AssignedPod == "" || lifecycle.IsTerminal(run.Status.Phase) {
		delete(c.taskPods, key)
	} else {
		c.taskPods[key] = run.Namespace + "/" + run.Status.AssignedPod
	}
	c.mu.Unlock()
	c.changed(key)
}

// tasksListed replaces what taskSeen noted with the task Runs of a list
// and wakes every waiter: the events between a broken watch and the list
// that follows it are lost.
func (c *routeChanges) tasksListed(tasks []*kruntimes.Run) {
	pods := make(map[string]string, len(tasks))
	for _, run := range tasks {
		if run.Status.AssignedPod != "" && !lifecycle.IsTerminal(run.Status.Phase) {
			pods[run.Namespace+"/"+run.Name] = run.Namespace + "/" + run.Status.AssignedPod
		}
	}
	c.mu.Lock()
	c.taskPods = pods
	c.mu.Unlock()
	c.changedAll()
}

// podChanged wakes the waiters of the Runs assigned to the Pod podKey.
func (c *routeChanges) podChanged(podKey string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, chans := range c.waiters {
		pod, isTask := c.taskPods[key]
		if !isTask && c.functionPod != nil {
			pod = c.functionPod(key)
		}
		if pod != podKey {
			continue
		}
		for ch := range chans {
			close(ch)
		}
		delete(c.waiters, key)
	}
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

// podHandler wakes, at each change of a Runtime Pod, the waiters of the
// Runs assigned to it. A Run not assigned yet is woken by its own event
// when it is.
func (c *routeChanges) podHandler() cache.ResourceEventHandler {
	wake := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.podChanged(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, cur any) { wake(cur) },
		DeleteFunc: wake,
	}
}
