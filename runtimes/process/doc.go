// Package process starts user programs and captures their output within fixed
// bounds. Each program runs under a reaper (this binary re-executed, see Init)
// that is a child subreaper: every descendant, including one that left the
// process group or session, stays in the reaper's subtree, so a kill reaches
// all of it and nothing outlives the execution holding its output pipes.
package process
