// Function Runs through the SDK against the cluster: every call and error
// class, and no re-send after dispatch, with a handler that counts its
// executions.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import test from 'node:test';

import * as sdk from '../../dist/index.js';
import { Counter, HANDLERS, cluster, readyFunction } from './cluster.mjs';

test('create, waitReady, invoke, get, list and delete', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await c.client.functions.create({
    generateName: 'echo-',
    runtime: c.python,
    source: HANDLERS,
    path: 'handlers.py',
    handler: 'handlers.echo',
    env: { GREETING: 'hello' },
    labels: { suite: 'ts-sdk' },
    idleTimeoutSeconds: 600,
    timeout: '1h',
  });
  t.after(() => fn.delete());
  assert.ok(['', 'Pending'].includes(fn.phase), `just created, phase ${fn.phase}`);
  await fn.waitReady({ timeoutMs: 90_000 });
  assert.equal(fn.phase, 'Ready');
  const result = await fn.invoke({ a: 1 }, { invocationId: 'ts-echo-1', timeoutMs: 10_000 });
  assert.deepEqual(result.output, { echo: { a: 1 }, greeting: 'hello', invocation: 'ts-echo-1' });
  assert.equal(result.invocationId, 'ts-echo-1');
  assert.equal(result.logs.stdout, 'echo says hi\n');
  assert.ok(result.durationMs >= 0);
  assert.equal(result.replayed, false);
  for (const part of ['apiserver', 'runtimed', 'handler']) assert.equal(typeof result.serverTiming[part]?.dur, 'number', JSON.stringify(result.serverTiming));
  assert.equal(result.serverTiming.worker?.desc, 'warm');
  // The same ID again is answered from the owner's record.
  const again = await fn.invoke({ a: 2 }, { invocationId: 'ts-echo-1' });
  assert.equal(again.replayed, true);
  assert.deepEqual(again.output, result.output);

  const got = await c.client.functions.get(fn.name);
  assert.equal(got.uid, fn.uid);
  const listed = await c.client.functions.list({ suite: 'ts-sdk' });
  assert.deepEqual(listed.map((f) => f.name), [fn.name]);
  await fn.delete();
  await fn.delete(); // gone is no error
  const err = await fn.invoke({}).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.NotFound || err instanceof sdk.Conflict || err instanceof sdk.Unavailable, `${err}`);
  assert.equal(err.notRun, true);
});

test('a handler that raises is FunctionError with type, logs and the invocation ID', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await readyFunction(t, c, 'boom');
  const err = await fn.invoke({}, { invocationId: 'ts-boom', retry: {} }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.FunctionError, `${err}`);
  assert.equal(err.type, 'ValueError');
  assert.equal(err.errorMessage, 'no good');
  assert.equal(err.invocationId, 'ts-boom');
  assert.equal(err.notRun, false);
  assert.equal(err.result?.invocationId, 'ts-boom');
});

test('waitReady fails fast with the Run’s message (RunEnded)', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await c.client.functions.create({ generateName: 'broken-', runtime: c.python, source: 'import no_such_module\n', handler: 'main.handle' });
  t.after(() => fn.delete());
  const err = await fn.waitReady({ timeoutMs: 90_000 }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.RunEnded, `${err}`);
  assert.equal(err.phase, 'Failed');
  assert.match(err.message, /no_such_module/);
});

test('an invalid spec is Invalid with field causes; a missing Run is NotFound', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const err = await c.client.functions
    .create({ name: 'bad', runtime: c.python, source: 'x', path: '../escape.py', handler: 'main.h' })
    .then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.Invalid, `${err}`);
  assert.equal(err.code, 422);
  assert.ok(err.causes.some((cause) => cause.field === 'spec.source.inlinePath'), JSON.stringify(err.causes));
  await assert.rejects(c.client.functions.get('bad'), sdk.NotFound);
});

test('input that breaks schema.input is InvalidInput with causes, and the handler did not run', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const schema = { type: 'object', properties: { file: { type: 'string' }, days: { type: 'integer', maximum: 16 } }, required: ['file'], additionalProperties: false };
  const fn = await readyFunction(t, c, 'record', { schema: { input: schema }, description: 'records' });
  const counter = new Counter(c.tmp);
  const err = await fn.invoke({ days: 40, unit: 'F' }, { retry: {} }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.InvalidInput, `${err}`);
  assert.equal(err.code, 400);
  assert.equal(err.notRun, true);
  assert.deepEqual(err.causes.map((x) => x.field).sort(), ['input.days', 'input.file', 'input.unit']);
  assert.ok(err.invocationId);
  assert.equal((await fn.invoke({ file: counter.path })).output, 'recorded');
  assert.equal(counter.ids().length, 1);
});

test('two concurrent invocations: the second is Busy and did not run; retry re-sends it until it ran once', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await readyFunction(t, c);
  const first = new Counter(c.tmp);
  const running = fn.invoke({ file: first.path, sleep: 3 }, { invocationId: 'ts-first' });
  await first.waitFor(1);
  const second = new Counter(c.tmp);
  const err = await fn.invoke({ file: second.path }, { invocationId: 'ts-second' }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.Busy, `${err}`);
  assert.equal(err.code, 429);
  assert.ok(err.retryAfter > 0);
  assert.equal(err.notRun, true);
  assert.equal(err.invocationId, 'ts-second');
  const third = new Counter(c.tmp);
  const retried = await fn.invoke({ file: third.path }, { invocationId: 'ts-third', retry: { deadlineMs: 30_000 } });
  assert.equal(retried.output, 'recorded');
  assert.equal((await running).output, 'recorded');
  assert.deepEqual(first.ids(), ['ts-first']);
  assert.deepEqual(second.ids(), []);
  assert.deepEqual(third.ids(), ['ts-third'], 're-sent after 429s, ran exactly once');
});

