// Package integration runs the real kruntimes-apiserver, with its real
// embedded storage, on loopback and drives it only through the generated
// clientset and raw REST calls, as users and components do.
package integration
