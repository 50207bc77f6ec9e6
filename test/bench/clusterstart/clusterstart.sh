#!/usr/bin/env bash
# Measures the local cluster's start → APIService Available, host-process
# mode against chart mode, interleaved so that both see the same machine
# load: each round starts bin/localcluster with a fresh state directory in
# one mode, reads "Local cluster up in …" (printed once the APIService is
# Available), stops it with SIGINT, and does the same in the other mode.
# Chart mode also prints how long the APIService took after helm install.
#
#   test/bench/clusterstart/clusterstart.sh [ROUNDS]   (default 2)
#
# Needs bin/ built (make run once, make helm); --build=false, so no build
# is timed.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-2}
go build -o bin/localcluster ./test/localcluster/cmd/localcluster
base=$(mktemp -d "${PWD}/.local/clusterstart-XXXXXX")
trap 'rm -rf "${base}"' EXIT

start_one() { # mode round
  local mode=$1 round=$2 dir="${base}/${1}-${2}" pid line wall0 wall
  mkdir -p "${dir}"
  wall0=$(date +%s.%N)
  bin/localcluster --build=false --kruntimes-apiserver="${mode}" --state-dir="${dir}/state" \
    --kubeconfig-out="${dir}/kubeconfig" --pod-ip-base=127.50.0.0 >"${dir}/out.log" 2>&1 &
  pid=$!
  until grep -q 'Local cluster up in\|localcluster:' "${dir}/out.log"; do
    if ! kill -0 "${pid}" 2>/dev/null; then break; fi
    sleep 0.2
  done
  wall=$(echo "$(date +%s.%N) - ${wall0}" | bc)
  line=$(grep -o 'Local cluster up in [^.]*\.' "${dir}/out.log" || echo "FAILED: $(tail -3 "${dir}/out.log")")
  helm=$(grep -o 'APIService Available [0-9.]*s after helm install' "${dir}/out.log" || true)
  printf '%-9s round %d: %s (wall %.1fs, load %s) %s\n' "${mode}" "${round}" "${line}" "${wall}" "$(cut -d' ' -f1 /proc/loadavg)" "${helm}"
  kill -INT "${pid}" 2>/dev/null || true
  wait "${pid}" 2>/dev/null || true
}

for round in $(seq 1 "${rounds}"); do
  start_one required "${round}"
  start_one chart "${round}"
done
