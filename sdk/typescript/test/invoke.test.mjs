// Function.invoke against a loopback server: what is sent, how each answer
// maps to a result or an error, and that nothing is re-sent after dispatch.
import assert from 'node:assert/strict';
import test from 'node:test';

import * as sdk from '../dist/index.js';
import { NS, RUN_PATH, run, sendJSON, serve, status } from './loopback.mjs';

async function handleOn(t, answer) {
  const srv = await serve(t, (req, res, r) => {
    if (r.method === 'GET' && r.path === `${RUN_PATH}/adder`) return sendJSON(res, 200, run('adder'));
    return answer(req, res, r, srv);
  });
  const fn = await srv.client.functions.get('adder');
  return { ...srv, fn };
}

test('a completed invocation carries output, outputs, logs, duration, ID and Server-Timing', async (t) => {
  const { fn, invokes } = await handleOn(t, (req, res, r) =>
    sendJSON(
      res,
      200,
      { invocationId: r.headers['x-kruntime-invocation-id'], output: { sum: 3 }, outputs: { k: 'v' }, logs: { stdout: 'out\n', stderr: '' }, durationMillis: 12 },
      { 'X-Kruntime-Invocation-ID': r.headers['x-kruntime-invocation-id'], 'Server-Timing': 'apiserver;dur=0.412, runtimed;dur=0.101, handler;dur=1.234, worker;desc=warm' },
    ),
  );
  const result = await fn.invoke({ a: 1, b: 2 }, { timeoutMs: 2500 });
  assert.deepEqual(result.output, { sum: 3 });
  assert.deepEqual(result.outputs, { k: 'v' });
  assert.equal(result.logs.stdout, 'out\n');
  assert.equal(result.durationMs, 12);
  assert.equal(result.replayed, false);
  assert.deepEqual(result.serverTiming, { apiserver: { dur: 0.412 }, runtimed: { dur: 0.101 }, handler: { dur: 1.234 }, worker: { desc: 'warm' } });
  const [sent] = invokes();
  assert.equal(sent.method, 'POST');
  assert.equal(sent.path, `${RUN_PATH}/adder/invoke`);
  assert.equal(sent.query.get('uid'), 'uid-adder');
  assert.equal(sent.query.get('timeout'), '2500ms');
  assert.equal(sent.headers['content-type'], 'application/json');
  assert.equal(sent.headers.authorization, 'Bearer unit-token');
  assert.deepEqual(JSON.parse(sent.body), { a: 1, b: 2 });
  assert.match(sent.headers['x-kruntime-invocation-id'], /^[0-9a-f]{32}$/);
  assert.equal(result.invocationId, sent.headers['x-kruntime-invocation-id']);
});

test('a caller-chosen invocation ID is sent as given', async (t) => {
  const { fn, invokes } = await handleOn(t, (req, res, r) => sendJSON(res, 200, { invocationId: r.headers['x-kruntime-invocation-id'], output: 1 }));
  const result = await fn.invoke(null, { invocationId: 'mine-1' });
  assert.equal(invokes()[0].headers['x-kruntime-invocation-id'], 'mine-1');
  assert.equal(result.invocationId, 'mine-1');
});

