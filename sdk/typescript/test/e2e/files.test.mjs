// A sandbox's files of any size through the SDK against the cluster
// (runs/files through kube-apiserver's aggregation): uploads and downloads
// streamed, a local directory tarred as it is sent, and the errors typed.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import * as sdk from '../../dist/index.js';
import { cluster } from './cluster.mjs';

const sha256 = (data) => createHash('sha256').update(data).digest('hex');

function localDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kruntimes-e2e-files-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('sandbox files: a few MiB round trip streamed, a directory uploaded and read back, a missing file typed', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const sb = await c.client.sandbox(c.sandbox, { idleTimeoutSeconds: 600, readyTimeoutMs: 180_000 });
  t.after(() => sb.close());
  const local = localDir(t);

  // 6 MiB of random bytes from a generator, in uneven chunks.
  const data = randomBytes(6 << 20);
  async function* pieces() {
    for (let at = 0; at < data.length; at += 300_001) yield data.subarray(at, at + 300_001);
  }
  assert.equal(await sb.files.upload('data/blob.bin', pieces()), data.length);
  const got = [];
  for await (const chunk of await sb.files.download('data/blob.bin')) got.push(chunk);
  assert.equal(sha256(Buffer.concat(got)), sha256(data), 'the bytes come back as they went');
  const seen = await sb.runCode("import hashlib\nhashlib.sha256(open('data/blob.bin', 'rb').read()).hexdigest()");
  assert.equal(seen.result, sha256(data), 'code in the sandbox sees the file');
  const target = path.join(local, 'blob.bin');
  fs.writeFileSync(target, 'old');
  assert.equal(await sb.files.downloadTo('data/blob.bin', target), data.length);
  assert.equal(sha256(fs.readFileSync(target)), sha256(data));
  assert.deepEqual(fs.readdirSync(local), ['blob.bin'], 'no temporary file is left beside it');
  // Replaced whole, from a local file's stream; files.read reads the same.
  fs.writeFileSync(path.join(local, 'small.txt'), 'small\n');
  assert.equal(await sb.files.upload('data/blob.bin', fs.createReadStream(path.join(local, 'small.txt'))), 6);
  assert.equal((await sb.files.read('data/blob.bin')).toString(), 'small\n');

  // A local tree, tarred as it is sent: nested and empty directories, an
  // executable, an empty file, a link that stays inside.
  const proj = path.join(local, 'proj');
  fs.mkdirSync(path.join(proj, 'src/pkg'), { recursive: true });
  fs.mkdirSync(path.join(proj, 'empty'));
  const lib = randomBytes(200 << 10);
  fs.writeFileSync(path.join(proj, 'src/pkg/lib.bin'), lib);
  fs.writeFileSync(path.join(proj, 'src/run.sh'), '#!/bin/sh\necho ran\n');
  fs.chmodSync(path.join(proj, 'src/run.sh'), 0o755);
  fs.writeFileSync(path.join(proj, 'empty.txt'), '');
  fs.symlinkSync('src/pkg/lib.bin', path.join(proj, 'link'));
  const extracted = await sb.files.uploadDir(proj, 'work/proj');
  assert.deepEqual(extracted, { path: 'work/proj', files: 3, bytes: lib.length + 19 });
  const tree = await sb.files.list('work/proj', { recursive: true });
  assert.deepEqual(tree.map((e) => `${e.name}:${e.type}`).sort(), [
    'empty.txt:file',
    'empty:dir',
    'link:symlink',
    'src/pkg/lib.bin:file',
    'src/pkg:dir',
    'src/run.sh:file',
    'src:dir',
  ]);
  const link = await sb.files.stat('work/proj/link');
  assert.deepEqual({ type: link.type, target: link.target }, { type: 'symlink', target: 'src/pkg/lib.bin' }, 'a link stays a link');
  assert.equal((await sb.files.stat('work/proj/src/run.sh')).mode, 0o755);
  assert.equal((await sb.commands.run('./work/proj/src/run.sh')).stdout, 'ran\n', 'the executable runs');
  const throughLink = await sb.runCode("hashlib.sha256(open('work/proj/link', 'rb').read()).hexdigest()");
  assert.equal(throughLink.result, sha256(lib));

  // And back out, as the sandbox's archive of the directory.
  const back = path.join(local, 'back');
  const downloaded = await sb.files.downloadDir('work/proj', back);
  assert.deepEqual(downloaded, { localDir: back, files: 3, bytes: lib.length + 19, skipped: [] });
  assert.equal(sha256(fs.readFileSync(path.join(back, 'src/pkg/lib.bin'))), sha256(lib));
  assert.equal(fs.statSync(path.join(back, 'src/run.sh')).mode & 0o777, 0o755);
  assert.equal(fs.readlinkSync(path.join(back, 'link')), 'src/pkg/lib.bin');
  assert.ok(fs.statSync(path.join(back, 'empty')).isDirectory());

  // An archive of one's own, gzip-compressed, from a file.
  execFileSync('tar', ['-czf', path.join(local, 'more.tgz'), '-C', proj, 'src']);
  assert.deepEqual(await sb.files.uploadTar('work/copy', fs.createReadStream(path.join(local, 'more.tgz'))), {
    path: 'work/copy',
    files: 2,
    bytes: lib.length + 19,
  });
  assert.equal((await sb.files.read('work/copy/src/run.sh')).toString(), '#!/bin/sh\necho ran\n');
  // A link leading out of the workspace refuses the whole archive.
  const bad = path.join(local, 'bad');
  fs.mkdirSync(bad);
  fs.writeFileSync(path.join(bad, 'a.txt'), 'a');
  fs.symlinkSync('../../../../etc/passwd', path.join(bad, 'escape'));
  const refused = await sb.files.uploadDir(bad, 'work/bad').then(() => assert.fail('resolved'), (e) => e);
  assert.ok(refused instanceof sdk.KruntimesError, String(refused));
  assert.equal(refused.code, 400, String(refused));
  assert.equal(await sb.files.exists('work/bad/a.txt'), false, 'nothing was extracted');

  // A missing file, an unknown Run, a reader without runs/files.
  const missing = await sb.files.download('data/nope.bin').then(() => assert.fail('resolved'), (e) => e);
  assert.ok(missing instanceof sdk.SandboxFileNotFound, String(missing));
  assert.equal(missing.code, 404);
  await assert.rejects(sb.files.downloadTo('data/nope.bin', path.join(local, 'nope.bin')), sdk.SandboxFileNotFound);
  assert.equal(fs.existsSync(path.join(local, 'nope.bin')), false);
  const reader = new sdk.Client({ kubeconfig: c.reader, namespace: c.namespace });
  t.after(() => reader.close());
  const viewed = await reader.connectSandbox(sb.name);
  await assert.rejects(viewed.files.download('data/blob.bin'), sdk.Forbidden);
});
