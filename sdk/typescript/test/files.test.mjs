// A sandbox's files of any size (runs/files) against a loopback server:
// uploads streamed from every kind of source, downloads streamed and
// written whole or not at all, the errors typed, a directory tarred so that
// the system's tar reads it back, and an upload's memory bounded.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import test from 'node:test';

import * as sdk from '../dist/index.js';
import { RUN_PATH, run, sendJSON, serve, status } from './loopback.mjs';

const FILES_PATH = `${RUN_PATH}/box/files`;
const box = () => run('box', { spec: { runtime: 'python', mode: { function: { handler: 'kruntimes.sandbox' } } } });

/** A sandbox handle on a loopback server whose runs/files requests go to
 * `files(req, res, entry)`. */
async function sandbox(t, files, opts = {}) {
  const srv = await serve(
    t,
    (req, res, r) => {
      if (r.method === 'GET' && r.path === `${RUN_PATH}/box`) {
        if (opts.streamed) req.resume();
        return sendJSON(res, 200, box());
      }
      return files(req, res, r);
    },
    opts,
  );
  return { ...srv, sb: await srv.client.connectSandbox('box') };
}

const written = (req, res, r) => sendJSON(res, 200, { path: r.query.get('path'), size: r.raw.length });

function tmpdir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kruntimes-files-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('files.upload streams each kind of source, chunked, through PUT runs/files and resolves with the size', async (t) => {
  const { sb, requests } = await sandbox(t, written);
  const data = randomBytes(700 << 10);
  async function* generated() {
    for (let at = 0; at < data.length; at += 100_000) yield data.subarray(at, at + 100_000);
  }
  const sources = {
    Buffer: () => data,
    Uint8Array: () => new Uint8Array(data),
    Readable: () => Readable.from([data.subarray(0, 1000), data.subarray(1000)]),
    ReadableStream: () => Readable.toWeb(Readable.from([data])),
    AsyncIterable: generated,
  };
  for (const [kind, source] of Object.entries(sources)) {
    const before = requests.length;
    assert.equal(await sb.files.upload(`in/${kind}.bin`, source()), data.length, kind);
    const r = requests[before];
    assert.equal(r.method, 'PUT', kind);
    assert.equal(r.path, FILES_PATH, kind);
    assert.equal(r.query.get('path'), `in/${kind}.bin`, kind);
    assert.equal(r.query.get('extract'), null, kind);
    assert.equal(r.headers['content-type'], 'application/octet-stream', kind);
    assert.equal(r.headers['transfer-encoding'], 'chunked', `${kind}: streamed, not sized up front`);
    assert.equal(r.headers['content-length'], undefined, kind);
    assert.equal(r.headers.authorization, 'Bearer unit-token', `${kind}: the client's credentials`);
    assert.ok(r.raw.equals(data), `${kind}: the bytes arrive as they were`);
  }
  assert.equal(await sb.files.upload('t.txt', 'héllo\n'), Buffer.byteLength('héllo\n'));
  assert.equal(requests.at(-1).body, 'héllo\n', 'a string is sent as UTF-8');
  assert.equal(await sb.files.upload('empty', new Uint8Array(0)), 0);
  await assert.rejects(sb.files.upload('x', 42), TypeError);
});

test('files.download streams the bytes; downloadTo writes the local file whole', async (t) => {
  const data = randomBytes(3 << 20);
  const { sb, requests } = await sandbox(t, (req, res, r) => {
    res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
    for (let at = 0; at < data.length; at += 256 << 10) res.write(data.subarray(at, at + (256 << 10)));
    res.end();
  });
  const stream = await sb.files.download('model.bin');
  assert.ok(stream instanceof Readable);
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(Buffer.concat(chunks).equals(data));
  assert.equal(requests.at(-1).method, 'GET');
  assert.equal(requests.at(-1).path, FILES_PATH);
  assert.equal(requests.at(-1).query.get('path'), 'model.bin');

  const dir = tmpdir(t);
  const local = path.join(dir, 'model.bin');
  fs.writeFileSync(local, 'old');
  assert.equal(await sb.files.downloadTo('model.bin', local), data.length);
  assert.ok(fs.readFileSync(local).equals(data));
  assert.deepEqual(fs.readdirSync(dir), ['model.bin'], 'no temporary file is left');
});

test('a download cut short errors, and downloadTo leaves the old file and no temporary one', async (t) => {
  const { sb } = await sandbox(t, (req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
    res.write(randomBytes(1 << 20), () => res.socket.destroy());
  });
  const dir = tmpdir(t);
  const local = path.join(dir, 'out.bin');
  fs.writeFileSync(local, 'old');
  const err = await sb.files.downloadTo('out.bin', local).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(err instanceof sdk.KruntimesError, String(err));
  assert.match(err.message, /broke off/);
  assert.equal(fs.readFileSync(local, 'utf8'), 'old');
  assert.deepEqual(fs.readdirSync(dir), ['out.bin']);
});

