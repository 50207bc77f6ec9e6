// Functions, tasks and sandboxes against a loopback server: the objects
// sent, waits woken by a watch, logs streamed, and auth by exec plugin.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';

import * as sdk from '../dist/index.js';
import { NS, RUN_PATH, run, sendJSON, serve, status } from './loopback.mjs';

function watchEvents(res, events, { end = true } = {}) {
  res.writeHead(200, { 'Content-Type': 'application/json' });
  for (const e of events) res.write(`${JSON.stringify(e)}\n`);
  if (end) res.end();
}

const ready = (name) =>
  run(name, { status: { phase: 'Ready', conditions: [{ type: 'Ready', status: 'True' }] } });

test('functions.create sends the Run with source, handler, schema, env (values and Secret keys), limits and labels', async (t) => {
  const { client, requests } = await serve(t, (req, res, r) => sendJSON(res, 201, { ...JSON.parse(r.body), metadata: { name: 'fn-abc', namespace: NS, uid: 'u1' } }));
  const schema = { input: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };
  const fn = await client.functions.create({
    runtime: 'python',
    source: 'def handle(e, c):\n  return 1\n',
    handler: 'main.handle',
    env: { MODE: 'fast', TOKEN: { secretKeyRef: { name: 'db', key: 'password' } } },
    idleTimeoutSeconds: 600,
    timeout: 3600,
    labels: { team: 'agents' },
    maxAttempts: 2,
    description: 'adds',
    schema,
  });
  assert.equal(fn.name, 'fn-abc');
  assert.equal(fn.description, 'adds');
  assert.deepEqual(fn.schema, schema);
  const sent = JSON.parse(requests[0].body);
  assert.equal(requests[0].method, 'POST');
  assert.equal(requests[0].path, RUN_PATH);
  assert.deepEqual(sent, {
    apiVersion: 'kruntimes.io/v1alpha1',
    kind: 'Run',
    metadata: { labels: { team: 'agents' }, generateName: 'fn-' },
    spec: {
      runtime: 'python',
      source: { inline: 'def handle(e, c):\n  return 1\n', inlinePath: 'main.py' },
      mode: { function: { handler: 'main.handle', idleTimeoutSeconds: 600, description: 'adds', schema } },
      env: [{ name: 'MODE', value: 'fast' }, { name: 'TOKEN', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } }],
      timeout: '3600s',
      retryPolicy: { maxAttempts: 2 },
    },
  });
});

test('functions.create reads a source file under its own name', async (t) => {
  const { client, requests, dir } = await serve(t, (req, res, r) => sendJSON(res, 201, { ...JSON.parse(r.body), metadata: { name: 'x', namespace: NS, uid: 'u' } }));
  const file = path.join(dir, 'search.py');
  fs.writeFileSync(file, 'def handle(e, c): pass\n');
  await client.functions.create({ name: 'x', runtime: 'python', source: { file }, handler: 'search.handle' });
  assert.deepEqual(JSON.parse(requests[0].body).spec.source, { inline: 'def handle(e, c): pass\n', inlinePath: 'search.py' });
  assert.equal(JSON.parse(requests[0].body).metadata.name, 'x');
});

test('a 422 on create is Invalid with its causes', async (t) => {
  const { client } = await serve(t, (req, res) =>
    sendJSON(res, 422, status(422, 'Invalid', 'Run.kruntimes.io "x" is invalid', { causes: [{ field: 'spec.source.inlinePath', reason: 'FieldValueRequired', message: 'Required value' }] })),
  );
  const err = await client.functions.create({ name: 'x', runtime: 'python', source: 'x', handler: 'main.h' }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.Invalid);
  assert.deepEqual(err.causes, [{ field: 'spec.source.inlinePath', reason: 'FieldValueRequired', message: 'Required value' }]);
});

