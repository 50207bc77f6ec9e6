"""Invoke latency of the Python SDK at 1 in flight, beside the Go client and
krt invoke on the same no-op function, in one run (a report, not a test).

Paths, each timed per call on the caller's side:

- ``sdk``: ``Function.invoke({})`` — JSON encoding, headers, the POST on the
  Kubernetes client's urllib3 pool (keep-alive, HTTP/1.1), decoding;
- ``raw``: the same POST on the same pool without the SDK around it,
  alternating call by call with ``sdk`` so both see the same load:
  ``sdk - raw`` (latency, and this process's CPU per call) is the SDK's own
  overhead;
- ``go``: the generated Go clientset's ``Runs(ns).Invoke`` (test/bench/goinvoke,
  HTTP/2, keep-alive), as krt invoke uses it;
- ``krt``: ``bin/krt invoke`` as a process per call (start-up included).

Against `make run`'s cluster, from the repository root::

    make build && go build -o bin/goinvoke ./test/bench/goinvoke
    PYTHONPATH=sdk/python/src /usr/bin/python3 sdk/python/bench/invoke_bench.py \\
        --kubeconfig .local/kubeconfig --runtime python --requests 2000
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import urllib3

import kruntimes
from kruntimes._transport import runs_path

NOOP = "def handle(event, context):\n    return None\n"


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_ms)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return p50, p99


def time_sdk_and_raw(client: kruntimes.Client, fn: kruntimes.Function, n: int) -> tuple[list[float], list[float],
                                                                                    float, float]:
    """Alternates one SDK invoke and one raw POST, so both see the same
    load; returns their latencies (ms) and this process's CPU ms per call."""
    transport = client._transport
    path = runs_path(fn.namespace, fn.name, "invoke")
    sdk, raw = [], []
    sdk_cpu = raw_cpu = 0.0
    for _ in range(n):
        cpu, started = time.process_time(), time.perf_counter()
        fn.invoke({}, timeout=10)
        sdk.append((time.perf_counter() - started) * 1000)
        sdk_cpu += time.process_time() - cpu
        cpu, started = time.process_time(), time.perf_counter()
        resp = transport.pool.request("POST", transport.host + path + "?timeout=10s", body=b"{}",
                                      headers={**transport._headers(None), "Content-Type": "application/json"},
                                      retries=False, redirect=False, timeout=urllib3.Timeout(connect=30, read=30))
        assert resp.status == 200, resp.data
        raw.append((time.perf_counter() - started) * 1000)
        raw_cpu += time.process_time() - cpu
    return sdk, raw, sdk_cpu * 1000 / n, raw_cpu * 1000 / n


def time_go(binary: str, kubeconfig: str, fn: kruntimes.Function, n: int) -> list[float]:
    done = subprocess.run([binary, "--kubeconfig", kubeconfig, "-n", fn.namespace, "--name", fn.name,
                           "--requests", str(n), "--warmup", "50"], capture_output=True, text=True, check=True)
    return [int(line) / 1000 for line in done.stdout.split()]


def time_krt(binary: str, kubeconfig: str, fn: kruntimes.Function, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run([binary, "invoke", fn.name, "-n", fn.namespace, "--kubeconfig", kubeconfig, "--data", "{}",
                        "--timeout", "10s"], capture_output=True, check=True)
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default=None)
    parser.add_argument("--runtime", default="python")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--krt-requests", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every path, interleaved")
    parser.add_argument("--bin", default="bin", help="directory of krt and goinvoke")
    args = parser.parse_args()
    bindir = pathlib.Path(args.bin)

    client = kruntimes.Client(namespace=args.namespace, kubeconfig=args.kubeconfig)
    results: dict[str, list[list[float]]] = {"sdk": [], "raw": [], "go": [], "krt": []}
    with client.functions.create(generate_name="bench-noop-", runtime=args.runtime, source=NOOP,
                                 handler="main.handle") as fn:
        fn.wait_ready(timeout=120)
        time_sdk_and_raw(client, fn, 100)
        cpu: list[tuple[float, float]] = []
        for _ in range(args.rounds):
            sdk, raw, sdk_cpu, raw_cpu = time_sdk_and_raw(client, fn, args.requests)
            results["sdk"].append(sdk)
            results["raw"].append(raw)
            cpu.append((sdk_cpu, raw_cpu))
            results["go"].append(time_go(str(bindir / "goinvoke"), args.kubeconfig, fn, args.requests))
            results["krt"].append(time_krt(str(bindir / "krt"), args.kubeconfig, fn, args.krt_requests))
    client.close()
    report = {}
    print(f"{'path':<6} {'round':>5} {'n':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for path, rounds in results.items():
        for i, samples in enumerate(rounds):
            p50, p99 = percentiles(samples)
            report.setdefault(path, []).append({"p50": round(p50, 3), "p99": round(p99, 3), "n": len(samples)})
            print(f"{path:<6} {i + 1:>5} {len(samples):>6} {p50:>8.3f} {p99:>8.3f}")
    for i in range(args.rounds):
        overhead = report["sdk"][i]["p50"] - report["raw"][i]["p50"]
        print(f"round {i + 1}: SDK overhead at p50 (sdk - raw) = {overhead:.3f} ms; "
              f"sdk - go = {report['sdk'][i]['p50'] - report['go'][i]['p50']:.3f} ms; "
              f"client CPU per call sdk {cpu[i][0]:.3f} ms, raw {cpu[i][1]:.3f} ms")
    json.dump(report, sys.stderr)
    print(file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
