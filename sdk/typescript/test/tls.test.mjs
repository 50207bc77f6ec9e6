// TLS as a kubeconfig sets it: the cluster's CA and a client certificate
// (files), read by @kubernetes/client-node; invocations share one kept-alive
// connection.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import { Client } from '../dist/index.js';
import { run, sendJSON } from './loopback.mjs';

function openssl(dir, ...args) {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate of
 * user "alice", as files of dir. */
function pki(dir) {
  openssl(dir, 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '1', '-subj', '/CN=test-ca');
  for (const [name, subject, ext] of [
    ['server', '/CN=127.0.0.1', 'subjectAltName=IP:127.0.0.1'],
    ['client', '/CN=alice/O=team', 'extendedKeyUsage=clientAuth'],
  ]) {
    openssl(dir, 'req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject);
    fs.writeFileSync(path.join(dir, `${name}.ext`), `${ext}\n`);
    openssl(dir, 'x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.crt`, '-days', '1', '-extfile', `${name}.ext`);
  }
}

test('a client certificate and the cluster CA from kubeconfig files; one connection for many calls', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kruntimes-tls-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  pki(dir);
  const read = (f) => fs.readFileSync(path.join(dir, f));
  const users = [];
  let connections = 0;
  const server = https.createServer({ key: read('server.key'), cert: read('server.crt'), ca: read('ca.crt'), requestCert: true, rejectUnauthorized: true }, (req, res) => {
    users.push(req.socket.getPeerCertificate().subject.CN);
    req.resume();
    req.on('end', () => {
      if (req.method === 'GET') return sendJSON(res, 200, run('adder'));
      const id = req.headers['x-kruntime-invocation-id'];
      sendJSON(res, 200, { invocationId: id, output: 3 }, { 'X-Kruntime-Invocation-ID': id });
    });
  });
  server.on('secureConnection', () => connections++);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  const kubeconfig = path.join(dir, 'kubeconfig');
  fs.writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'tls', cluster: { server: `https://127.0.0.1:${server.address().port}`, 'certificate-authority': path.join(dir, 'ca.crt') } }],
      users: [{ name: 'alice', user: { 'client-certificate': path.join(dir, 'client.crt'), 'client-key': path.join(dir, 'client.key') } }],
      contexts: [{ name: 'tls', context: { cluster: 'tls', user: 'alice', namespace: 'unit' } }],
      'current-context': 'tls',
    }),
  );
  const client = new Client({ kubeconfig });
  t.after(() => client.close());
  const fn = await client.functions.get('adder');
  for (let i = 0; i < 3; i++) assert.equal((await fn.invoke({ i })).output, 3);
  assert.deepEqual(users, ['alice', 'alice', 'alice', 'alice']);
  assert.equal(connections, 1, 'one kept-alive connection');
});
