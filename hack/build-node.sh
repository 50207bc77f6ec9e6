#!/usr/bin/env bash
# Installs what the local cluster's real node (make run NODE=containerd)
# runs, besides the control plane of hack/build-kube.sh:
#   - kubelet, kube-scheduler and kube-proxy (k8s.io/kubernetes v1.37.2, the
#     version of hack/build-kube.sh) from the hack/nodetools module into bin/;
#   - containerd and containerd-shim-runc-v2 from the Go module
#     github.com/containerd/containerd/v2 into bin/, built with `go install
#     module@version`, so with exactly the dependencies of containerd's own
#     go.mod (Debian's containerd, 1.6, is below what kubelet v1.37 supports);
#   - runc from the Go module github.com/opencontainers/runc into bin/ (with
#     cgo and libseccomp; Debian bookworm's runc 1.1.5 fails to start
#     containerd 2.4's sandboxes: "can't get final child's PID from pipe");
#   - iptables, the CNI plugins (containernetworking-plugins: bridge,
#     host-local, loopback, portmap in /usr/lib/cni), and runc's build
#     dependencies (gcc, pkg-config, libseccomp-dev) from Debian.
# A second run builds nothing unless hack/nodetools, the containerd version
# or this script changed (--force rebuilds). Builds run at nice 19 and print
# progress every 50 compiled packages.
#
# Usage: hack/build-node.sh [--force]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/hack/nodetools"
BIN="${KRUNTIMES_BIN_DIR:-${ROOT}/bin}"
STAMP="${BIN}/.node-tools.stamp"

KUBE_VERSION="v1.37.2"
KUBE_MAJOR="1"
KUBE_MINOR="37"
CONTAINERD_VERSION="v2.4.2"
RUNC_VERSION="v1.5.3"
DEBIAN_PACKAGES=(iptables containernetworking-plugins gcc libc6-dev pkg-config libseccomp-dev)

# name=package pairs of the hack/nodetools module.
KUBE_TARGETS=(
  "kubelet=k8s.io/kubernetes/cmd/kubelet"
  "kube-proxy=k8s.io/kubernetes/cmd/kube-proxy"
  "kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
)
CONTAINERD_TARGETS=(containerd containerd-shim-runc-v2)

