// A loopback Kubernetes-like API server for the unit tests: each test
// gives the handler of its requests; the server records every request it
// received, and a kubeconfig points a Client at it.
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import { Client } from '../dist/index.js';

export const NS = 'unit';
export const RUN_PATH = `/apis/kruntimes.io/v1alpha1/namespaces/${NS}/runs`;

/** A Run as the API serves it. */
export function run(name, extra = {}) {
  return {
    apiVersion: 'kruntimes.io/v1alpha1',
    kind: 'Run',
    metadata: { name, namespace: NS, uid: `uid-${name}`, resourceVersion: '1' },
    spec: { runtime: 'python', mode: { function: { handler: 'main.handle' } } },
    ...extra,
  };
}

export function status(code, reason, message, details) {
  return { kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message, ...(details ? { details } : {}) };
}

export function sendJSON(res, code, obj, headers = {}) {
  const body = JSON.stringify(obj);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

/**
 * Starts a server on 127.0.0.1 whose requests go to `handler(req, res, entry)`
 * once their body is read (`entry.body` as text, `entry.raw` as bytes);
 * with `streamed`, at once, the body left to the handler to read.
 * t.after closes it and the client.
 */
export async function serve(t, handler, { user = { token: 'unit-token' }, streamed = false } = {}) {
  const requests = [];
  const sockets = new Set();
  const server = http.createServer((req, res) => {
    if (streamed) {
      const url = new URL(req.url, 'http://x');
      const entry = { method: req.method, path: url.pathname, query: url.searchParams, headers: req.headers };
      requests.push(entry);
      Promise.resolve(handler(req, res, entry)).catch((e) => res.destroy(e));
      return;
    }
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const url = new URL(req.url, 'http://x');
      const entry = { method: req.method, path: url.pathname, query: url.searchParams, headers: req.headers, body: raw.toString('utf8'), raw };
      requests.push(entry);
      Promise.resolve(handler(req, res, entry)).catch((e) => {
        res.destroy(e);
      });
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kruntimes-sdk-'));
  const kubeconfig = path.join(dir, 'kubeconfig');
  const { port } = server.address();
  fs.writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'loop', cluster: { server: `http://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'u', user }],
      contexts: [{ name: 'loop', context: { cluster: 'loop', user: 'u', namespace: NS } }],
      'current-context': 'loop',
    }),
  );
  const client = new Client({ kubeconfig });
  t.after(async () => {
    client.close();
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { client, requests, port, dir, invokes: () => requests.filter((r) => r.path.endsWith('/invoke')) };
}