test('functions.list keeps function Runs and sends the label selector; delete tolerates a Run already gone', async (t) => {
  const task = run('t1', { spec: { runtime: 'bash', mode: { task: {} } } });
  const { client, requests } = await serve(t, (req, res, r) => {
    if (r.method === 'GET') return sendJSON(res, 200, { kind: 'RunList', metadata: { resourceVersion: '3' }, items: [run('f1'), task, run('f2')] });
    sendJSON(res, 404, status(404, 'NotFound', 'gone'));
  });
  const fns = await client.functions.list({ team: 'agents', tier: 'prod' });
  assert.deepEqual(fns.map((f) => f.name), ['f1', 'f2']);
  assert.equal(requests[0].query.get('labelSelector'), 'team=agents,tier=prod');
  await client.functions.list('tier!=dev');
  assert.equal(requests[1].query.get('labelSelector'), 'tier!=dev');
  await fns[0].delete();
  await client.functions.delete('f2');
  assert.deepEqual(requests.slice(2).map((r) => `${r.method} ${r.path}`), [`DELETE ${RUN_PATH}/f1`, `DELETE ${RUN_PATH}/f2`]);
});

/** A server whose list answers `first` and whose one watch sends `events`. */
async function watched(t, first, events) {
  return serve(t, (req, res, r) => {
    if (r.path === `${RUN_PATH}/w`) return sendJSON(res, 200, first);
    if (r.query.get('watch') === 'true') {
      assert.equal(r.query.get('fieldSelector'), 'metadata.name=w');
      assert.equal(r.query.get('resourceVersion'), '7');
      return watchEvents(res, events, { end: false });
    }
    sendJSON(res, 200, { kind: 'RunList', metadata: { resourceVersion: '7' }, items: [first] });
  });
}

test('waitReady is woken by the watch: one list, one watch, no polling', async (t) => {
  const srv = await watched(t, run('w', { status: { phase: 'Pending' } }), [
    { type: 'BOOKMARK', object: { metadata: { resourceVersion: '8' } } },
    { type: 'MODIFIED', object: run('w', { status: { phase: 'Running' } }) },
    { type: 'MODIFIED', object: ready('w') },
  ]);
  const fn = await srv.client.functions.get('w');
  await fn.waitReady({ timeoutMs: 10_000 });
  assert.equal(fn.phase, 'Ready');
  const lists = srv.requests.filter((r) => r.path === RUN_PATH && r.query.get('watch') !== 'true');
  const watches = srv.requests.filter((r) => r.query.get('watch') === 'true');
  assert.equal(lists.length, 1);
  assert.equal(watches.length, 1);
});

test('waitReady throws RunEnded with the Run’s message when it fails', async (t) => {
  const srv = await watched(t, run('w', { status: { phase: 'Pending' } }), [
    { type: 'MODIFIED', object: run('w', { status: { phase: 'Failed', message: 'ImportError: no module' } }) },
  ]);
  const fn = await srv.client.functions.get('w');
  const err = await fn.waitReady().then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.RunEnded);
  assert.equal(err.phase, 'Failed');
  assert.match(err.message, /ImportError: no module/);
});

test('waitReady throws NotFound when the Run is deleted', async (t) => {
  const srv = await watched(t, run('w', { status: { phase: 'Pending' } }), [{ type: 'DELETED', object: run('w') }]);
  const fn = await srv.client.functions.get('w');
  await assert.rejects(fn.waitReady(), sdk.NotFound);
});

test('waitReady throws WaitTimeout when the watch ends at the timeout', async (t) => {
  const srv = await serve(t, (req, res, r) => {
    if (r.path === `${RUN_PATH}/w`) return sendJSON(res, 200, run('w'));
    if (r.query.get('watch') === 'true') {
      assert.equal(r.query.get('timeoutSeconds'), '1');
      return watchEvents(res, []); // the server ends the watch at its timeout
    }
    sendJSON(res, 200, { metadata: { resourceVersion: '7' }, items: [run('w')] });
  });
  const fn = await srv.client.functions.get('w');
  const started = Date.now();
  const ac = new AbortController();
  // Ends by the WaitTimeout of 300 ms: the watch asked timeoutSeconds=1 and
  // ended; the deadline has passed by then.
  await assert.rejects(fn.waitReady({ timeoutMs: 300, signal: ac.signal }), sdk.WaitTimeout);
  assert.ok(Date.now() - started < 5000);
});

test('waitReady stops at an AbortSignal', async (t) => {
  const srv = await watched(t, run('w', { status: { phase: 'Pending' } }), []);
  const fn = await srv.client.functions.get('w');
  const ac = new AbortController();
  const waiting = fn.waitReady({ signal: ac.signal });
  // Abort once the watch is open on the server.
  await new Promise((resolve) => {
    const check = () => (srv.requests.some((r) => r.query.get('watch') === 'true') ? resolve() : setImmediate(check));
    check();
  });
  ac.abort();
  await assert.rejects(waiting, sdk.Aborted);
});

