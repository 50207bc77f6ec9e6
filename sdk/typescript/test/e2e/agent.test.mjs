// The example agent (examples/agent-ts) end to end, as a user runs it: the
// SDK packed with npm pack, installed with @openai/agents into an empty
// project, and the agent run against the cluster with its scripted model.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { cluster } from './cluster.mjs';

const run = promisify(execFile);
const SDK = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const EXAMPLE = path.resolve(SDK, '..', '..', 'examples', 'agent-ts');

test('the example agent answers through its tools and leaves no Run behind', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const project = fs.mkdtempSync(path.join(c.tmp, 'agent-ts-'));
  const { stdout: packed } = await run('npm', ['pack', '--silent', '--pack-destination', project], { cwd: SDK });
  const tarball = path.join(project, packed.trim().split('\n').pop());
  const agents = JSON.parse(fs.readFileSync(path.join(SDK, 'node_modules', '@openai', 'agents', 'package.json'), 'utf8')).version;
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', tarball, `@openai/agents@${agents}`], { cwd: project });
  fs.copyFileSync(path.join(EXAMPLE, 'agent.mjs'), path.join(project, 'agent.mjs'));

  const before = new Set((await c.client.functions.list()).map((f) => f.name));
  const { stdout } = await run(
    process.execPath,
    ['agent.mjs', '--kubeconfig', c.kubeconfig, '--namespace', c.namespace, '--runtime', c.python, '--sandbox-runtime', c.sandbox],
    { cwd: project, timeout: 300_000 },
  );
  const lines = stdout.trim().split('\n');
  const calls = lines.filter((l) => l.startsWith('agent -> ')).map((l) => l.slice('agent -> '.length).split('(')[0]);
  assert.deepEqual(calls, ['search', 'calculator', 'calculator', 'run_code', 'read_file'], stdout);
  assert.ok(lines.includes('  <- the arguments do not match the tool\'s input schema, and the function did not run; fix these and call again:'), stdout);
  assert.equal(lines.at(-1), 'agent: 1 hit(s); 6 * 7 = 42 (doubled in the sandbox: 84)', stdout);
  // Deleted Runs may linger while their finalizers run; none stays live.
  const live = (await c.client.functions.list()).filter((f) => !before.has(f.name) && !f.run.metadata.deletionTimestamp);
  assert.deepEqual(live.map((f) => f.name), [], 'the agent deleted its Runs');
});
