#!/usr/bin/env bash
# Regenerates deepcopy, defaults, conversion, protobuf, OpenAPI, clientset,
# listers, informers and applyconfigurations from the types under apis/.
set -o errexit
set -o nounset
set -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${ROOT}"
MODULE="kruntimes.io/kruntimes"
BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"
# `go list -m` prints an empty Dir for a module that is not in the module
# cache yet, so download it first: on a fresh machine nothing else has.
if [ -z "${CODEGEN_PKG:-}" ]; then
    go mod download k8s.io/code-generator
    CODEGEN_PKG="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
fi
# Pinned generator binaries go to the repo's ignored bin/, not the user's
# GOPATH. hack/verify-codegen.sh points CODEGEN_BIN at the checkout's bin/ so
# that the generators it regenerates with are linked once, not on every run:
# go install leaves an up-to-date binary alone.
export GOBIN="${CODEGEN_BIN:-${ROOT}/bin/codegen}"
mkdir -p "${GOBIN}"

# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"
# The Runtime template embeds core/v1 types; their OpenAPI models already
# exist upstream and live in the read-only module cache.
KUBE_CODEGEN_READONLY_PKGS+=(k8s.io/api/core/v1)

kube::codegen::gen_helpers \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/apis"

# Protobuf encoding (generated.proto, generated.pb.go) for the versioned API
# packages, as Kubernetes' built-in types have it. go-to-protobuf writes
# generated.proto next to the Go sources but runs protoc on
# <output-dir>/<import path>, writing generated.pb.go there, i.e. it expects a
# GOPATH-like tree. Build one in a scratch dir: this module is linked in
# under its path, and the .proto files of the packages we only reference are
# copied from the read-only module cache.
# protoc comes from the system; hack/install-protoc.sh installs it if missing.
command -v protoc >/dev/null 2>&1 || "${ROOT}/hack/install-protoc.sh"
PROTO_PKGS=(kruntimes.io/kruntimes/apis/kruntimes/v1alpha1)
PROTO_DEPS=(
    k8s.io/apimachinery/pkg/util/intstr
    k8s.io/apimachinery/pkg/api/resource
    k8s.io/apimachinery/pkg/runtime/schema
    k8s.io/apimachinery/pkg/runtime
    k8s.io/apimachinery/pkg/apis/meta/v1
    k8s.io/api/core/v1
)
(
    # Pinned by the code-generator module: the generator, its protoc plugin
    # and the goimports it runs on the result.
    cd "${CODEGEN_PKG}"
    GO111MODULE=on go install k8s.io/code-generator/cmd/go-to-protobuf \
        k8s.io/code-generator/cmd/go-to-protobuf/protoc-gen-gogo
    # goimports' own module pins its dependencies (x/telemetry), which the
    # code-generator module does not carry; install that exact version.
    tools_version="$(go list -m -f '{{.Version}}' golang.org/x/tools)"
    (cd / && GO111MODULE=on GOFLAGS= go install "golang.org/x/tools/cmd/goimports@${tools_version}")
)
GOGO_DIR="$(cd "${CODEGEN_PKG}" && go mod download github.com/gogo/protobuf && go list -m -f '{{.Dir}}' github.com/gogo/protobuf)"
PROTO_SCRATCH="$(mktemp -d)"
trap 'rm -rf "${PROTO_SCRATCH}"' EXIT
PROTO_OUT="${PROTO_SCRATCH}/src"
for pkg in "${PROTO_DEPS[@]}"; do
    mkdir -p "${PROTO_OUT}/${pkg}"
    cp "$(go list -f '{{.Dir}}' "${pkg}")/generated.proto" "${PROTO_OUT}/${pkg}/"
done
mkdir -p "${PROTO_OUT}/github.com/gogo/protobuf/gogoproto"
cp "${GOGO_DIR}/gogoproto/gogo.proto" "${PROTO_OUT}/github.com/gogo/protobuf/gogoproto/"
chmod -R u+w "${PROTO_OUT}"
mkdir -p "$(dirname "${PROTO_OUT}/${MODULE}")"
ln -s "${ROOT}" "${PROTO_OUT}/${MODULE}"
PATH="${GOBIN}:${PATH}" "${GOBIN}/go-to-protobuf" \
    --go-header-file "${BOILERPLATE}" \
    --output-dir "${PROTO_OUT}" \
    --proto-import "${GOGO_DIR}/protobuf" \
    --apimachinery-packages "$(printf -- '-%s,' "${PROTO_DEPS[@]}" | sed 's/,$//')" \
    --packages "$(IFS=,; echo "${PROTO_PKGS[*]}")"

kube::codegen::gen_openapi \
    --output-dir "${ROOT}/apiserver/openapi" \
    --output-pkg "${MODULE}/apiserver/openapi" \
    --report-filename "${ROOT}/hack/api-rule-violations.list" \
    --update-report \
    --output-model-name-file "zz_generated.model_name.go" \
    --extra-pkgs k8s.io/api/core/v1 \
    --extra-pkgs k8s.io/apimachinery/pkg/util/intstr \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema <(go run "${MODULE}/apiserver/openapi/cmd/models-schema") \
    --output-dir "${ROOT}/client" \
    --output-pkg "${MODULE}/client" \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/apis"