test('tasks.run sends a script task and waits for its end by watch', async (t) => {
  const done = run('task-1', { spec: { runtime: 'bash', mode: { task: { args: ['there'] } } }, status: { phase: 'Succeeded', exitCode: 0, outputs: { answer: '42' }, attempt: 1 } });
  const srv = await serve(t, (req, res, r) => {
    if (r.method === 'POST') return sendJSON(res, 201, { ...JSON.parse(r.body), metadata: { name: 'task-1', namespace: NS, uid: 'u' } });
    if (r.query.get('watch') === 'true') return watchEvents(res, [{ type: 'MODIFIED', object: done }], { end: false });
    sendJSON(res, 200, { metadata: { resourceVersion: '7' }, items: [run('task-1', { status: { phase: 'Running' } })] });
  });
  const result = await srv.client.tasks.run('bash', { script: 'echo "hi $1"', args: ['there'], env: { X: '1', TOKEN: { secretKeyRef: { name: 'db', key: 'password', optional: true } } }, timeout: '10m' });
  assert.deepEqual(result, { name: 'task-1', phase: 'Succeeded', exitCode: 0, outputs: { answer: '42' }, message: '', attempt: 1, succeeded: true });
  assert.deepEqual(JSON.parse(srv.requests[0].body).spec, {
    runtime: 'bash',
    mode: { task: { args: ['there'] } },
    source: { inline: 'echo "hi $1"' },
    env: [{ name: 'X', value: '1' }, { name: 'TOKEN', valueFrom: { secretKeyRef: { name: 'db', key: 'password', optional: true } } }],
    timeout: '10m',
  });
  await assert.rejects(srv.client.tasks.start('bash', {}), TypeError);
});

test('Task.cancel patches spec.cancelRequested; logs reads the kept log line by line', async (t) => {
  const srv = await serve(t, (req, res, r) => {
    if (r.method === 'PATCH') return sendJSON(res, 200, run('t', { spec: { cancelRequested: true } }));
    if (r.path.endsWith('/log')) {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      return res.end('one\ntwo\n\xff-three');
    }
    sendJSON(res, 200, run('t'));
  });
  const task = await srv.client.tasks.get('t');
  await task.cancel();
  const patch = srv.requests.find((r) => r.method === 'PATCH');
  assert.equal(patch.headers['content-type'], 'application/merge-patch+json');
  assert.deepEqual(JSON.parse(patch.body), { spec: { cancelRequested: true } });
  const lines = [];
  for await (const line of task.logs({ stream: 'Stdout', tailLines: 3 })) lines.push(line);
  assert.deepEqual(lines, ['one\n', 'two\n', 'ÿ-three']);
  const logReq = srv.requests.find((r) => r.path.endsWith('/log'));
  assert.equal(logReq.query.get('stream'), 'Stdout');
  assert.equal(logReq.query.get('tailLines'), '3');
  assert.equal(logReq.query.get('follow'), null);
});

test('Task.logs follow yields lines as they are written, across attempts, and ends with the Run', async (t) => {
  let phase = 'Running';
  let attempt = 1;
  const srv = await serve(t, (req, res, r) => {
    if (r.path.endsWith('/log')) {
      assert.equal(r.query.get('follow'), 'true');
      const n = Number(r.query.get('attempt'));
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      if (n === 1) {
        res.write('a1-');
        setImmediate(() => {
          res.write('line\nsecond\n');
          attempt = 2;
          res.end();
        });
      } else {
        res.write('attempt two\n');
        phase = 'Succeeded';
        res.end();
      }
      return;
    }
    sendJSON(res, 200, run('t', { status: { phase, attempt } }));
  });
  const task = await srv.client.tasks.get('t');
  const lines = [];
  for await (const line of task.logs({ follow: true })) lines.push(line);
  assert.deepEqual(lines, ['a1-line\n', 'second\n', 'attempt two\n']);
  assert.deepEqual(srv.requests.filter((r) => r.path.endsWith('/log')).map((r) => r.query.get('attempt')), ['1', '2']);
});

