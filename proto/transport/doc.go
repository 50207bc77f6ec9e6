// Package transport holds the gRPC settings both ends of kruntimes' two
// invoke hops use — kruntimes-apiserver → runtimed (mutual TLS) and
// runtimed → Runtime Server (unix socket) — so that every invocation pays
// for its request and its answer on the wire and little else.
package transport