const answers = [
  { name: '200 with error → FunctionError (ran)', code: 200, body: { invocationId: 'inv-1', error: { type: 'ValueError', message: 'no good' }, logs: { stdout: 'p\n' } }, cls: 'FunctionError', notRun: false },
  { name: '429 → Busy with retryAfter (did not run)', code: 429, body: status(429, 'TooManyRequests', 'busy', { retryAfterSeconds: 2 }), headers: { 'Retry-After': '2' }, cls: 'Busy', notRun: true, retryAfter: 2 },
  { name: "kruntimes' 503 → Unavailable with retryAfter (did not run)", code: 503, body: status(503, 'ServiceUnavailable', 'not ready', { retryAfterSeconds: 3 }), headers: { 'Retry-After': '3' }, cls: 'Unavailable', notRun: true, retryAfter: 3 },
  { name: "a proxy's plain 503 → OutcomeUnknown", code: 503, text: 'service unavailable', cls: 'OutcomeUnknown', notRun: false },
  { name: '502 → OutcomeUnknown', code: 502, body: status(502, 'BadGateway', 'lost'), cls: 'OutcomeUnknown', notRun: false },
  { name: '500 → OutcomeUnknown', code: 500, body: status(500, 'InternalError', 'oops'), cls: 'OutcomeUnknown', notRun: false },
  { name: '504 → InvocationTimeout (ran, maybe partly)', code: 504, body: status(504, 'Timeout', 'deadline'), cls: 'InvocationTimeout', notRun: false },
  { name: '404 → NotFound', code: 404, body: status(404, 'NotFound', 'gone'), cls: 'NotFound', notRun: true },
  { name: '403 → Forbidden', code: 403, body: status(403, 'Forbidden', 'no'), cls: 'Forbidden', notRun: true },
  { name: '401 → Forbidden', code: 401, body: status(401, 'Unauthorized', 'who'), cls: 'Forbidden', notRun: true },
  { name: '413 → PayloadTooLarge', code: 413, body: status(413, 'RequestEntityTooLarge', 'big'), cls: 'PayloadTooLarge', notRun: true },
  { name: '409 → Conflict', code: 409, body: status(409, 'Conflict', 'ending'), cls: 'Conflict', notRun: true },
  { name: '409 InvocationOutcomeEvicted → OutcomeEvicted (the first may have run)', code: 409, body: status(409, 'AlreadyExists', 'no longer known', { causes: [{ reason: 'InvocationOutcomeEvicted', message: 'm' }] }), cls: 'OutcomeEvicted', notRun: false },
  { name: '422 → Invalid with causes', code: 422, body: status(422, 'Invalid', 'bad', { causes: [{ field: 'spec.x', reason: 'FieldValueInvalid', message: 'm' }] }), cls: 'Invalid', notRun: true, causes: [{ field: 'spec.x', reason: 'FieldValueInvalid', message: 'm' }] },
  { name: '400 with causes → InvalidInput with causes', code: 400, body: status(400, 'BadRequest', 'the input does not match', { causes: [{ field: 'input.city', reason: 'FieldValueRequired', message: 'Required value' }] }), cls: 'InvalidInput', notRun: true, causes: [{ field: 'input.city', reason: 'FieldValueRequired', message: 'Required value' }] },
  { name: '415 → a plain KruntimesError that did not run', code: 415, body: status(415, 'UnsupportedMediaType', 'json only'), cls: 'KruntimesError', notRun: true },
];

for (const a of answers) {
  test(`invoke: ${a.name}; the error carries the invocation ID and the request was sent once`, async (t) => {
    const { fn, invokes } = await handleOn(t, (req, res) => {
      if (a.text !== undefined) {
        res.writeHead(a.code, { 'Content-Type': 'text/plain' });
        return res.end(a.text);
      }
      sendJSON(res, a.code, a.body, a.headers);
    });
    // Retries of the did-not-run answers are not asked for: one request.
    const err = await fn.invoke({}, { invocationId: 'inv-1' }).then(
      () => assert.fail('invoke resolved'),
      (e) => e,
    );
    assert.ok(err instanceof sdk.KruntimesError);
    assert.equal(err.constructor.name, a.cls);
    assert.equal(err.notRun, a.notRun);
    assert.equal(err.invocationId, 'inv-1');
    assert.equal(err.run, 'adder');
    assert.equal(err.code, a.code);
    if (a.retryAfter !== undefined) assert.equal(err.retryAfter, a.retryAfter);
    if (a.causes) assert.deepEqual(err.causes, a.causes);
    if (a.cls === 'FunctionError') {
      assert.equal(err.type, 'ValueError');
      assert.equal(err.errorMessage, 'no good');
      assert.equal(err.logs.stdout, 'p\n');
      assert.equal(err.result.invocationId, 'inv-1');
    }
    assert.equal(invokes().length, 1);
  });
}