test('runs/files answers are typed errors, whether or not the body was sent yet', async (t) => {
  const answers = {
    'missing.txt': [404, status(404, 'NotFound', `runs/files.kruntimes.io "missing.txt" not found`, { group: 'kruntimes.io', kind: 'runs/files', name: 'missing.txt' })],
    'run-gone': [404, status(404, 'NotFound', 'runs.kruntimes.io "box" not found', { group: 'kruntimes.io', kind: 'runs', name: 'box' })],
    ended: [409, status(409, 'Conflict', 'Operation cannot be fulfilled on runs.kruntimes.io "box": it ended (Failed) and serves no files any more')],
    pending: [503, status(503, 'ServiceUnavailable', 'Run box is Pending, not Ready: a sandbox serves its files while it is Ready; retry shortly')],
    moving: [503, status(503, 'ServiceUnavailable', 'the sandbox cannot serve "moving" right now', { retryAfterSeconds: 2 })],
    forbidden: [403, status(403, 'Forbidden', 'cannot get runs/files')],
    outside: [400, status(400, 'BadRequest', 'path "../x" leaves the workspace')],
  };
  // Answered at once, the body unread, as kruntimes-apiserver refuses
  // before it reads one.
  const { sb } = await sandbox(
    t,
    (req, res, r) => {
      const [code, st] = answers[r.query.get('path')];
      sendJSON(res, code, st, code === 503 ? { 'Retry-After': '3' } : {});
    },
    { streamed: true },
  );
  const want = {
    'missing.txt': sdk.SandboxFileNotFound,
    'run-gone': sdk.NotFound,
    ended: sdk.Conflict,
    pending: sdk.Unavailable,
    moving: sdk.Unavailable,
    forbidden: sdk.Forbidden,
    outside: sdk.KruntimesError,
  };
  async function* endless() {
    for (;;) yield randomBytes(64 << 10);
  }
  for (const [p, cls] of Object.entries(want)) {
    for (const [op, call] of [
      ['download', () => sb.files.download(p)],
      ['upload', () => sb.files.upload(p, endless())],
    ]) {
      const err = await call().then(() => assert.fail(`${op} ${p} resolved`), (e) => e);
      assert.ok(err instanceof cls, `${op} ${p}: ${err}`);
      assert.equal(err.code, answers[p][0], `${op} ${p}`);
      assert.equal(err.run, 'box');
    }
  }
  const missing = await sb.files.download('missing.txt').catch((e) => e);
  assert.equal(missing.type, 'FileNotFoundError');
  assert.equal(missing.notRun, true);
  assert.ok(!(await sb.files.download('run-gone').catch((e) => e) instanceof sdk.SandboxFileNotFound), 'an unknown Run is not a missing file');
  assert.equal((await sb.files.download('pending').catch((e) => e)).retryAfter, 3);
  assert.equal((await sb.files.download('moving').catch((e) => e)).retryAfter, 2);
});

test('an upload whose source fails throws that error and breaks the body off', async (t) => {
  let broke;
  const seen = new Promise((resolve) => {
    broke = resolve;
  });
  const { sb } = await sandbox(
    t,
    (req) => {
      let got = 0;
      req.on('data', (c) => (got += c.length));
      req.on('aborted', () => broke(got));
      req.on('end', () => broke(-1));
    },
    { streamed: true },
  );
  const failure = new Error('the local disk went away');
  async function* failing() {
    yield randomBytes(1 << 20);
    await new Promise((r) => setTimeout(r, 50));
    throw failure;
  }
  await assert.rejects(sb.files.upload('partial.bin', failing()), (e) => e === failure);
  const got = await seen;
  assert.ok(got >= 0, 'the server saw the body break off, not end');
});

/** A local tree with what uploadDir must carry: nested and empty
 * directories, modes, an empty file, binary data, a long and a non-ASCII
 * name, and symbolic links (one dangling). */
