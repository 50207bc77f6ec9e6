// Package invocation is the contract of one function invocation that every
// side of the invoke path shares — kruntimes-apiserver, runtimed, the
// Runtime Servers and the clients: its bounds, the headers of the HTTP
// protocol, and the names the mutual TLS of the apiserver → runtimed hop
// is checked against.
package invocation
