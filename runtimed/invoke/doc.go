// Package invoke is the hop from kruntimes-apiserver to the runtimed that
// owns a function Run: runtimed's gRPC server (proto/runtimed.proto), which
// checks the fencing tuple against its own live registration before it
// calls the local Runtime Server, and the mutual TLS both ends of the hop
// speak, with certificates reloaded from disk when they change.
package invoke