function tree(root) {
  const data = randomBytes(300 << 10);
  fs.mkdirSync(path.join(root, 'src/pkg'), { recursive: true });
  fs.mkdirSync(path.join(root, 'empty'));
  fs.writeFileSync(path.join(root, 'src/pkg/data.bin'), data);
  fs.writeFileSync(path.join(root, 'src/run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
  fs.chmodSync(path.join(root, 'src/run.sh'), 0o755);
  fs.writeFileSync(path.join(root, 'empty.txt'), '');
  fs.writeFileSync(path.join(root, `${'long-name-'.repeat(12)}.txt`), 'long\n');
  fs.writeFileSync(path.join(root, 'café ünïcode.txt'), 'utf-8\n');
  fs.symlinkSync('src/pkg/data.bin', path.join(root, 'link'));
  fs.symlinkSync('nowhere', path.join(root, 'dangling'));
  return data;
}

test('uploadDir tars a directory as it is sent, which the system tar lists and extracts; links stay links', async (t) => {
  const { sb, requests } = await sandbox(t, (req, res, r) => sendJSON(res, 200, { path: r.query.get('path'), files: 5, bytes: 1 }));
  const dir = tmpdir(t);
  const local = path.join(dir, 'proj');
  fs.mkdirSync(local);
  const data = tree(local);
  // A link leading out of the directory is sent as a link, not followed.
  fs.writeFileSync(path.join(dir, 'secret'), 'not to be sent');
  fs.symlinkSync('../secret', path.join(local, 'out'));

  assert.deepEqual(await sb.files.uploadDir(local, 'work/proj'), { path: 'work/proj', files: 5, bytes: 1 });
  const r = requests.at(-1);
  assert.equal(r.method, 'PUT');
  assert.equal(r.query.get('path'), 'work/proj');
  assert.equal(r.query.get('extract'), 'tar');
  assert.equal(r.headers['transfer-encoding'], 'chunked');
  assert.ok(!r.raw.includes(Buffer.from('not to be sent')), 'the link is not followed');

  const archive = path.join(dir, 'sent.tar');
  fs.writeFileSync(archive, r.raw);
  const listed = execFileSync('tar', ['-tf', archive], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean)
    .map((name) => name.replace(/(.)\/$/, '$1'));
  for (const name of ['.', 'src', 'src/pkg/data.bin', 'src/run.sh', 'empty', 'empty.txt', 'link', 'dangling', 'out', 'café ünïcode.txt', `${'long-name-'.repeat(12)}.txt`]) {
    assert.ok(listed.includes(name), `tar -t lists ${name}: ${JSON.stringify(listed)}`);
  }
  const out = path.join(dir, 'out');
  fs.mkdirSync(out);
  execFileSync('tar', ['-xf', archive, '-C', out]);
  assert.ok(fs.readFileSync(path.join(out, 'src/pkg/data.bin')).equals(data));
  assert.equal(fs.statSync(path.join(out, 'src/run.sh')).mode & 0o777, 0o755);
  assert.equal(fs.readFileSync(path.join(out, 'empty.txt')).length, 0);
  assert.ok(fs.statSync(path.join(out, 'empty')).isDirectory());
  assert.equal(fs.readFileSync(path.join(out, 'café ünïcode.txt'), 'utf8'), 'utf-8\n');
  assert.equal(fs.readFileSync(path.join(out, `${'long-name-'.repeat(12)}.txt`), 'utf8'), 'long\n');
  for (const [link, target] of [['link', 'src/pkg/data.bin'], ['dangling', 'nowhere'], ['out', '../secret']]) {
    assert.ok(fs.lstatSync(path.join(out, link)).isSymbolicLink(), `${link} is a link`);
    assert.equal(fs.readlinkSync(path.join(out, link)), target);
  }
});

test('uploadTar sends an archive as it is; uploadDir refuses a file and fails on what tar cannot hold', async (t) => {
  const { sb, requests } = await sandbox(t, (req, res, r) => sendJSON(res, 200, { path: r.query.get('path'), files: 1, bytes: 2 }));
  const dir = tmpdir(t);
  const archive = randomBytes(10_000);
  assert.deepEqual(await sb.files.uploadTar('.', Readable.from([archive])), { path: '.', files: 1, bytes: 2 });
  assert.equal(requests.at(-1).query.get('extract'), 'tar');
  assert.ok(requests.at(-1).raw.equals(archive));

  fs.writeFileSync(path.join(dir, 'plain'), 'x');
  await assert.rejects(sb.files.uploadDir(path.join(dir, 'plain'), 'x'), { code: 'ENOTDIR' });
  await assert.rejects(sb.files.uploadDir(path.join(dir, 'nope'), 'x'), { code: 'ENOENT' });
  const withFifo = path.join(dir, 'fifo-dir');
  fs.mkdirSync(withFifo);
  execFileSync('mkfifo', [path.join(withFifo, 'pipe')]);
  const before = requests.length;
  await assert.rejects(sb.files.uploadDir(withFifo, 'x'), /unsupported type/);
  // The loopback server records a request once its body ended: this one's
  // broke off, so the sandbox would have extracted nothing.
  assert.equal(requests.length, before);
});

test('an upload of a generated 64 MiB stream is sent as it is made: memory stays bounded', async (t) => {
  const digest = createHash('sha256');
  let received = 0;
  const { sb } = await sandbox(
    t,
    (req, res, r) => {
      req.on('data', (c) => {
        received += c.length;
        digest.update(c);
      });
      req.on('end', () => sendJSON(res, 200, { path: r.query.get('path'), size: received }));
    },
    { streamed: true },
  );
  const total = 64 << 20;
  const chunk = 64 << 10;
  const sent = createHash('sha256');
  const baseline = process.memoryUsage().rss;
  let peakRss = 0;
  let peakInFlight = 0;
  async function* generated() {
    for (let at = 0; at < total; at += chunk) {
      // Made now, not before: what the client holds is what it made and
      // the server did not receive yet.
      peakInFlight = Math.max(peakInFlight, at - received);
      peakRss = Math.max(peakRss, process.memoryUsage().rss - baseline);
      const piece = randomBytes(chunk);
      sent.update(piece);
      yield piece;
    }
  }
  assert.equal(await sb.files.upload('big.bin', generated()), total);
  assert.equal(received, total);
  assert.equal(digest.digest('hex'), sent.digest('hex'));
  // Held whole, 64 MiB would be made before the server got any of it.
  assert.ok(peakInFlight < 16 << 20, `${peakInFlight >> 10} KiB made and not yet received at once`);
  assert.ok(peakRss < 48 << 20, `the process grew by ${peakRss >> 20} MiB`);
  t.diagnostic(`at most ${peakInFlight >> 10} KiB in flight; the process grew by ${peakRss >> 20} MiB`);
});

test('a closed sandbox sends no transfer', async (t) => {
  const { sb, requests } = await sandbox(t, written);
  await sb.close(); // connected, not owned: the Run is left alone
  const before = requests.length;
  await assert.rejects(sb.files.upload('x', 'y'), /is closed/);
  await assert.rejects(sb.files.download('x'), /is closed/);
  assert.equal(requests.length, before);
});

test('files.downloadTar asks for the archive; downloadDir extracts it into a local directory, nothing outside it', async (t) => {
  // The archive the sandbox would answer, made by the system's tar.
  const src = tmpdir(t);
  fs.mkdirSync(path.join(src, 'a/b'), { recursive: true });
  fs.writeFileSync(path.join(src, 'a/b/data.bin'), randomBytes(300 << 10));
  fs.writeFileSync(path.join(src, 'run.sh'), '#!/bin/sh\n', { mode: 0o755 });
  fs.symlinkSync('a/b/data.bin', path.join(src, 'link'));
  execFileSync('mkfifo', [path.join(src, 'pipe')]);
  const good = execFileSync('tar', ['-c', '-C', src, 'a', 'run.sh', 'link', 'pipe']);
  const parent = tmpdir(t);
  fs.mkdirSync(path.join(parent, 'outside'));
  // A hostile one: a link out of the directory, then a file through it.
  const hostileSrc = tmpdir(t);
  fs.symlinkSync(path.join(parent, 'outside'), path.join(hostileSrc, 'esc'));
  const hostile = execFileSync('tar', ['-c', '-C', hostileSrc, 'esc']);

  let archive = good;
  const { sb, requests } = await sandbox(t, (req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/x-tar' });
    res.end(archive);
  });
  const chunks = [];
  for await (const c of await sb.files.downloadTar('src', { gzip: true })) chunks.push(c);
  assert.ok(Buffer.concat(chunks).equals(good), 'the archive as the sandbox answered it');
  assert.equal(requests.at(-1).query.get('path'), 'src');
  assert.equal(requests.at(-1).query.get('archive'), 'tar.gz');

  const dst = path.join(parent, 'dst');
  const out = await sb.files.downloadDir('src', dst);
  assert.equal(requests.at(-1).query.get('archive'), 'tar');
  assert.equal(out.files, 2);
  assert.equal(out.bytes, (300 << 10) + '#!/bin/sh\n'.length);
  assert.deepEqual(out.skipped, ['pipe'], 'a FIFO is no file: skipped and named');
  assert.ok(fs.readFileSync(path.join(dst, 'a/b/data.bin')).equals(fs.readFileSync(path.join(src, 'a/b/data.bin'))));
  assert.equal(fs.statSync(path.join(dst, 'run.sh')).mode & 0o777, 0o755);
  assert.equal(fs.readlinkSync(path.join(dst, 'link')), 'a/b/data.bin', 'a link comes as a link');

  archive = hostile;
  await assert.rejects(sb.files.downloadDir('src', path.join(parent, 'dst2')), /not a valid symlink/);
  assert.deepEqual(fs.readdirSync(path.join(parent, 'outside')), [], 'nothing was written outside');
  assert.equal(fs.existsSync(path.join(parent, 'dst2', 'esc')), false, 'the link out was not made');
});
