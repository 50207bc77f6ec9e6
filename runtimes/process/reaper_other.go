//go:build !linux

package process

const reaperSupported = false

func runReaper([]string) int { return 127 }
