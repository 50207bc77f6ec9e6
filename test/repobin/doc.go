// Package repobin builds this repository's commands into its bin/ directory,
// where the local cluster, the e2e suite and the integration tests run them:
// one copy per checkout, relinked only when its sources change, and built with
// the race detector whenever the calling binary is, so that a race-built test
// suite runs race-built components.
package repobin
