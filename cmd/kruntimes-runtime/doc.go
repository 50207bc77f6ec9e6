// Command kruntimes-runtime is the built-in Runtime Server for bash and
// python. It serves proto/runtime.proto on a unix socket inside the Runtime
// Pod, where runtimed is its only client.
package main
