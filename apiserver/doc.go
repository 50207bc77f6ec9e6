// Package apiserver assembles the kruntimes aggregated API server: the scheme
// and codecs of the kruntimes.io group, and the installation of runs,
// runtimes and their subresources over the configured storage backend.
package apiserver
