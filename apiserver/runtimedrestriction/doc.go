// Package runtimedrestriction confines the runtimed of a Runtime Pod to the
// Runs assigned to that Pod, as the Node authorizer and the NodeRestriction
// admission plugin confine a kubelet to its Node: an authorizer decides which
// requests such a caller may make, and a validating admission plugin checks
// each write against the stored object.
package runtimedrestriction
