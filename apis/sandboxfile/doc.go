// Package sandboxfile is the contract of the streamed path of a sandbox's
// files (runs/files) that every side shares — kruntimes-apiserver,
// runtimed, the Runtime Server and the clients: which handler serves it,
// how large a chunk is, how long a path may be.
package sandboxfile
