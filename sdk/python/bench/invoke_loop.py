"""Times ``Function.invoke({})`` of the Python SDK on one function Run, one
in flight, and prints each round trip in microseconds, one per line: the
Python side of test/bench/sdkinvoke, which runs it beside the Go clientset
(test/bench/goinvoke) and the TypeScript SDK (sdk/typescript/bench/
invoke-loop.mjs) with the same flags and output, interleaved::

    PYTHONPATH=sdk/python/src /usr/bin/python3 sdk/python/bench/invoke_loop.py \\
        --kubeconfig .local/kubeconfig -n default --name echo --requests 1000
"""

from __future__ import annotations

import argparse
import sys
import time

import kruntimes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("-n", dest="namespace", default="default")
    parser.add_argument("--name", required=True, help="the function Run to invoke")
    parser.add_argument("--requests", type=int, default=1000, help="invocations to time")
    parser.add_argument("--warmup", type=int, default=50, help="invocations before timing")
    args = parser.parse_args()

    with kruntimes.Client(namespace=args.namespace, kubeconfig=args.kubeconfig) as client:
        fn = client.functions.get(args.name)
        for _ in range(args.warmup):
            fn.invoke({}, timeout=10)
        took = []
        for _ in range(args.requests):
            started = time.perf_counter_ns()
            fn.invoke({}, timeout=10)
            took.append((time.perf_counter_ns() - started) // 1000)
    sys.stdout.write("".join(f"{us}\n" for us in took))
    return 0


if __name__ == "__main__":
    sys.exit(main())
