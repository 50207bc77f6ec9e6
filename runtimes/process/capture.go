package process

import "sync"

// Capture is an io.Writer that keeps at most Limit bytes of what it is given:
// the first Limit bytes (head) or the last Limit bytes (tail). It is safe for
// concurrent use.
type Capture struct {
	mu       sync.Mutex
	limit    int
	keepTail bool
	buf      []byte
	total    int64
}

// NewHeadCapture keeps the first limit bytes; use it where what comes first is
// the answer, like a function's output.
func NewHeadCapture(limit int) *Capture { return &Capture{limit: limit} }

// NewTailCapture keeps the last limit bytes; use it for logs, where the end
// explains a failure.
func NewTailCapture(limit int) *Capture { return &Capture{limit: limit, keepTail: true} }

// Write never fails, so a chatty program is never blocked or broken by it.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if !c.keepTail {
		if room := c.limit - len(c.buf); room > 0 {
			c.buf = append(c.buf, p[:min(room, len(p))]...)
		}
		return len(p), nil
	}
	if len(p) >= c.limit {
		c.buf = append(c.buf[:0], p[len(p)-c.limit:]...)
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	// Compact only once the slack reaches the limit, so appends stay amortized O(1).
	if len(c.buf) >= 2*c.limit {
		c.buf = append(c.buf[:0], c.buf[len(c.buf)-c.limit:]...)
	}
	return len(p), nil
}

// Bytes returns a copy of the kept bytes.
func (c *Capture) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	if c.keepTail && len(b) > c.limit {
		b = b[len(b)-c.limit:]
	}
	return append([]byte(nil), b...)
}

// Truncated reports whether bytes were dropped.
func (c *Capture) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total > int64(c.limit)
}

// Total returns how many bytes were written in all.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
