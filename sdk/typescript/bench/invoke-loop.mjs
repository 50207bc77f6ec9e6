// Times fn.invoke({}) of the TypeScript SDK on one function Run, one in
// flight, and prints each round trip in microseconds, one per line: the
// TypeScript side of test/bench/sdkinvoke, which runs it beside the Go
// clientset (test/bench/goinvoke) and the Python SDK
// (sdk/python/bench/invoke_loop.py) with the same flags and output,
// interleaved. Needs the built package (make ts-deps).
//
//   node sdk/typescript/bench/invoke-loop.mjs --kubeconfig .local/kubeconfig -n default --name echo --requests 1000
import { parseArgs } from 'node:util';

import { Client } from '../dist/index.js';

const { values } = parseArgs({
  options: {
    kubeconfig: { type: 'string' },
    n: { type: 'string', short: 'n', default: 'default' },
    name: { type: 'string' },
    requests: { type: 'string', default: '1000' },
    warmup: { type: 'string', default: '50' },
  },
});
if (!values.kubeconfig || !values.name) {
  console.error('usage: invoke-loop.mjs --kubeconfig K [-n NS] --name RUN [--requests N] [--warmup N]');
  process.exit(2);
}

const client = new Client({ kubeconfig: values.kubeconfig, namespace: values.n });
try {
  const fn = await client.functions.get(values.name);
  for (let i = 0; i < Number(values.warmup); i++) await fn.invoke({}, { timeoutMs: 10_000 });
  const took = [];
  for (let i = 0; i < Number(values.requests); i++) {
    const start = process.hrtime.bigint();
    await fn.invoke({}, { timeoutMs: 10_000 });
    took.push((process.hrtime.bigint() - start) / 1000n);
  }
  process.stdout.write(took.map((us) => `${us}\n`).join(''));
} finally {
  client.close();
}