// Answers after which the handler may have run: never sent again, even with
// a retry of the answers that guarantee it did not.
const sentOnce = [
  ['the connection dropped after the request was read', (req, res) => res.socket.destroy()],
  ['500', (req, res) => sendJSON(res, 500, status(500, 'InternalError', 'x'))],
  ['502', (req, res) => sendJSON(res, 502, status(502, 'BadGateway', 'x'))],
  ['504', (req, res) => sendJSON(res, 504, status(504, 'Timeout', 'x'))],
  ["a proxy's plain 503", (req, res) => { res.writeHead(503); res.end('unavailable'); }],
  ['a 200 that is not an InvokeResult', (req, res) => { res.writeHead(200); res.end('<html>'); }],
];
for (const [name, answer] of sentOnce) {
  test(`no re-send after dispatch: ${name} → one request, even with retry`, async (t) => {
    const { fn, invokes } = await handleOn(t, answer);
    const err = await fn.invoke({}, { retry: { busy: true, unavailable: true, deadlineMs: 5000 } }).then(
      () => assert.fail('invoke resolved'),
      (e) => e,
    );
    assert.equal(err.notRun, false, `${err}`);
    assert.ok(err instanceof sdk.OutcomeUnknown || err instanceof sdk.InvocationTimeout, `${err}`);
    assert.ok(err.invocationId);
    assert.equal(invokes().length, 1);
  });
}

test('a silent server past the timeout → OutcomeUnknown, sent once', async (t) => {
  const { fn, invokes } = await handleOn(t, () => {
    /* never answers */
  });
  // timeoutMs 0: the SDK waits 5 s past it for the server's own 504.
  const started = Date.now();
  const err = await fn.invoke({}, { timeoutMs: 1 }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.OutcomeUnknown, `${err}`);
  assert.ok(Date.now() - started >= 5000);
  assert.equal(invokes().length, 1);
});

test('retry re-sends after 429 and 503 with the same invocation ID, then returns the answer', async (t) => {
  const { fn, invokes } = await handleOn(t, (req, res, r, srv) => {
    const n = srv.invokes().length;
    if (n === 1) return sendJSON(res, 429, status(429, 'TooManyRequests', 'busy', { retryAfterSeconds: 1 }), { 'Retry-After': '1' });
    if (n === 2) return sendJSON(res, 503, status(503, 'ServiceUnavailable', 'registering', { retryAfterSeconds: 1 }), { 'Retry-After': '1' });
    sendJSON(res, 200, { invocationId: r.headers['x-kruntime-invocation-id'], output: 'ok' });
  });
  const result = await fn.invoke({}, { retry: { maxBackoffMs: 100 } });
  assert.equal(result.output, 'ok');
  const ids = invokes().map((r) => r.headers['x-kruntime-invocation-id']);
  assert.equal(ids.length, 3);
  assert.equal(new Set(ids).size, 1);
});

test('retry with busy: false does not re-send a 429', async (t) => {
  const { fn, invokes } = await handleOn(t, (req, res) => sendJSON(res, 429, status(429, 'TooManyRequests', 'busy', { retryAfterSeconds: 0 })));
  await assert.rejects(fn.invoke({}, { retry: { busy: false } }), sdk.Busy);
  assert.equal(invokes().length, 1);
});

test('retry stops at its deadline with the last answer', async (t) => {
  const { fn, invokes } = await handleOn(t, (req, res) => sendJSON(res, 429, status(429, 'TooManyRequests', 'busy', { retryAfterSeconds: 1 })));
  await assert.rejects(fn.invoke({}, { retry: { deadlineMs: 1500, maxBackoffMs: 1000 } }), sdk.Busy);
  assert.equal(invokes().length, 2);
});

