// Package version is the kruntimes release and commit a binary was built
// from. The linker stamps both (hack/images and the Dockerfiles pass -X for
// each); a binary built with a plain go build reports a development version.
package version
