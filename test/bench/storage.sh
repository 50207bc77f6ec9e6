#!/usr/bin/env bash
# Benchmarks the embedded storage against etcd3 (an in-process etcd on the
# same machine, fsync on both sides) in one run: the upstream storage
# benchmarks (RunBenchmarkWriteThroughput, RunBenchmarkStoreList,
# RunBenchmarkStoreStats) and the end-to-end Run writes through the apiserver
# with 1, 16 and 64 writers plus paced creates at 1,000/s. Prints every figure
# for both backends and their ratio (embedded / etcd3). Report, don't assert.
#
# Usage: test/bench/storage.sh [benchtime]   (default 2000x)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
benchtime="${1:-2000x}"
out="$(mktemp)"
trap 'rm -f "${out}"' EXIT

echo "storage benchmarks (benchtime ${benchtime}) on $(nproc) cores, $(date -u +%FT%TZ)" >&2
go test ./registry/storage/embedded -tags etcdcompare -run '^$' \
    -bench 'Compare(Create|WriteThroughput|StoreList|StoreStats)' -benchtime "${benchtime}" 2>/dev/null | tee -a "${out}" >&2
go test ./test/integration -run '^$' -bench 'BenchmarkRunWrites' -benchtime "${benchtime}" 2>/dev/null | tee -a "${out}" >&2

# Lines look like: BenchmarkX/<backend>/<case>-2  N  123 ns/op  4.5 unit ...
awk '
/^Benchmark/ {
    name = $1; sub(/-[0-9]+$/, "", name)
    backend = ""
    if (name ~ /\/embedded/) { backend = "embedded"; sub(/\/embedded/, "", name) }
    if (name ~ /\/etcd3/)    { backend = "etcd3";    sub(/\/etcd3/, "", name) }
    if (backend == "") next
    sub(/^Benchmark/, "", name)
    for (i = 3; i < NF; i += 2) {
        key = name " " $(i+1)
        if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        value[key, backend] = $i
    }
}
END {
    printf "%-58s %14s %14s %8s\n", "benchmark / metric", "embedded", "etcd3", "ratio"
    for (k = 1; k <= n; k++) {
        key = order[k]; e = value[key, "embedded"]; d = value[key, "etcd3"]
        ratio = (e != "" && d != "" && d + 0 != 0) ? sprintf("%.2f", e / d) : "-"
        printf "%-58s %14s %14s %8s\n", key, e, d, ratio
    }
}' "${out}"
