package version

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestString(t *testing.T) {
	tests := []struct {
		name string
		info Info
		want string
	}{
		{"stamped build names its release and commit", Info{GitVersion: "v0.1.0", GitCommit: "0123abc", GoVersion: "go1.26.0", Platform: "linux/amd64"}, "v0.1.0 (commit 0123abc, go1.26.0, linux/amd64)"},
		{"unstamped build says the commit is unknown", Info{GitVersion: "v0.0.0-dev", GoVersion: "go1.26.0", Platform: "linux/arm64"}, "v0.0.0-dev (commit unknown, go1.26.0, linux/arm64)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.info.String())
		})
	}
}

func TestGetReportsTheRunningToolchain(t *testing.T) {
	got := Get()
	assert.Equal(t, runtime.Version(), got.GoVersion)
	assert.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, got.Platform)
	assert.NotEmpty(t, got.GitVersion)
}
