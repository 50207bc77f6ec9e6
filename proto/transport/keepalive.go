package transport

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// Keepalive of the hop from kruntimes-apiserver to runtimed, which crosses
// the Pod network: a node that powers off or is cut off answers nothing,
// not even a reset, and without pings an invocation in flight to it would
// wait for its whole deadline (a 504, "may have run") and every later one
// would be sent into the same silence.
const (
	// KeepaliveTime is how long a connection may be silent before the
	// apiserver pings it, with or without a call in flight: gRPC's
	// smallest.
	KeepaliveTime = 10 * time.Second
	// KeepaliveTimeout is how long a ping waits for its answer before the
	// connection is closed: a call in flight ends Unavailable, and the next
	// ones are refused at once, never sent, until runtimed answers again.
	KeepaliveTimeout = 5 * time.Second
	// ConnectTimeout bounds the setup of a connection (TCP and TLS), so a
	// silent Pod fails a reconnection quickly rather than after 20 s.
	ConnectTimeout = 5 * time.Second
	// keepaliveMinTime is the most often runtimed lets a client ping: half
	// of KeepaliveTime, so the apiserver's pings are never taken for abuse
	// (which closes the connection with GOAWAY too_many_pings).
	keepaliveMinTime = KeepaliveTime / 2
)

// RuntimedDialOptions are the options of the apiserver's connections to
// runtimed: DialOptions, pings every KeepaliveTime of silence (idle too)
// answered within KeepaliveTimeout, and reconnections bounded by
// ConnectTimeout, retried at most every 5 s.
func RuntimedDialOptions() []grpc.DialOption {
	return append(DialOptions(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                KeepaliveTime,
			Timeout:             KeepaliveTimeout,
			PermitWithoutStream: true,
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: ConnectTimeout,
		}),
	)
}

// RuntimedServerOptions are the options of runtimed's invoke server:
// ServerOptions and an enforcement policy that accepts the pings
// RuntimedDialOptions sends, idle connections included.
func RuntimedServerOptions() []grpc.ServerOption {
	return append(ServerOptions(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             keepaliveMinTime,
			PermitWithoutStream: true,
		}),
	)
}
