// Task Runs through the SDK against the cluster.
import assert from 'node:assert/strict';
import test from 'node:test';

import { cluster } from './cluster.mjs';

test('run waits and returns phase, exit code, outputs; logs by stream', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const result = await c.client.tasks.run(c.bash, {
    script: 'echo "out $1 $GREETING"\necho err >&2\necho "answer=42" >> "$KRUNTIMES_OUTPUTS"\n',
    args: ['arg1'],
    env: { GREETING: 'hi' },
    timeout: 120,
    name: 'ts-with-outputs',
    waitTimeoutMs: 90_000,
  });
  assert.deepEqual(
    { name: result.name, phase: result.phase, exitCode: result.exitCode, attempt: result.attempt, outputs: result.outputs, succeeded: result.succeeded },
    { name: 'ts-with-outputs', phase: 'Succeeded', exitCode: 0, attempt: 1, outputs: { answer: '42' }, succeeded: true },
  );
  const failed = await c.client.tasks.run(c.bash, { script: 'echo failing\nexit 3\n', waitTimeoutMs: 90_000 });
  assert.equal(failed.phase, 'Failed');
  assert.equal(failed.exitCode, 3);
  assert.match(failed.message, /exited with code 3/);
  const task = await c.client.tasks.get('ts-with-outputs');
  t.after(() => task.delete());
  const lines = [];
  for await (const line of task.logs()) lines.push(line);
  assert.ok(lines.includes('out arg1 hi\n') && lines.includes('err\n'), JSON.stringify(lines));
  const stderr = [];
  for await (const line of task.logs({ stream: 'Stderr' })) stderr.push(line);
  assert.deepEqual(stderr, ['err\n']);
});

test('start, follow the log live, then wait', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const task = await c.client.tasks.start(c.bash, { script: 'echo one\nsleep 1\necho done\n' });
  t.after(() => task.delete());
  assert.match(task.name, /^task-/);
  const lines = [];
  for await (const line of task.logs({ follow: true })) lines.push(line);
  assert.deepEqual(lines, ['one\n', 'done\n'], 'follow ends after the last byte');
  const result = await task.wait({ timeoutMs: 60_000 });
  assert.equal(result.succeeded, true);
  assert.equal(result.exitCode, 0);
});

test('cancel ends a running task as Cancelled', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const task = await c.client.tasks.start(c.bash, { script: 'echo started\nsleep 120\n' });
  t.after(() => task.delete());
  // Its first line says it runs.
  for await (const line of task.logs({ follow: true })) {
    assert.equal(line, 'started\n');
    break;
  }
  await task.cancel();
  assert.equal(task.run.spec.cancelRequested, true);
  const result = await task.wait({ timeoutMs: 60_000 });
  assert.equal(result.phase, 'Cancelled');
});
