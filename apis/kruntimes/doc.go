// +k8s:deepcopy-gen=package
// +groupName=kruntimes.io

// Package kruntimes is the internal version of the kruntimes.io API, the hub
// every served version converts to and the strategies validate.
package kruntimes
