package transport

import "google.golang.org/grpc"

// window is the fixed HTTP/2 flow-control window of a stream and of a
// connection: room for the largest invocation (1 MiB of input, or 1 MiB of
// output with its logs and outputs) in one go.
//
// A fixed window turns off gRPC's bandwidth-delay estimator, which on
// these hops costs more than it gains: on a connection carrying one small
// call after another it samples every call, adding a window update, a ping
// and its acknowledgement each way (about three more writes and six more
// reads per hop, and the wake-ups behind them) to every invocation, to size
// windows for links far longer than a unix socket or a cluster's Pod
// network.
const window = 2 << 20

// ServerOptions are the options of a gRPC server at the far end of a hop:
// runtimed's invoke server, a Runtime Server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StaticStreamWindowSize(window),
		grpc.StaticConnWindowSize(window),
	}
}

// DialOptions are the options of a client that calls across a hop: the
// apiserver's runtimed client, runtimed's Runtime Server client.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStaticStreamWindowSize(window),
		grpc.WithStaticConnWindowSize(window),
	}
}