test('retry unknown re-sends after a 502 and stops at a replayed answer', async (t) => {
  const { fn, invokes } = await handleOn(t, (req, res, r, srv) => {
    if (srv.invokes().length === 1) return sendJSON(res, 502, status(502, 'BadGateway', 'lost'));
    sendJSON(res, 200, { invocationId: r.headers['x-kruntime-invocation-id'], output: 'first outcome' }, { 'X-Kruntime-Deduplicated': 'true' });
  });
  const result = await fn.invoke({}, { retry: { unknown: true } });
  assert.equal(result.output, 'first outcome');
  assert.equal(result.replayed, true);
  const ids = invokes().map((r) => r.headers['x-kruntime-invocation-id']);
  assert.equal(ids.length, 2);
  assert.equal(ids[0], ids[1]);
});

test('retry unknown ends at a replayed unknown outcome', async (t) => {
  const { fn, invokes } = await handleOn(t, (req, res) => sendJSON(res, 502, status(502, 'BadGateway', 'lost'), { 'X-Kruntime-Deduplicated': 'true' }));
  const err = await fn.invoke({}, { retry: { unknown: true } }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.OutcomeUnknown);
  assert.equal(err.replayed, true);
  assert.equal(invokes().length, 1);
});

test('an input over 1 MiB is refused before sending', async (t) => {
  const { fn, invokes } = await handleOn(t, () => assert.fail('sent'));
  const err = await fn.invoke({ s: 'x'.repeat(1 << 20) }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.PayloadTooLarge);
  assert.equal(err.notRun, true);
  assert.ok(err.invocationId);
  assert.equal(invokes().length, 0);
});

test('no server → ConnectFailed, nothing sent', async (t) => {
  const srv = await serve(t, (req, res) => sendJSON(res, 200, run('adder')));
  const fn = await srv.client.functions.get('adder');
  const other = new sdk.Client({ kubeconfig: `${srv.dir}/kubeconfig` });
  t.after(() => other.close());
  // A port nothing listens on: the server's, after it stopped.
  const closed = await import('node:net').then(
    (net) =>
      new Promise((resolve) => {
        const s = net.createServer();
        s.listen(0, '127.0.0.1', () => {
          const { port } = s.address();
          s.close(() => resolve(port));
        });
      }),
  );
  other.transport.server.port = String(closed);
  const orphan = new sdk.Function(other.transport, fn.run);
  const err = await orphan.invoke({}, { retry: {} }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.ConnectFailed, `${err}`);
  assert.equal(err.notRun, true);
  assert.ok(err.invocationId);
});

test('an AbortSignal aborted before the call → Aborted, notRun, nothing sent', async (t) => {
  const { fn, invokes } = await handleOn(t, () => assert.fail('sent'));
  const err = await fn.invoke({}, { signal: AbortSignal.abort() }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.Aborted);
  assert.equal(err.notRun, true);
  assert.equal(invokes().length, 0);
});

test('an AbortSignal aborted after dispatch → Aborted with the outcome unknown, sent once', async (t) => {
  const ac = new AbortController();
  const { fn, invokes } = await handleOn(t, () => ac.abort());
  const err = await fn.invoke({}, { signal: ac.signal, retry: { unknown: true } }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.Aborted, `${err}`);
  assert.equal(err.notRun, false);
  assert.ok(err.invocationId);
  assert.equal(invokes().length, 1);
});

test('parseServerTiming reads names, durations, descriptions and quoted values', () => {
  assert.deepEqual(sdk.parseServerTiming('dedup;desc=replayed, apiserver;dur=0.2;desc="a b"'), {
    dedup: { desc: 'replayed' },
    apiserver: { dur: 0.2, desc: 'a b' },
  });
  assert.deepEqual(sdk.parseServerTiming(undefined), {});
});

test('the namespace is the context’s', async (t) => {
  const { client } = await serve(t, () => assert.fail('no request'));
  assert.equal(client.namespace, NS);
});
