#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl (k8s.io/kubernetes
# v1.37.2) and etcd (go.etcd.io/etcd/server/v3) from the hack/tools module into
# bin/. A second run rebuilds nothing unless the tools module or this script
# changed. The cold build takes ~15 minutes on 2 cores; it runs at nice 19.
#
# Usage: hack/build-kube.sh [--force]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/hack/tools"
BIN="${KRUNTIMES_BIN_DIR:-${ROOT}/bin}"
STAMP="${BIN}/.kube-tools.stamp"

KUBE_VERSION="v1.37.2"
KUBE_MAJOR="1"
KUBE_MINOR="37"

# name=package pairs, built in this order (kubectl first: it is the quickest
# to be useful).
TARGETS=(
  "kubectl=k8s.io/kubernetes/cmd/kubectl"
  "etcd=go.etcd.io/etcd/server/v3"
  "kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager"
)

log() { printf '[build-kube %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

stamp_value() {
  cat "${TOOLS}/go.mod" "${TOOLS}/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1
}

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi

mkdir -p "${BIN}"
want="$(stamp_value)"
missing=()
for t in "${TARGETS[@]}"; do
  name="${t%%=*}"
  [[ -x "${BIN}/${name}" ]] || missing+=("${name}")
done
if [[ ${force} -eq 0 && ${#missing[@]} -eq 0 && -f "${STAMP}" && "$(cat "${STAMP}")" == "${want}" ]]; then
  log "kube binaries up to date in ${BIN#"${ROOT}/"}/ (${KUBE_VERSION}); nothing to build"
  exit 0
fi
rm -f "${STAMP}"

ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
  ldflags+=" -X ${pkg}.gitMajor=${KUBE_MAJOR}"
  ldflags+=" -X ${pkg}.gitMinor=${KUBE_MINOR}"
  ldflags+=" -X ${pkg}.gitTreeState=clean"
  ldflags+=" -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
done

log "building ${#TARGETS[@]} binaries into ${BIN#"${ROOT}/"}/ (cold: ~15 min on 2 cores, at nice 19)"
start=$(date +%s)
cd "${TOOLS}"
log "downloading modules"
go mod download
i=0
for t in "${TARGETS[@]}"; do
  i=$((i + 1))
  name="${t%%=*}"
  pkg="${t#*=}"
  t0=$(date +%s)
  log "[${i}/${#TARGETS[@]}] ${name} (${pkg})"
  # -v prints each package as it is compiled; report every 50th so a cold
  # build visibly makes progress without flooding the terminal.
  set +e
  CGO_ENABLED=0 nice -n 19 go build -v -trimpath -ldflags "${ldflags}" -o "${BIN}/${name}.tmp" "${pkg}" 2>&1 |
    awk -v name="${name}" '/^(#|go: |.*\.go:[0-9]+)/ { print; next } { n++; if (n % 50 == 0) { printf "[build-kube] %s: compiled %d packages\n", name, n; fflush() } }'
  status=${PIPESTATUS[0]}
  set -e
  if [[ ${status} -ne 0 ]]; then
    rm -f "${BIN}/${name}.tmp"
    log "FAILED: ${name} (go build exit ${status})"
    exit 1
  fi
  mv "${BIN}/${name}.tmp" "${BIN}/${name}"
  log "[${i}/${#TARGETS[@]}] ${name} done in $(( $(date +%s) - t0 ))s"
done
echo "${want}" > "${STAMP}"
log "all done in $(( $(date +%s) - start ))s"
"${BIN}/kubectl" version --client 2>/dev/null | sed 's/^/[build-kube] /' || true