test('a function that is not Ready is Unavailable and did not run', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await c.client.functions.create({ generateName: 'nowhere-', runtime: 'no-such-runtime', source: HANDLERS, handler: 'main.record' });
  t.after(() => fn.delete());
  const counter = new Counter(c.tmp);
  const err = await fn.invoke({ file: counter.path }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.Unavailable, `${err}`);
  assert.equal(err.code, 503);
  assert.ok(err.retryAfter > 0);
  assert.equal(err.notRun, true);
  const started = Date.now();
  await assert.rejects(fn.invoke({ file: counter.path }, { retry: { deadlineMs: 2000 } }), sdk.Unavailable);
  assert.ok(Date.now() - started < 10_000);
  await assert.rejects(fn.waitReady({ timeoutMs: 2000 }), sdk.WaitTimeout);
  assert.deepEqual(counter.ids(), []);
});

test('a handler past its timeout is InvocationTimeout, ran once, not re-sent', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await readyFunction(t, c);
  const counter = new Counter(c.tmp);
  const err = await fn
    .invoke({ file: counter.path, sleep: 10 }, { invocationId: 'ts-slow', timeoutMs: 1000, retry: { unknown: false } })
    .then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.InvocationTimeout, `${err}`);
  assert.equal(err.code, 504);
  assert.equal(err.notRun, false);
  assert.equal(err.invocationId, 'ts-slow');
  assert.deepEqual(counter.ids(), ['ts-slow']);
  const after = await fn.invoke({ file: counter.path }, { invocationId: 'ts-next', retry: { deadlineMs: 30_000 } });
  assert.equal(after.output, 'recorded');
  assert.deepEqual(counter.ids(), ['ts-slow', 'ts-next']);
});

test('an input over 1 MiB is PayloadTooLarge before sending', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await readyFunction(t, c);
  const err = await fn.invoke({ file: '/nonexistent', pad: 'x'.repeat(2 << 20) }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.PayloadTooLarge);
  assert.equal(err.notRun, true);
});

test('a reader without create runs/invoke is Forbidden and nothing ran', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await readyFunction(t, c);
  const reader = new sdk.Client({ kubeconfig: c.reader });
  t.after(() => reader.close());
  assert.equal(reader.namespace, c.namespace, "the namespace of the kubeconfig's context");
  const seen = await reader.functions.get(fn.name);
  assert.equal(seen.uid, fn.uid, 'reading is allowed');
  const counter = new Counter(c.tmp);
  const err = await seen.invoke({ file: counter.path }, { retry: {} }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.Forbidden, `${err}`);
  assert.equal(err.code, 403);
  assert.equal(err.notRun, true);
  await assert.rejects(reader.functions.create({ runtime: 'x', source: '', handler: 'main.h' }), sdk.Forbidden);
  assert.deepEqual(counter.ids(), []);
});

function runtimedOf(podUID) {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!fs.readlinkSync(`/proc/${entry}/exe`).endsWith('/runtimed')) continue;
      if (fs.readFileSync(`/proc/${entry}/environ`).toString('latin1').split('\0').includes(`POD_UID=${podUID}`)) return Number(entry);
    } catch {
      // a process that ended, or is not ours
    }
  }
  return 0;
}

test('the owning runtimed killed mid-invocation is OutcomeUnknown (502), ran once, not re-sent', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await c.client.functions.create({ generateName: 'doomed-', runtime: c.kill, source: HANDLERS, handler: 'main.record' });
  t.after(() => fn.delete());
  await fn.waitReady({ timeoutMs: 90_000 });
  const pid = runtimedOf(fn.run.status.assignedPodUID);
  assert.ok(pid, "the Pod's runtimed runs on this machine");
  const counter = new Counter(c.tmp);
  const answer = fn.invoke({ file: counter.path, sleep: 5 }, { invocationId: 'ts-doomed', retry: {} }).then(
    () => assert.fail('resolved'),
    (e) => e,
  );
  await counter.waitFor(1);
  process.kill(pid, 'SIGKILL');
  const err = await answer;
  assert.ok(err instanceof sdk.OutcomeUnknown, `${err}`);
  assert.equal(err.code, 502);
  assert.equal(err.notRun, false);
  assert.equal(err.invocationId, 'ts-doomed');
  assert.deepEqual(counter.ids(), ['ts-doomed'], 'ran once, never re-sent');
});

test('an AbortSignal after dispatch: Aborted, outcome unknown, the handler ran once', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await readyFunction(t, c);
  const counter = new Counter(c.tmp);
  const ac = new AbortController();
  const answer = fn.invoke({ file: counter.path, sleep: 2 }, { signal: ac.signal, retry: { unknown: true } }).then(
    () => assert.fail('resolved'),
    (e) => e,
  );
  await counter.waitFor(1);
  ac.abort();
  const err = await answer;
  assert.ok(err instanceof sdk.Aborted, `${err}`);
  assert.equal(err.notRun, false);
  // The function finishes what it was doing; then it takes the next call.
  await fn.invoke({ file: counter.path }, { retry: { deadlineMs: 30_000 } });
  assert.equal(counter.ids().length, 2);
});
