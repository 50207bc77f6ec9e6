// Package pki issues and loads the certificates kruntimes' mutual TLS runs
// on — a CA, leaf pairs signed by it — and builds the TLS configurations
// of both ends of the apiserver → runtimed hop, which read their files
// again whenever they change, so a rotation needs no restart.
package pki
