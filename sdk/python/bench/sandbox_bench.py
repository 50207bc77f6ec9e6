"""Sandbox latency through the Python SDK (a report, not a test):

- ``create``: ``client.sandbox()`` until Ready, then the first
  ``run_code("1+1")`` answered — what an agent waits for a fresh sandbox;
- ``run_code``: ``sb.run_code("1+1")`` round trips on a warm sandbox;
- ``line``: a line a background command prints (one every 20 ms) until
  the ``on_stdout`` callback gets it, through runs/log?command= (the
  command prints its wall clock; both ends read the same machine's).

Against `make run`'s cluster with a Runtime of capacity.runs 1 (see
examples/agent/README.md for one), from the repository root::

    PYTHONPATH=sdk/python/src /usr/bin/python3 sdk/python/bench/sandbox_bench.py \\
        --kubeconfig .local/kubeconfig --runtime sandbox --sandboxes 10 --calls 500 --lines 500
"""

from __future__ import annotations

import argparse
import statistics
import time

import kruntimes


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(name: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(f"{name:10} n={len(ms):5}  p50 {statistics.median(ms):8.2f} ms  p99 {quantile(ms, 0.99):8.2f} ms  "
          f"max {max(ms):8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace")
    parser.add_argument("--runtime", default="sandbox")
    parser.add_argument("--sandboxes", type=int, default=10, help="sandboxes created one after another")
    parser.add_argument("--calls", type=int, default=500, help="run_code calls on one warm sandbox")
    parser.add_argument("--lines", type=int, default=500, help="lines a background command prints for the callback")
    args = parser.parse_args()
    with kruntimes.Client(namespace=args.namespace, kubeconfig=args.kubeconfig) as client:
        created = []
        for _ in range(args.sandboxes):
            start = time.perf_counter()
            with client.sandbox(args.runtime, ready_timeout=180) as sb:
                assert sb.run_code("1+1").result == 2
                created.append(time.perf_counter() - start)
        report("create", created)
        with client.sandbox(args.runtime, ready_timeout=180) as sb:
            sb.run_code("1+1")
            calls = []
            for _ in range(args.calls):
                start = time.perf_counter()
                sb.run_code("1+1")
                calls.append(time.perf_counter() - start)
            lines: list[float] = []
            printer = f"import time\nfor i in range({args.lines}):\n    print(time.time(), flush=True)\n    time.sleep(0.02)"
            r = sb.commands.run(["python3", "-c", printer], timeout=args.lines * 0.02 + 60,
                                on_stdout=lambda line: lines.append(time.time() - float(line)))
            assert r.exit_code == 0 and len(lines) == args.lines, (r, len(lines))
        report("run_code", calls)
        report("line", lines)


if __name__ == "__main__":
    main()
