// What the cluster tests share. TestTypeScriptSDK (test/e2e) starts a local
// cluster and passes it in KRUNTIMES_TEST_* variables; without them each
// test skips, unless KRUNTIMES_TEST_REQUIRE=1, which makes a skip a failure.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { Client } from '../../dist/index.js';

export const HANDLERS = `import json, os, time

def echo(event, context):
    print("echo says hi")
    return {"echo": event, "greeting": os.environ.get("GREETING"), "invocation": context.invocation_id}

def boom(event, context):
    raise ValueError("no good")

def record(event, context):
    # One line per execution: the tests count how often the handler ran.
    with open(event["file"], "a") as f:
        f.write(context.invocation_id + "\\n")
    time.sleep(event.get("sleep", 0))
    return "recorded"
`;

/** The variable `name`, or undefined after t.skip (a failure when required). */
export function env(t, name) {
  const value = process.env[name];
  if (!value) {
    if (process.env.KRUNTIMES_TEST_REQUIRE === '1') assert.fail(`${name} is not set, and KRUNTIMES_TEST_REQUIRE=1`);
    t.skip(`${name} is not set: run through TestTypeScriptSDK (test/e2e)`);
  }
  return value;
}

/** The cluster's settings, or undefined when the test skipped. */
export function cluster(t) {
  const kubeconfig = env(t, 'KRUNTIMES_TEST_KUBECONFIG');
  if (!kubeconfig) return undefined;
  const c = {
    kubeconfig,
    reader: env(t, 'KRUNTIMES_TEST_READER_KUBECONFIG'),
    namespace: env(t, 'KRUNTIMES_TEST_NAMESPACE'),
    python: env(t, 'KRUNTIMES_TEST_PYTHON_RUNTIME'),
    bash: env(t, 'KRUNTIMES_TEST_BASH_RUNTIME'),
    kill: env(t, 'KRUNTIMES_TEST_KILL_RUNTIME'),
    sandbox: env(t, 'KRUNTIMES_TEST_SANDBOX_RUNTIME'),
    tmp: env(t, 'KRUNTIMES_TEST_TMP'),
  };
  c.client = new Client({ kubeconfig, namespace: c.namespace });
  t.after(() => c.client.close());
  return c;
}

/** A file the record handler appends each execution's invocation ID to. */
export class Counter {
  constructor(dir) {
    this.path = path.join(dir, `ran-${randomUUID().slice(0, 8)}`);
  }
  ids() {
    try {
      return fs.readFileSync(this.path, 'utf8').split(/\s+/).filter(Boolean);
    } catch {
      return [];
    }
  }
  /** Resolves once the handler ran `n` times: fs.watch on the directory
   * wakes it, the timeout is a safety net. */
  async waitFor(n, timeoutMs = 30_000) {
    const dir = path.dirname(this.path);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), timeoutMs);
    try {
      const changes = fs.promises.watch(dir, { signal: ac.signal });
      if (this.ids().length >= n) return this.ids();
      for await (const _ of changes) if (this.ids().length >= n) return this.ids();
    } catch (e) {
      if (e.name !== 'AbortError') throw e;
    } finally {
      clearTimeout(timer);
    }
    assert.fail(`${this.path} has ${JSON.stringify(this.ids())} after ${timeoutMs} ms, want ${n} executions`);
  }
}

/** A Ready function serving HANDLERS.`handler`, deleted after the test. */
export async function readyFunction(t, c, handler = 'record', extra = {}) {
  const fn = await c.client.functions.create({
    generateName: `${handler}-`,
    runtime: c.python,
    source: HANDLERS,
    path: 'handlers.py',
    handler: `handlers.${handler}`,
    ...extra,
  });
  t.after(() => fn.delete());
  await fn.waitReady({ timeoutMs: 90_000 });
  return fn;
}
