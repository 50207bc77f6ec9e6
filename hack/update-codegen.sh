#!/usr/bin/env bash
# Regenerates deepcopy, defaults, conversion, OpenAPI, clientset, listers,
# informers and applyconfigurations from the types under apis/.
set -o errexit
set -o nounset
set -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${ROOT}"
MODULE="kruntimes.io/kruntimes"
BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"
CODEGEN_PKG="${CODEGEN_PKG:-$(go list -m -f '{{.Dir}}' k8s.io/code-generator)}"
# Pinned generator binaries go to the repo's ignored bin/, not the user's GOPATH.
export GOBIN="${ROOT}/bin/codegen"
mkdir -p "${GOBIN}"

# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"
# The Runtime template embeds core/v1 types; their OpenAPI models already
# exist upstream and live in the read-only module cache.
KUBE_CODEGEN_READONLY_PKGS+=(k8s.io/api/core/v1)

kube::codegen::gen_helpers \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/apis"

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
