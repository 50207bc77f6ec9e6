// A sandbox through the SDK against the cluster: a function Run with the
// built-in handler kruntimes.sandbox on a Runtime of capacity 1.
import assert from 'node:assert/strict';
import test from 'node:test';

import * as sdk from '../../dist/index.js';
import { cluster } from './cluster.mjs';

test('sandbox: code with state, commands, files, and the workspace’s bounds', async (t) => {
  const c = cluster(t);
  if (!c) return;
  await assert.rejects(c.client.sandbox(c.python), sdk.SharedRuntime);
  const sb = await c.client.sandbox(c.sandbox, { idleTimeoutSeconds: 600, readyTimeoutMs: 180_000 });
  t.after(() => sb.close());
  assert.equal(sb.fn.run.spec.mode.function.handler, 'kruntimes.sandbox');
  const first = await sb.runCode('import math\nx = 40');
  assert.equal(first.result, null);
  assert.equal(first.error, null);
  const second = await sb.runCode("print('two more')\nx + 2");
  assert.equal(second.result, 42);
  assert.equal(second.stdout, 'two more\n');
  const failed = await sb.runCode('math.sqrt(-1)');
  assert.equal(failed.error.name, 'ValueError');
  assert.match(failed.error.value, /math domain error/);
  const slow = await sb.runCode('import time\ntime.sleep(30)', { timeoutMs: 1000 });
  assert.equal(slow.error?.name, 'SandboxTimeout');

  const cmd = await sb.commands.run('echo "$X" && exit 3', { env: { X: 'from env' } });
  assert.deepEqual({ stdout: cmd.stdout, exitCode: cmd.exitCode, timedOut: cmd.timedOut }, { stdout: 'from env\n', exitCode: 3, timedOut: false });
  const killed = await sb.commands.run(['sleep', '30'], { timeoutMs: 1000 });
  assert.equal(killed.timedOut, true);

  await sb.files.write('data/d.csv', 'a,b\n1,2\n');
  assert.equal((await sb.files.read('data/d.csv')).toString(), 'a,b\n1,2\n');
  const listed = await sb.files.list('data');
  assert.deepEqual(listed.map(({ name, type, size }) => ({ name, type, size })), [{ name: 'd.csv', type: 'file', size: 8 }]);
  assert.equal(listed.truncated, false);
  assert.equal(listed[0].mode, 0o644);
  assert.equal(await sb.files.exists('data/d.csv'), true);
  assert.equal((await sb.runCode("open('data/d.csv').read()")).result, 'a,b\n1,2\n', 'code sees the files');
  // The tree: mkdir -p, move, a recursive and a bounded list, stat, remove.
  assert.equal(await sb.files.mkdir('data/sub/deeper'), true);
  assert.equal(await sb.files.mkdir('data/sub/deeper'), false);
  await sb.files.move('data/d.csv', 'data/sub/d.csv');
  const tree = await sb.files.list('data', { recursive: true });
  assert.deepEqual(tree.map((e) => e.name), ['sub', 'sub/d.csv', 'sub/deeper']);
  const cut = await sb.files.list('data', { recursive: true, maxEntries: 1 });
  assert.equal(cut.length, 1);
  assert.equal(cut.truncated, true);
  const info = await sb.files.stat('data/sub/d.csv');
  assert.deepEqual({ name: info.name, type: info.type, size: info.size }, { name: 'data/sub/d.csv', type: 'file', size: 8 });
  await assert.rejects(sb.files.stat('data/nope'), sdk.SandboxFileNotFound);
  await assert.rejects(sb.files.move('data/sub/d.csv', 'data/sub/deeper'), (e) => e instanceof sdk.FunctionError && e.type === 'IsADirectoryError');
  await assert.rejects(sb.files.remove('data', { recursive: false }), sdk.FunctionError);
  await sb.files.remove('data');
  assert.equal(await sb.files.exists('data/sub/d.csv'), false);
  await assert.rejects(sb.files.read('../../etc/passwd'), sdk.SandboxPathError);

  const name = sb.name;
  await sb.close();
  await assert.rejects(sb.runCode('1'), sdk.KruntimesError);
  const gone = await c.client.functions.get(name).then(
    (fn) => Boolean(fn.run.metadata.deletionTimestamp),
    (e) => e instanceof sdk.NotFound,
  );
  assert.ok(gone, 'close deleted the Run');
});

test('sandbox: background commands stream their output, take stdin, and are killed', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const sb = await c.client.sandbox(c.sandbox, { idleTimeoutSeconds: 600, readyTimeoutMs: 180_000 });
  t.after(() => sb.close());

  const lines = [];
  const h = await sb.commands.start('echo first; while [ ! -e go ]; do sleep 0.05; done; echo second; echo oops >&2; exit 4', {
    onStdout: (line) => lines.push(line),
  });
  // The command waits for a file written only once the first line arrived.
  const deadline = Date.now() + 30_000;
  while (lines.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(lines, ['first\n'], 'the first line while the command runs');
  const listed = await sb.commands.list();
  assert.equal(listed.find((x) => x.id === h.id)?.running, true);
  await assert.rejects(h.wait({ timeoutMs: 200 }), sdk.WaitTimeout);
  await sb.files.write('go', '');
  const done = await h.wait({ timeoutMs: 60_000 });
  assert.deepEqual({ stdout: done.stdout, stderr: done.stderr, exitCode: done.exitCode }, { stdout: 'first\nsecond\n', stderr: 'oops\n', exitCode: 4 });
  assert.equal(await h.output(), 'first\nsecond\noops\n');
  const again = [];
  for await (const line of (await sb.commands.connect(h.id)).stream('Stderr')) again.push(line);
  assert.deepEqual(again, ['oops\n'], "an ended command's log is read whole");

  const cat = await sb.commands.start('cat', { stdin: true });
  await cat.sendStdin('hello ');
  await cat.sendStdin(new TextEncoder().encode('world\n'), true);
  assert.equal((await cat.wait({ timeoutMs: 60_000 })).stdout, 'hello world\n');

  const sleeper = await sb.commands.start('sleep 600 & sleep 600');
  await sleeper.kill();
  assert.equal((await sleeper.wait({ timeoutMs: 60_000 })).exitCode, 137);

  const got = [];
  const r = await sb.commands.run('echo a; echo b >&2', { onStdout: (l) => got.push(l), onStderr: (l) => got.push(l) });
  assert.deepEqual([r.stdout, r.stderr, r.exitCode], ['a\n', 'b\n', 0]);
  assert.deepEqual(got.sort(), ['a\n', 'b\n']);
  await assert.rejects(sb.commands.connect('no-such-command'), sdk.NotFound);
});
