// Package logfanout lets the follows of one running task attempt, or of one
// function Run's registration, in one kruntimes-apiserver share one
// upstream FollowLog stream: the first follower opens it, later ones read
// what it brings from their own offset, and the last one to leave closes
// it.
package logfanout
