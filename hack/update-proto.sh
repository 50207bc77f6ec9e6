#!/usr/bin/env bash
# Regenerates the Go code for proto/*.proto with the pinned toolchain from
# hack/install-protoc.sh. Generated files are committed; never edit them.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

"${REPO_ROOT}/hack/install-protoc.sh"
export PATH="${REPO_ROOT}/bin:${PATH}"

OUT_DIR="${1:-${REPO_ROOT}}"

# module= strips the Go module prefix from go_package, so output lands at
# proto/<package>/ relative to OUT_DIR.
protoc \
  --proto_path=proto \
  --go_out="${OUT_DIR}" --go_opt=module=kruntimes.io/kruntimes \
  --go-grpc_out="${OUT_DIR}" --go-grpc_opt=module=kruntimes.io/kruntimes \
  proto/runtime.proto proto/runtimed.proto
