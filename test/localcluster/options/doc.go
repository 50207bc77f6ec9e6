// Package options holds the flags of the localcluster command and runs the
// local cluster in the foreground with them, printing how to reach it, until
// SIGINT or SIGTERM. test/localcluster/cmd/localcluster only runs the command
// it builds.
package options