log() { printf '[build-node %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# progress reads go build -v and prints every 50th package.
progress() {
  awk -v name="$1" '/^(#|go: |.*\.go:[0-9]+)/ { print; next } { n++; if (n % 50 == 0) { printf "[build-node] %s: compiled %d packages\n", name, n; fflush() } }'
}

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; fi

# Debian packages first: quick, and needed whatever else is cached.
missing_pkgs=()
command -v iptables >/dev/null 2>&1 || missing_pkgs+=(iptables)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback && -x /usr/lib/cni/portmap ]] || missing_pkgs+=(containernetworking-plugins)
command -v gcc >/dev/null 2>&1 || missing_pkgs+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || missing_pkgs+=(pkg-config)
pkg-config --exists libseccomp 2>/dev/null || missing_pkgs+=(libseccomp-dev)
if [[ ${#missing_pkgs[@]} -gt 0 ]]; then
  if ! command -v apt-get >/dev/null 2>&1 || [[ "$(id -u)" != 0 ]]; then
    echo "the real node needs ${DEBIAN_PACKAGES[*]}: install them as root (apt-get install ${missing_pkgs[*]})" >&2
    exit 1
  fi
  log "installing Debian packages: ${missing_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null
fi

stamp_value() {
  { cat "${TOOLS}/go.mod" "${TOOLS}/go.sum" "${BASH_SOURCE[0]}"; echo "${CONTAINERD_VERSION} ${RUNC_VERSION}"; } | sha256sum | cut -d' ' -f1
}

mkdir -p "${BIN}"
want="$(stamp_value)"
missing=()
for t in "${KUBE_TARGETS[@]}"; do [[ -x "${BIN}/${t%%=*}" ]] || missing+=("${t%%=*}"); done
for t in "${CONTAINERD_TARGETS[@]}" runc; do [[ -x "${BIN}/${t}" ]] || missing+=("${t}"); done
if [[ ${force} -eq 0 && ${#missing[@]} -eq 0 && -f "${STAMP}" && "$(cat "${STAMP}")" == "${want}" ]]; then
  log "node binaries up to date in ${BIN#"${ROOT}/"}/ (kubelet ${KUBE_VERSION}, containerd ${CONTAINERD_VERSION}); nothing to build"
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

total=$(( ${#KUBE_TARGETS[@]} + 2 ))
log "building ${total} targets into ${BIN#"${ROOT}/"}/ (at nice 19)"
start=$(date +%s)
cd "${TOOLS}"
log "downloading modules"
go mod download
i=0
for t in "${KUBE_TARGETS[@]}"; do
  i=$((i + 1))
  name="${t%%=*}"
  pkg="${t#*=}"
  t0=$(date +%s)
  log "[${i}/${total}] ${name} (${pkg})"
  set +e
  CGO_ENABLED=0 nice -n 19 go build -v -trimpath -ldflags "${ldflags}" -o "${BIN}/${name}.tmp" "${pkg}" 2>&1 | progress "${name}"
  status=${PIPESTATUS[0]}
  set -e
  if [[ ${status} -ne 0 ]]; then
    rm -f "${BIN}/${name}.tmp"
    log "FAILED: ${name} (go build exit ${status})"
    exit 1
  fi
  mv "${BIN}/${name}.tmp" "${BIN}/${name}"
  log "[${i}/${total}] ${name} done in $(( $(date +%s) - t0 ))s"
done

# go_install NAME CGO TAGS LDFLAGS MODULE_PACKAGE... builds with `go install
# module@version` outside any module, so with the module's own go.mod, into
# the temporary GOBIN.
gobin="$(mktemp -d "${BIN}/.node-tools.XXXXXX")"
trap 'rm -rf "${gobin}"' EXIT
go_install() {
  local name="$1" cgo="$2" tags="$3" ldflags="$4"
  shift 4
  set +e
  (cd / && CGO_ENABLED="${cgo}" GOBIN="${gobin}" GOFLAGS=-buildvcs=false nice -n 19 \
    go install -v -trimpath -tags "${tags}" -ldflags "${ldflags}" "$@" 2>&1 | progress "${name}")
  local status=${PIPESTATUS[0]}
  set -e
  if [[ ${status} -ne 0 ]]; then
    log "FAILED: ${name} (go install exit ${status})"
    exit 1
  fi
}

i=$((i + 1))
t0=$(date +%s)
log "[${i}/${total}] ${CONTAINERD_TARGETS[*]} (github.com/containerd/containerd/v2@${CONTAINERD_VERSION})"
# Without cgo the btrfs snapshotter is left out; the node uses overlayfs.
pkgs=()
for t in "${CONTAINERD_TARGETS[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/${t}@${CONTAINERD_VERSION}"); done
go_install containerd 0 "" "-X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION#v}" "${pkgs[@]}"
for t in "${CONTAINERD_TARGETS[@]}"; do mv "${gobin}/${t}" "${BIN}/${t}"; done
log "[${i}/${total}] containerd done in $(( $(date +%s) - t0 ))s"

i=$((i + 1))
t0=$(date +%s)
log "[${i}/${total}] runc (github.com/opencontainers/runc@${RUNC_VERSION}, cgo, seccomp)"
go_install runc 1 seccomp "-X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@${RUNC_VERSION}"
mv "${gobin}/runc" "${BIN}/runc"
log "[${i}/${total}] runc done in $(( $(date +%s) - t0 ))s"

echo "${want}" > "${STAMP}"
log "all done in $(( $(date +%s) - start ))s"
"${BIN}/kubelet" --version 2>/dev/null | sed 's/^/[build-node] /' || true
"${BIN}/containerd" --version 2>/dev/null | sed 's/^/[build-node] /' || true
"${BIN}/runc" --version 2>/dev/null | head -1 | sed 's/^/[build-node] /' || true
