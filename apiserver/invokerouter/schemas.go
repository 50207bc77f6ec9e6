package invokerouter

import (
	"container/list"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/toolschema"
)

// Bounds of the compiled input schemas kept in memory. Most schemas are a
// few KiB; the budget counts their JSON size, which their compiled form
// grows by a small factor.
const (
	maxCachedSchemas     = 4096
	maxCachedSchemaBytes = 32 << 20
)

// schemaCache keeps the compiled spec.mode.function.schema.input of the
// Runs most recently invoked, by Run UID (a Run's spec never changes, so
// neither does its schema): a bounded LRU, from which a deleted Run's
// entry is removed when the informer sees it go.
type schemaCache struct {
	mu       sync.Mutex
	order    *list.List // of *schemaEntry, most recently used first
	byUID    map[types.UID]*list.Element
	bytes    int
	maxCount int
	maxBytes int
}

type schemaEntry struct {
	uid       types.UID
	size      int
	validator *toolschema.Validator
}

func newSchemaCache(maxCount, maxBytes int) *schemaCache {
	return &schemaCache{order: list.New(), byUID: map[types.UID]*list.Element{}, maxCount: maxCount, maxBytes: maxBytes}
}

// validator returns the compiled form of raw, the input schema of the Run
// uid, compiling it on first use.
func (c *schemaCache) validator(uid types.UID, raw []byte) (*toolschema.Validator, error) {
	c.mu.Lock()
	if e, ok := c.byUID[uid]; ok {
		c.order.MoveToFront(e)
		v := e.Value.(*schemaEntry).validator
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()

	// Compiled outside the lock: two first invocations may both compile,
	// and the later one's result is kept.
	v, err := toolschema.Compile(raw)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byUID[uid]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*schemaEntry).validator, nil
	}
	c.byUID[uid] = c.order.PushFront(&schemaEntry{uid: uid, size: len(raw), validator: v})
	c.bytes += len(raw)
	for c.order.Len() > 1 && (c.order.Len() > c.maxCount || c.bytes > c.maxBytes) {
		c.removeElement(c.order.Back())
	}
	return v, nil
}

// forget removes the Run uid's schema.
func (c *schemaCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byUID[uid]; ok {
		c.removeElement(e)
	}
}

func (c *schemaCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *schemaCache) removeElement(e *list.Element) {
	entry := c.order.Remove(e).(*schemaEntry)
	delete(c.byUID, entry.uid)
	c.bytes -= entry.size
}
