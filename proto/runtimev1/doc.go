// Package runtimev1 holds the generated Go code for proto/runtime.proto, the
// contract between runtimed and a Runtime Server. Regenerate it with
// hack/update-proto.sh; never edit the .pb.go files. notstarted.go, written
// by hand, reads and writes the NotStarted error detail.
package runtimev1
