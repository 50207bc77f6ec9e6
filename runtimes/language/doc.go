// Package language is the contract between the language-neutral Runtime
// Server and its language adapters (runtimes/bash, runtimes/python): how a
// task program becomes a command line, and how a function is loaded and
// invoked. It also holds the invocation bounds every adapter honours.
package language
