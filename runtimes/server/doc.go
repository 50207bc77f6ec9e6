// Package server implements the Runtime Server gRPC contract
// (proto/runtime.proto): task execution for the Runtime service and the
// registration/invocation state machine for FunctionRuntime. It is language
// neutral; a runtimes/language adapter supplies command lines and functions.
package server
