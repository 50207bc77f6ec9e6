#!/usr/bin/env bash
# Installs the protobuf toolchain that hack/update-proto.sh needs:
#   - protoc from Debian's protobuf-compiler package when it is not on PATH;
#   - protoc-gen-go and protoc-gen-go-grpc at pinned versions into the
#     repo-local, git-ignored bin/ directory, so generated code does not depend
#     on whatever a developer happens to have installed globally.
# Pins live here and nowhere else; bump them together with the regenerated code.
set -o errexit -o nounset -o pipefail

PROTOC_GEN_GO_VERSION="v1.36.12"      # keep equal to google.golang.org/protobuf in go.mod
PROTOC_GEN_GO_GRPC_VERSION="v1.6.2"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN_DIR="${REPO_ROOT}/bin"
mkdir -p "${BIN_DIR}"
# bin/ holds local tools only; keep it out of git without touching .gitignore.
[[ -f "${BIN_DIR}/.gitignore" ]] || echo "*" >"${BIN_DIR}/.gitignore"

if ! command -v protoc >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "protoc is missing and apt-get is unavailable: install protoc (>= 3.15) by hand" >&2
    exit 1
  fi
  SUDO=""
  if [[ "$(id -u)" != "0" ]]; then SUDO="sudo"; fi
  ${SUDO} apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq protobuf-compiler >/dev/null
fi

# go install writes into GOBIN; a version stamp file makes re-runs free.
install_plugin() {
  local name="$1" pkg="$2" version="$3"
  local stamp="${BIN_DIR}/.${name}.version"
  if [[ -x "${BIN_DIR}/${name}" && -f "${stamp}" && "$(cat "${stamp}")" == "${version}" ]]; then
    return
  fi
  GOBIN="${BIN_DIR}" GOFLAGS=-mod=mod go install "${pkg}@${version}"
  echo "${version}" >"${stamp}"
}

install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "${PROTOC_GEN_GO_VERSION}"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "${PROTOC_GEN_GO_GRPC_VERSION}"
