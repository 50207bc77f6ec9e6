// Command kruntimes-reaper runs one program for the Runtime Server as a child
// subreaper, so that killing it reaches every process the program started
// (see runtimes/process). It ships beside kruntimes-runtime; it imports
// nothing else, so it starts in about a millisecond.
package main

import "kruntimes.io/kruntimes/runtimes/process"

func main() { process.ReaperMain() }
