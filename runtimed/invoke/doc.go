// Package invoke is runtimed's end of the hop from kruntimes-apiserver to
// the runtimed that owns a function Run: the gRPC server of
// proto/runtimed.proto, which checks the fencing tuple against its own live
// registration before it calls the local Runtime Server.
package invoke