test('sandbox: runCode, commands and files are invocations of the sandbox handler', async (t) => {
  const ops = [];
  const srv = await serve(t, (req, res, r) => {
    if (r.path.endsWith('/runtimes/python')) return sendJSON(res, 200, { spec: { capacity: { runs: 1 } } });
    if (r.path.endsWith('/runtimes/shared')) return sendJSON(res, 200, { spec: { capacity: { runs: 4 } } });
    if (r.method === 'POST' && r.path === RUN_PATH) return sendJSON(res, 201, { ...JSON.parse(r.body), metadata: { name: 'sandbox-1', namespace: NS, uid: 'u' } });
    if (r.query.get('watch') === 'true') return watchEvents(res, [{ type: 'MODIFIED', object: ready('sandbox-1') }], { end: false });
    if (r.method === 'GET' && r.path === RUN_PATH) return sendJSON(res, 200, { metadata: { resourceVersion: '7' }, items: [run('sandbox-1')] });
    if (r.method === 'DELETE') return sendJSON(res, 200, {});
    const op = JSON.parse(r.body);
    ops.push(op);
    const outputs = {
      run_code: { stdout: 'hi\n', stderr: '', result: 42, error: null },
      run_command: { stdout: 'x', stderr: '', exit_code: 3, timed_out: false },
      write_file: {},
      read_file: { data_b64: Buffer.from('a,b\n').toString('base64') },
      list_files: { entries: [{ name: 'd.csv', type: 'file', size: 4 }] },
      exists: { exists: true },
      remove: {},
    };
    if (op.path === '../etc') return sendJSON(res, 200, { invocationId: 'i', error: { type: 'SandboxPathError', message: 'leaves the workspace' } });
    sendJSON(res, 200, { invocationId: 'i', output: outputs[op.op] });
  });
  await assert.rejects(srv.client.sandbox('shared'), sdk.SharedRuntime);
  const sb = await srv.client.sandbox('python', { idleTimeoutSeconds: 60 });
  const created = JSON.parse(srv.requests.find((r) => r.method === 'POST' && r.path === RUN_PATH).body);
  assert.deepEqual(created.spec.mode, { function: { handler: 'kruntimes.sandbox', idleTimeoutSeconds: 60 } });
  const exec = await sb.runCode('x = 6 * 7\nx', { timeoutMs: 2000 });
  assert.equal(exec.result, 42);
  assert.equal(exec.stdout, 'hi\n');
  assert.equal(exec.error, null);
  const cmd = await sb.commands.run(['sh', '-c', 'exit 3'], { cwd: 'sub' });
  assert.equal(cmd.exitCode, 3);
  await sb.files.write('d.csv', 'a,b\n');
  assert.equal((await sb.files.read('d.csv')).toString(), 'a,b\n');
  const listed = await sb.files.list();
  assert.deepEqual([...listed], [{ name: 'd.csv', type: 'file', size: 4 }]);
  assert.equal(listed.truncated, false);
  assert.equal(await sb.files.exists('d.csv'), true);
  await sb.files.remove('d.csv');
  await assert.rejects(sb.files.read('../etc'), sdk.SandboxPathError);
  await assert.rejects(sb.files.write('big', Buffer.alloc(sdk.MAX_FILE_BYTES + 1)), sdk.PayloadTooLarge);
  assert.deepEqual(ops.map((o) => o.op), ['run_code', 'run_command', 'write_file', 'read_file', 'list_files', 'exists', 'remove', 'read_file']);
  assert.deepEqual(ops[0], { op: 'run_code', code: 'x = 6 * 7\nx', timeout: 2 });
  assert.deepEqual(ops[1], { op: 'run_command', cmd: ['sh', '-c', 'exit 3'], timeout: null, env: {}, cwd: 'sub' });
  assert.equal(ops[2].data_b64, Buffer.from('a,b\n').toString('base64'));
  await sb.close();
  await sb.close();
  assert.equal(srv.requests.filter((r) => r.method === 'DELETE').length, 1);
  await assert.rejects(sb.runCode('1'), sdk.KruntimesError);
});

test('credentials from an exec plugin, through @kubernetes/client-node', async (t) => {
  const plugin = path.join(path.dirname(new URL(import.meta.url).pathname), 'exec-credential.mjs');
  const srv = await serve(t, (req, res) => sendJSON(res, 200, run('adder')), {
    user: { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: process.execPath, args: [plugin], interactiveMode: 'Never' } },
  });
  await srv.client.functions.get('adder');
  assert.equal(srv.requests[0].headers.authorization, 'Bearer token-from-exec-plugin');
});
