package version

import (
	"fmt"
	"runtime"
)

// Set by the linker: -X kruntimes.io/kruntimes/version.gitVersion=v0.1.0
// and -X kruntimes.io/kruntimes/version.gitCommit=<40 hex digits>.
var (
	gitVersion = "v0.0.0-dev"
	gitCommit  = ""
)

// Info is the version of the running binary.
type Info struct {
	// GitVersion is the release (v0.1.0), or a pseudo-version naming the
	// commit for a build between releases.
	GitVersion string `json:"gitVersion"`
	// GitCommit is the full commit hash, empty when not stamped.
	GitCommit string `json:"gitCommit,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the version of the running binary.
func Get() Info {
	return Info{
		GitVersion: gitVersion,
		GitCommit:  gitCommit,
		GoVersion:  runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// String is the one line a --version flag prints.
func (i Info) String() string {
	commit := i.GitCommit
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.GitVersion, commit, i.GoVersion, i.Platform)
}
