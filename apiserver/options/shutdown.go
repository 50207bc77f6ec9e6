package options

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
)

// ShutdownOptions say how a replica leaves: first out of its Service, then
// refusing new requests with a retryable answer while the ones in flight
// finish.
type ShutdownOptions struct {
	// DelayDuration is how long after SIGTERM the server keeps serving
	// everything while /readyz fails, so that endpoints (and with them
	// kube-apiserver's aggregation) stop sending it new connections.
	DelayDuration time.Duration
	// SendRetryAfter keeps listening after the delay and answers every new
	// request 429 + Retry-After with Connection: close until the requests
	// in flight drained. Without it the listener closes at the end of the
	// delay, and a request kube-apiserver sends on a pooled connection at
	// that moment is reset: its caller gets a plain 503, which says nothing
	// about whether an invocation ran.
	SendRetryAfter bool
}

// NewShutdownOptions returns the defaults: no delay (a single process on a
// laptop), a retryable answer after it.
func NewShutdownOptions() *ShutdownOptions {
	return &ShutdownOptions{SendRetryAfter: true}
}

// AddFlags registers the shutdown flags.
func (o *ShutdownOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.DelayDuration, "shutdown-delay-duration", o.DelayDuration,
		"After SIGTERM, how long the server keeps serving every request while /readyz fails, so that its Service stops sending it new ones; longer than endpoint propagation (the chart uses 5s). Invocations in flight then finish, within the Pod's termination grace period.")
	fs.BoolVar(&o.SendRetryAfter, "shutdown-send-retry-after", o.SendRetryAfter,
		"After --shutdown-delay-duration, keep listening until the requests in flight drained, answering new ones 429 with Retry-After and Connection: close (so callers retry on another replica); false closes the listener at once, and requests already on their way are reset.")
}

// Validate checks the flags.
func (o *ShutdownOptions) Validate() []error {
	if o.DelayDuration < 0 {
		return []error{fmt.Errorf("--shutdown-delay-duration must not be negative, got %s", o.DelayDuration)}
	}
	return nil
}

// ApplyTo sets the generic server's shutdown settings.
func (o *ShutdownOptions) ApplyTo(c *genericapiserver.Config) {
	c.ShutdownDelayDuration = o.DelayDuration
	c.ShutdownSendRetryAfter = o.SendRetryAfter
}
