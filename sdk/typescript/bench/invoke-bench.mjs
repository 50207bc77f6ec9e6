// The SDK's invoke overhead over a raw request on the same connection,
// interleaved: each round sends one Function.invoke and one hand-written
// POST to runs/invoke through the client's own keep-alive agent and
// credentials, in alternating order, and reports the p50/p90 of each and
// the median of the paired differences.
//
//   node bench/invoke-bench.mjs --loopback [--rounds 5000]
//       against a loopback server answering a fixed InvokeResult: the
//       client's own cost, with no cluster in the way
//   node bench/invoke-bench.mjs --kubeconfig K --namespace NS --function NAME [--rounds 2000]
//       against a Ready function of a cluster
import http from 'node:http';
import https from 'node:https';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { Client } from '../dist/index.js';

const { values } = parseArgs({
  options: {
    loopback: { type: 'boolean', default: false },
    kubeconfig: { type: 'string' },
    namespace: { type: 'string' },
    function: { type: 'string' },
    rounds: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '200' },
  },
});

let server;
let kubeconfig = values.kubeconfig;
let namespace = values.namespace;
let name = values.function;
if (values.loopback) {
  server = http.createServer((req, res) => {
    const id = req.headers['x-kruntime-invocation-id'];
    req.resume();
    req.on('end', () => {
      if (req.method === 'GET') {
        const body = JSON.stringify({ metadata: { name: 'bench', namespace: 'bench', uid: 'uid-bench' }, spec: { mode: { function: {} } } });
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(body);
        return;
      }
      const body = JSON.stringify({ kind: 'InvokeResult', invocationId: id, output: { sum: 3 }, durationMillis: 0, logs: {} });
      res.writeHead(200, {
        'Content-Type': 'application/json',
        'X-Kruntime-Invocation-ID': id,
        'Server-Timing': 'apiserver;dur=0.100, runtimed;dur=0.050, handler;dur=0.020, worker;desc=warm',
      });
      res.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kruntimes-bench-'));
  kubeconfig = path.join(dir, 'kubeconfig');
  fs.writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'b', cluster: { server: `http://127.0.0.1:${server.address().port}`, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'u', user: { token: 'bench' } }],
      contexts: [{ name: 'b', context: { cluster: 'b', user: 'u', namespace: 'bench' } }],
      'current-context': 'b',
    }),
  );
  namespace = 'bench';
  name = 'bench';
}

const client = new Client({ kubeconfig, namespace });
const fn = await client.functions.get(name);
const transport = client.transport;
const input = { a: 1, b: 2 };
const invokePath = `/apis/kruntimes.io/v1alpha1/namespaces/${encodeURIComponent(namespace)}/runs/${encodeURIComponent(name)}/invoke`;

// The raw request: node's http(s).request with the same method, path,
// headers and body on the client's own keep-alive agent (so on the same
// connection), credentials resolved once; the answer read in full, not
// decoded.
await fn.invoke(input); // the agent exists once a request went out
const agent = transport.agent;
const { headers: authHeaders } = await transport.credentials();
const secure = transport.server.protocol === 'https:';
const body = '{"a":1,"b":2}';
const rawOptions = {
  method: 'POST',
  hostname: transport.server.hostname.replace(/^\[|\]$/g, ''),
  port: transport.server.port || undefined,
  path: `${transport.server.pathname.replace(/\/+$/, '')}${invokePath}?uid=${encodeURIComponent(fn.uid)}`,
  agent,
};
function raw() {
  return new Promise((resolve, reject) => {
    const req = (secure ? https : http).request({
      ...rawOptions,
      headers: {
        Accept: 'application/json',
        ...authHeaders,
        'Content-Type': 'application/json',
        'Content-Length': String(body.length),
        'X-Kruntime-Invocation-ID': randomUUID(),
      },
    });
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(chunks)) : reject(new Error(`raw: HTTP ${res.statusCode}`))));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function sdk() {
  await fn.invoke(input);
}

function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

const rounds = Number(values.rounds);
for (let i = 0; i < Number(values.warmup); i++) {
  await raw();
  await sdk();
}
const rawMs = [];
const sdkMs = [];
const diffs = [];
for (let i = 0; i < rounds; i++) {
  const order = i % 2 === 0 ? [raw, sdk] : [sdk, raw];
  const took = {};
  for (const f of order) {
    const start = process.hrtime.bigint();
    await f();
    took[f.name] = Number(process.hrtime.bigint() - start) / 1e6;
  }
  rawMs.push(took.raw);
  sdkMs.push(took.sdk);
  diffs.push(took.sdk - took.raw);
}
for (const a of [rawMs, sdkMs, diffs]) a.sort((x, y) => x - y);
const fmt = (x) => x.toFixed(3);
console.log(`target ${values.loopback ? 'loopback' : `${namespace}/${name}`}, ${rounds} interleaved rounds, node ${process.version}`);
console.log(`raw request  p50 ${fmt(quantile(rawMs, 0.5))} ms  p90 ${fmt(quantile(rawMs, 0.9))} ms`);
console.log(`SDK invoke   p50 ${fmt(quantile(sdkMs, 0.5))} ms  p90 ${fmt(quantile(sdkMs, 0.9))} ms`);
console.log(`overhead     p50 ${fmt(quantile(sdkMs, 0.5) - quantile(rawMs, 0.5))} ms (median of paired differences ${fmt(quantile(diffs, 0.5))} ms)`);
client.close();
server?.close();
