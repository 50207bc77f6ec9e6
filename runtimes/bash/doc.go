// Package bash is the Bash language adapter of the built-in Runtime Server.
// Tasks run through bash; a function handler is a script under the working
// directory, run once per invocation with the input on stdin and its stdout
// taken as the output.
package bash
