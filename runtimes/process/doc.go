// Package process starts user programs in their own process group and captures
// their output within fixed bounds. Killing the group, not just the leader, is
// what makes cancellation and timeouts reach everything a script spawned.
package process
