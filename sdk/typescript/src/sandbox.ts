/**
 * Sandboxes: stateful code, commands and files on an exclusive Runtime Pod.
 *
 * A sandbox is one function Run with the built-in handler kruntimes.sandbox
 * of the Python Runtime Server (docs/sandbox.md): it needs no source, its
 * operations are invocations (authorized as create runs/invoke, one at a
 * time, sent once and never re-sent), its idle timeout reclaims it and
 * deleting it kills its processes and removes its workspace.
 */
import fs from 'node:fs';
import type http from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

import tarFs, { type TarHeader } from 'tar-fs';

import { FunctionError, KruntimesError, NotFound, PayloadTooLarge, Unavailable, WaitTimeout, errorFor } from './errors.js';
import { Function, MAX_INPUT_BYTES, durationString, envList, type EnvValue, type RunObject } from './functions.js';
import { byteChunks, tarDirectory, writeFileAtomically, type ByteSource } from './streams.js';
import { API_VERSION, TransportError, headerOf, runsPath, runtimesPath, statusOf, type Transport } from './transport.js';

/** The handler a sandbox's Run names (runtimes/python.SandboxHandler). */
export const SANDBOX_HANDLER = 'kruntimes.sandbox';
/** The largest file a sandbox writes or reads in one operation. */
export const MAX_FILE_BYTES = 512 << 10;
/** How much longer than an operation's own timeout the invocation may take. */
const ANSWER_MARGIN_MS = 5000;

/** The Runtime lets several Runs share a Pod (capacity.runs > 1); pass
 * `shared: true` to accept that. Nothing was created. */
export class SharedRuntime extends KruntimesError {
  override name = 'SharedRuntime';
}

/** The sandbox refused a path that leaves its workspace. */
export class SandboxPathError extends FunctionError {
  override name = 'SandboxPathError';
}

/** A file operation named a path that does not exist in the sandbox's
 * workspace: the sandbox's FileNotFoundError from an operation such as
 * files.stat, or the 404 of files.download (then `code` is 404, `notRun`
 * true and `result` undefined). */
export class SandboxFileNotFound extends FunctionError {
  override name = 'SandboxFileNotFound';
}

/** What files.uploadTar and files.uploadDir extracted into `path`: the
 * regular files (hard links included) and their bytes. */
export interface Extracted {
  path: string;
  files: number;
  bytes: number;
}

/** What files.downloadDir extracted into `localDir`: the regular files
 * and their bytes, and the entries it left out (neither a file, a
 * directory nor a link). */
export interface Downloaded {
  localDir: string;
  files: number;
  bytes: number;
  skipped: string[];
}

/** The query of a runs/files request beside its path. */
interface FilesQuery {
  extract?: string;
  archive?: string;
}

/** How a streamed transfer (runs/files) is sent: `timeoutMs` bounds how
 * long the connection may stay silent (none by default). */
export interface TransferOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** An exception raised by code in {@link Sandbox.runCode}. */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/** What runCode produced: `result` is the last expression's value (JSON, or
 * its repr string), `error` set when the code raised (the sandbox stays
 * usable). */
export interface Execution {
  stdout: string;
  stderr: string;
  result: unknown;
  error: ExecutionError | null;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

/** What commands.run produced; `timedOut` when it was killed at its timeout
 * (exitCode 137). A non-zero exit is a result, not an exception. */
export interface CommandResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  timedOut: boolean;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

/** One entry of files.list (`name` relative to the directory listed) or
 * what files.stat found (`name` the path asked): type is file, dir, symlink
 * or other; `mode` the permission bits (0o644), `mtime` the modification
 * time in seconds since the epoch, `target` a symbolic link's (from stat). */
export interface EntryInfo {
  name: string;
  type: string;
  size: number;
  mode?: number;
  mtime?: number;
  target?: string;
}

/** What files.list answers: `truncated` says there were more entries than
 * it answered (`maxEntries`, at most 1000). */
export type EntryList = EntryInfo[] & { truncated: boolean };

/** How files.list lists. */
export interface ListOptions extends OpOptions {
  /** The whole tree, depth first; names relative to the directory listed. */
  recursive?: boolean;
  /** At most this many entries (the server answers 1000 at most). */
  maxEntries?: number;
}

export interface CreateSandboxOptions {
  /** Seconds without an operation, then the sandbox ends (default 300). */
  idleTimeoutSeconds?: number | null;
  /** Its whole life: seconds or a duration such as "1h". */
  timeout?: number | string;
  env?: Record<string, EnvValue>;
  /** Accept a Runtime whose Pods several Runs share. */
  shared?: boolean;
  name?: string;
  generateName?: string;
  labels?: Record<string, string>;
  readyTimeoutMs?: number;
  namespace?: string;
  signal?: AbortSignal;
}

type OpOptions = { timeoutMs?: number; signal?: AbortSignal };

/** One sandbox: a function Run with the handler kruntimes.sandbox. */
export class Sandbox {
  readonly commands: Commands;
  readonly files: Files;
  private closed = false;

  constructor(
    readonly fn: Function,
    private readonly owned: boolean,
    /** Reads the sandbox's command logs (runs/log?command=). */
    readonly transport: Transport,
  ) {
    this.commands = new Commands(this);
    this.files = new Files(this);
  }

  /** Creates a sandbox on `runtime` and waits until it is Ready; if it does
   * not become Ready, the Run is deleted and the error thrown. */
  static async create(transport: Transport, namespace: string, runtime = 'python', opts: CreateSandboxOptions = {}): Promise<Sandbox> {
    const ns = opts.namespace ?? namespace;
    const rt = await transport.call('GET', runtimesPath(ns, runtime), { signal: opts.signal });
    const capacity = Number(rt?.spec?.capacity?.runs ?? 1);
    if (capacity !== 1 && !opts.shared) {
      throw new SharedRuntime(
        `Runtime ${runtime} has capacity.runs ${capacity}: a sandbox there shares its Pod, files and processes with other Runs; ` +
          'use a Runtime with capacity.runs 1, or pass shared: true',
      );
    }
    const metadata: Record<string, unknown> = { labels: { ...(opts.labels ?? {}) } };
    if (opts.name) metadata.name = opts.name;
    else metadata.generateName = opts.generateName ?? 'sandbox-';
    const fn: Record<string, unknown> = { handler: SANDBOX_HANDLER };
    const idle = opts.idleTimeoutSeconds === undefined ? 300 : opts.idleTimeoutSeconds;
    if (idle !== null) fn.idleTimeoutSeconds = Math.trunc(idle);
    const spec: Record<string, unknown> = { runtime, mode: { function: fn } };
    if (opts.env && Object.keys(opts.env).length) spec.env = envList(opts.env);
    if (opts.timeout !== undefined) spec.timeout = durationString(opts.timeout);
    const run = await transport.call<RunObject>('POST', runsPath(ns), {
      run: opts.name,
      obj: { apiVersion: API_VERSION, kind: 'Run', metadata, spec },
      signal: opts.signal,
    });
    const sandbox = new Sandbox(new Function(transport, run), true, transport);
    try {
      await sandbox.fn.waitReady({ timeoutMs: opts.readyTimeoutMs ?? 120_000, signal: opts.signal });
    } catch (e) {
      await sandbox.close().catch(() => undefined);
      throw e;
    }
    return sandbox;
  }

  /** Attaches to the existing sandbox Run `name`; close() leaves it alone. */
  static async connect(transport: Transport, namespace: string, name: string, opts: { signal?: AbortSignal } = {}): Promise<Sandbox> {
    const run = await transport.call<RunObject>('GET', runsPath(namespace, name), { run: name, signal: opts.signal });
    const handler = run.spec?.mode?.function?.handler;
    if (handler !== SANDBOX_HANDLER) {
      throw new KruntimesError(`Run ${name} is not a sandbox: its handler is ${JSON.stringify(handler)}, not ${SANDBOX_HANDLER}`, {
        run: name,
      });
    }
    return new Sandbox(new Function(transport, run), false, transport);
  }

  /** The name of the sandbox's Run. */
  get name(): string {
    return this.fn.name;
  }

  /** Deletes the sandbox's Run if this handle created it; idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.owned) await this.fn.delete();
  }

  /** Deletes the sandbox's Run, whoever created it. */
  async delete(): Promise<void> {
    this.closed = true;
    await this.fn.delete();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Runs Python `code` in the sandbox's persistent namespace; an exception
   * in the code is returned in `error`, not thrown. */
  async runCode(code: string, opts: OpOptions = {}): Promise<Execution> {
    const out = await this.call({ op: 'run_code', code, timeout: seconds(opts.timeoutMs) }, opts);
    const err = out.error;
    return {
      stdout: out.stdout ?? '',
      stderr: out.stderr ?? '',
      result: out.result ?? null,
      error: err ? { name: err.name ?? '', value: err.value ?? '', traceback: err.traceback ?? '' } : null,
      stdoutTruncated: Boolean(out.stdout_truncated),
      stderrTruncated: Boolean(out.stderr_truncated),
    };
  }

  /** @internal Throws when close() or delete() was called. */
  assertOpen(): void {
    if (this.closed) throw new KruntimesError(`sandbox ${this.name} is closed`, { run: this.name });
  }

  /** Sends one operation, once, and resolves with its answer. */
  async call(request: Record<string, unknown>, opts: OpOptions = {}): Promise<any> {
    this.assertOpen();
    const size = Buffer.byteLength(JSON.stringify(request));
    if (size > MAX_INPUT_BYTES) {
      throw new PayloadTooLarge(
        `the ${String(request.op)} request is ${size} bytes, over the ${MAX_INPUT_BYTES}-byte limit of an invocation; it was not sent`,
        { code: 413, run: this.name },
      );
    }
    try {
      const result = await this.fn.invoke(request, {
        timeoutMs: opts.timeoutMs === undefined ? undefined : opts.timeoutMs + ANSWER_MARGIN_MS,
        signal: opts.signal,
      });
      return result.output && typeof result.output === 'object' ? result.output : {};
    } catch (e) {
      if (e instanceof FunctionError && e.type === 'SandboxPathError') {
        throw new SandboxPathError(e.type, e.errorMessage, e.result, { code: e.code, run: e.run, invocationId: e.invocationId });
      }
      if (e instanceof FunctionError && e.type === 'FileNotFoundError') {
        throw new SandboxFileNotFound(e.type, e.errorMessage, e.result, { code: e.code, run: e.run, invocationId: e.invocationId });
      }
      throw e;
    }
  }
}

function seconds(ms: number | undefined): number | null {
  return ms === undefined ? null : ms / 1000;
}

/** One command of commands.list; `exitCode` is null while it runs. */
export interface CommandInfo {
  id: string;
  cmd: string | string[];
  running: boolean;
  exitCode: number | null;
  pid: number | null;
}

/** How commands.start (or run with `background`) starts a command. */
export interface StartOptions extends OpOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Keep stdin open for {@link CommandHandle.sendStdin}. */
  stdin?: boolean;
  /** Each line of stdout, as the command writes it. */
  onStdout?: (line: string) => void;
  /** Each line of stderr, as the command writes it. */
  onStderr?: (line: string) => void;
}

/** The longest one wait_command operation waits, well within an
 * invocation's default deadline; wait() sends another until the end. */
const WAIT_SLICE_MS = 45_000;

/** A command running in the background in a sandbox. Its output goes to a
 * log of its own (runs/log?command=ID), which the callbacks and
 * {@link stream} follow live and {@link output} reads as kept (the last
 * 1 MiB). */
export class CommandHandle {
  private readonly followers: { stream: string; done: Promise<void>; seen: string[] }[] = [];

  private constructor(
    private readonly sandbox: Sandbox,
    readonly id: string,
    readonly pid: number | null,
  ) {}

  /** A handle whose callbacks follow the command: each follow is open
   * before this resolves, so no line is missed and a missing command throws. */
  static async attach(sandbox: Sandbox, id: string, pid: number | null, opts: StartOptions = {}): Promise<CommandHandle> {
    const h = new CommandHandle(sandbox, id, pid);
    for (const [stream, callback] of [
      ['Stdout', opts.onStdout],
      ['Stderr', opts.onStderr],
    ] as const) {
      if (!callback) continue;
      const lines = await h.open(stream, true, opts.signal);
      const seen: string[] = [];
      const done = (async () => {
        for await (const line of lines) {
          seen.push(line);
          callback(line);
        }
      })();
      done.catch(() => undefined); // surfaced by wait()
      h.followers.push({ stream, done, seen });
    }
    return h;
  }

  /** The command's lines as it writes them, until it ends (`All`
   * interleaves stdout and stderr in write order). */
  async *stream(stream: 'All' | 'Stdout' | 'Stderr' = 'All', opts: { signal?: AbortSignal } = {}): AsyncGenerator<string> {
    yield* await this.open(stream, true, opts.signal);
  }

  /** What the command wrote so far (its log keeps the last 1 MiB). */
  async output(stream: 'All' | 'Stdout' | 'Stderr' = 'All', opts: { signal?: AbortSignal } = {}): Promise<string> {
    let text = '';
    for await (const line of await this.open(stream, false, opts.signal)) text += line;
    return text;
  }

  private async open(stream: string, follow: boolean, signal?: AbortSignal): Promise<AsyncGenerator<string>> {
    const { transport, name } = this.sandbox;
    let res: http.IncomingMessage;
    try {
      res = await transport.open({
        method: 'GET',
        path: runsPath(this.sandbox.fn.namespace, name, 'log'),
        query: { command: this.id, stream, follow: follow ? 'true' : undefined },
        signal,
      });
    } catch (e) {
      throw transport.failure(e, `output of command ${this.id} of ${name}`, { run: name });
    }
    if (res.statusCode !== 200) {
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      res.destroy();
      throw errorFor(res.statusCode ?? 0, headerOf(res.headers, 'Retry-After'), statusOf(Buffer.concat(chunks)), { run: name });
    }
    return lines(res);
  }

  /** Waits for the command to end and resolves with its exit code and
   * output (what the callbacks got, else what its log kept). With
   * `timeoutMs` it throws WaitTimeout when the command still runs then; the
   * command goes on. */
  async wait(opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<CommandResult> {
    const deadline = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
    let out: any;
    for (;;) {
      const left = deadline === undefined ? WAIT_SLICE_MS : Math.min(WAIT_SLICE_MS, deadline - Date.now());
      out = await this.sandbox.call(
        { op: 'wait_command', id: this.id, timeout: Math.max(left, 1) / 1000 },
        { timeoutMs: Math.max(left, 1), signal: opts.signal },
      );
      if (!out.running) break;
      if (deadline !== undefined && Date.now() >= deadline) {
        throw new WaitTimeout(`command ${this.id} of sandbox ${this.sandbox.name} still runs after ${opts.timeoutMs} ms`, {
          run: this.sandbox.name,
        });
      }
    }
    const got: Record<string, string> = {};
    for (const f of this.followers) {
      // The follow ends right after the command: its log closes then.
      await f.done;
      got[f.stream] = f.seen.join('');
    }
    return {
      stdout: got.Stdout ?? (await this.output('Stdout', opts)),
      stderr: got.Stderr ?? (await this.output('Stderr', opts)),
      exitCode: out.exit_code === null || out.exit_code === undefined ? -1 : Number(out.exit_code),
      timedOut: Boolean(out.timed_out),
      stdoutTruncated: false,
      stderrTruncated: false,
    };
  }

  /** Kills the command and every process it started; with `signal` (a
   * name such as "SIGINT" or a number) sends only that to its process group. */
  async kill(signal?: string | number, opts: OpOptions = {}): Promise<void> {
    const request: Record<string, unknown> = { op: 'kill_command', id: this.id };
    if (signal !== undefined) request.signal = signal;
    await this.sandbox.call(request, opts);
  }

  /** Writes to the command's stdin (started with `stdin: true`); `eof`
   * closes it after. */
  async sendStdin(data: string | Uint8Array, eof = false, opts: OpOptions = {}): Promise<void> {
    const request: Record<string, unknown> = { op: 'write_stdin', id: this.id, eof };
    if (typeof data === 'string') request.data = data;
    else request.data_b64 = Buffer.from(data).toString('base64');
    await this.sandbox.call(request, opts);
  }
}

/** The lines of a streamed answer as they arrive; the connection is never
 * reused (a follow stopped early has unread data). */
async function* lines(res: http.IncomingMessage): AsyncGenerator<string> {
  try {
    const decoder = new TextDecoder('utf-8');
    let pending = '';
    for await (const chunk of res) {
      pending += decoder.decode(chunk as Buffer, { stream: true });
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        yield pending.slice(0, nl + 1);
        pending = pending.slice(nl + 1);
      }
    }
    pending += decoder.decode();
    if (pending) yield pending;
  } finally {
    res.destroy();
  }
}

/** `sandbox.commands`: programs in the sandbox. */
export class Commands {
  constructor(private readonly sandbox: Sandbox) {}

  /** Starts `cmd` in the background and resolves with its handle at once;
   * without `timeoutMs` it runs until it exits, is killed, or the sandbox
   * ends. */
  async start(cmd: string | string[], opts: StartOptions = {}): Promise<CommandHandle> {
    const out = await this.sandbox.call(
      {
        op: 'start_command',
        cmd,
        timeout: seconds(opts.timeoutMs),
        env: { ...(opts.env ?? {}) },
        cwd: opts.cwd ?? null,
        stdin: Boolean(opts.stdin),
      },
      { signal: opts.signal },
    );
    return CommandHandle.attach(this.sandbox, String(out.id), out.pid === undefined || out.pid === null ? null : Number(out.pid), opts);
  }

  /** A handle on command `id`, started earlier (by this or another client). */
  async connect(id: string, opts: StartOptions = {}): Promise<CommandHandle> {
    const found = (await this.list(opts)).find((c) => c.id === id);
    if (!found) throw new NotFound(`sandbox ${this.sandbox.name} has no command ${JSON.stringify(id)}`, { code: 404, run: this.sandbox.name });
    return CommandHandle.attach(this.sandbox, id, found.pid, opts);
  }

  /** The sandbox's commands, running and recently ended, in start order. */
  async list(opts: OpOptions = {}): Promise<CommandInfo[]> {
    const out = await this.sandbox.call({ op: 'list_commands' }, opts);
    return (out.commands ?? []).map((c: any) => ({
      id: String(c.id),
      cmd: c.cmd ?? '',
      running: Boolean(c.running),
      exitCode: c.exit_code ?? null,
      pid: c.pid ?? null,
    }));
  }

  /** Runs `cmd` — a string through /bin/sh -c, or an argv list — in the
   * workspace (or `cwd`) with `env` added; killed with every process it
   * started at `timeoutMs`. With `onStdout`/`onStderr` each line reaches
   * them as the command writes it, and the result holds all of it. */
  async run(cmd: string | string[], opts: OpOptions & { env?: Record<string, string>; cwd?: string; onStdout?: (line: string) => void; onStderr?: (line: string) => void } = {}): Promise<CommandResult> {
    if (opts.onStdout || opts.onStderr) {
      return (await this.start(cmd, opts)).wait({ signal: opts.signal });
    }
    const out = await this.sandbox.call(
      { op: 'run_command', cmd, timeout: seconds(opts.timeoutMs), env: { ...(opts.env ?? {}) }, cwd: opts.cwd ?? null },
      opts,
    );
    return {
      stdout: out.stdout ?? '',
      stderr: out.stderr ?? '',
      exitCode: Number(out.exit_code ?? -1),
      timedOut: Boolean(out.timed_out),
      stdoutTruncated: Boolean(out.stdout_truncated),
      stderrTruncated: Boolean(out.stderr_truncated),
    };
  }
}

/** `sandbox.files`: files in the sandbox's workspace; any path outside it is
 * refused ({@link SandboxPathError} from the small-file operations, a 400
 * KruntimesError from the streamed ones). */
export class Files {
  constructor(private readonly sandbox: Sandbox) {}

  /**
   * Streams `data` into the file `path`, of any size, and resolves with the
   * size written (`PUT runs/NAME/files`, authorized as `update runs/files`):
   * a Uint8Array or Buffer, a string (as UTF-8), a Node Readable, a web
   * ReadableStream or an AsyncIterable of Uint8Array, sent chunked as it
   * is read and never held whole. Missing directories are made; the file
   * is replaced only once all of it arrived, so an upload that fails
   * (the source's own error included, which is the one thrown) leaves the
   * old file. 409 is {@link Conflict} (the sandbox ended), 503
   * {@link Unavailable} (not Ready yet; nothing written).
   */
  async upload(path: string, data: ByteSource, opts: TransferOptions = {}): Promise<number> {
    const out = await this.put(path, data, undefined, opts);
    return Number(out.size ?? 0);
  }

  /**
   * Streams the tar archive `archive` (gzip-compressed or not; any source
   * {@link upload} takes) into the sandbox, which extracts it into the
   * directory `dir` (made when missing; "." is the workspace) as
   * `tar -x -C dir` would, merged with what is there
   * (`PUT runs/NAME/files?extract=tar`, `update runs/files`). All or
   * nothing: an archive that is refused (an entry leaving the workspace,
   * a device, a file where `dir` has a directory…; 400) or breaks off
   * extracts nothing.
   */
  async uploadTar(dir: string, archive: ByteSource, opts: TransferOptions = {}): Promise<Extracted> {
    const out = await this.put(dir, archive, 'tar', opts);
    return { path: String(out.path ?? dir), files: Number(out.files ?? 0), bytes: Number(out.bytes ?? 0) };
  }

  /**
   * Uploads the contents of the local directory `localDir` into the
   * directory `dir` of the sandbox, as {@link uploadTar}: tarred as it is
   * sent, never held whole. Symbolic links are sent as links, not
   * followed (one that leads outside the workspace refuses the upload); a
   * local error (an unreadable file, a FIFO) is thrown and extracts nothing.
   */
  async uploadDir(localDir: string, dir: string, opts: TransferOptions = {}): Promise<Extracted> {
    const info = await fs.promises.stat(localDir);
    if (!info.isDirectory()) {
      throw Object.assign(new Error(`${localDir} is not a local directory`), { code: 'ENOTDIR', path: localDir });
    }
    return this.uploadTar(dir, tarDirectory(localDir), opts);
  }

  /**
   * The file `path`, of any size, as a stream of its bytes
   * (`GET runs/NAME/files`, authorized as `get runs/files`): a Node
   * Readable, also an AsyncIterable of Buffer. Resolves once the sandbox
   * answered; a missing file throws {@link SandboxFileNotFound}, a sandbox
   * that ended {@link Conflict}, one not Ready yet {@link Unavailable}. A
   * stream that breaks off errors with a KruntimesError (compare the size
   * or a digest when it matters); destroy it to stop early.
   */
  async download(path: string, opts: TransferOptions = {}): Promise<Readable> {
    return this.stream(path, {}, opts);
  }

  /**
   * The directory `dir` as a tar archive, gzip-compressed with `gzip`,
   * written by the sandbox as it walks it (`GET runs/NAME/files?archive=`,
   * `get runs/files`): entries relative to `dir`, depth first; directories,
   * regular files (mode and modification time kept) and symbolic links,
   * stored as links, never followed. A Node Readable, as {@link download}'s;
   * a file that shrinks while it is read breaks the stream off.
   */
  async downloadTar(dir: string, opts: TransferOptions & { gzip?: boolean } = {}): Promise<Readable> {
    return this.stream(dir, { archive: opts.gzip ? 'tar.gz' : 'tar' }, opts);
  }

  /**
   * Downloads the contents of the directory `dir` into the local directory
   * `localDir` (made when missing, merged with what is there, as
   * `tar -x -C` would), extracted as the archive arrives. Nothing is
   * written outside `localDir`: tar-fs refuses names and links that leave
   * it, which stops the download with an error; entries other than files,
   * directories and links are skipped and named in `skipped`. Owners are
   * not set. What was extracted before an error stays.
   */
  async downloadDir(dir: string, localDir: string, opts: TransferOptions = {}): Promise<Downloaded> {
    const archive = await this.downloadTar(dir, opts);
    const out: Downloaded = { localDir, files: 0, bytes: 0, skipped: [] };
    await fs.promises.mkdir(localDir, { recursive: true });
    const extract = tarFs.extract(localDir, {
      chown: false,
      ignore: (_name: string, header?: TarHeader) => {
        if (header === undefined) return false;
        if (header.type === 'file') {
          out.files++;
          out.bytes += header.size ?? 0;
          return false;
        }
        if (header.type === 'directory' || header.type === 'symlink') return false;
        out.skipped.push(header.name);
        return true;
      },
    });
    await pipeline(archive, extract);
    return out;
  }

  /** The answer to a GET of runs/files, as a Readable that errors with a
   * KruntimesError when it breaks off. */
  private async stream(path: string, query: FilesQuery, opts: TransferOptions): Promise<Readable> {
    const res = await this.open('GET', path, undefined, query, opts);
    const { name } = this.sandbox;
    async function* bytes(): AsyncGenerator<Buffer> {
      try {
        for await (const chunk of res) yield chunk as Buffer;
      } catch (e) {
        if (e instanceof KruntimesError) throw e;
        const err = new KruntimesError(`the download of ${path} from sandbox ${name} broke off: ${(e as Error).message}`, { run: name, cause: e });
        err.notRun = false;
        throw err;
      } finally {
        res.destroy();
      }
    }
    return Readable.from(bytes(), { objectMode: false });
  }

  /** Downloads the file `path` into the local file `localPath`, whole or not
   * at all: written to a temporary file beside it, synced, then renamed
   * over it; a download that fails leaves `localPath` as it was.
   * Resolves with the size written. */
  async downloadTo(path: string, localPath: string, opts: TransferOptions = {}): Promise<number> {
    return writeFileAtomically(localPath, await this.download(path, opts));
  }

  private async put(path: string, data: ByteSource, extract: string | undefined, opts: TransferOptions): Promise<any> {
    const res = await this.open('PUT', path, byteChunks(data), { extract }, opts);
    const body = await readAll(res, this.sandbox.name);
    try {
      return JSON.parse(body.toString('utf8'));
    } catch (e) {
      const err = new KruntimesError(`the answer to the upload of ${path} is not JSON: ${(e as Error).message}`, { run: this.sandbox.name, cause: e });
      err.notRun = false;
      throw err;
    }
  }

  /** Sends one runs/files request and resolves with its 200 answer, or
   * throws the error an answer or its absence means. */
  private async open(method: string, path: string, body: AsyncIterable<Uint8Array> | undefined, query: FilesQuery, opts: TransferOptions): Promise<http.IncomingMessage> {
    this.sandbox.assertOpen();
    const { transport, name } = this.sandbox;
    let res: http.IncomingMessage;
    try {
      res = await transport.open({
        method,
        path: runsPath(this.sandbox.fn.namespace, name, 'files'),
        query: { path, ...query },
        body,
        headers: body === undefined ? { Accept: '*/*' } : { 'Content-Type': 'application/octet-stream' },
        signal: opts.signal,
        timeoutMs: opts.timeoutMs,
      });
    } catch (e) {
      // The source's own error is the caller's: the upload broke off and
      // the sandbox wrote nothing.
      if (!(e instanceof TransportError)) throw e;
      throw transport.failure(e, `${method} ${path} of sandbox ${name}`, { run: name });
    }
    if (res.statusCode === 200) return res;
    const answer = await readAll(res, name).finally(() => res.destroy());
    throw fileError(res.statusCode ?? 0, headerOf(res.headers, 'Retry-After'), answer, name);
  }

  /** Writes `data` (a string as UTF-8) to `path`, creating its directories.
   * Over 512 KiB throws PayloadTooLarge before anything is sent. */
  async write(path: string, data: string | Uint8Array, opts: OpOptions = {}): Promise<void> {
    const raw = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    if (raw.length > MAX_FILE_BYTES) {
      throw new PayloadTooLarge(
        `${path} has ${raw.length} bytes, over the ${MAX_FILE_BYTES}-byte limit of a sandbox file operation; it was not sent`,
        { code: 413, run: this.sandbox.name },
      );
    }
    await this.sandbox.call({ op: 'write_file', path, data_b64: raw.toString('base64') }, opts);
  }

  /** The contents of the file `path` (at most 512 KiB). */
  async read(path: string, opts: OpOptions = {}): Promise<Buffer> {
    const out = await this.sandbox.call({ op: 'read_file', path }, opts);
    return Buffer.from(out.data_b64 ?? '', 'base64');
  }

  /** The entries of the directory `path`, by name; with `recursive`, of its
   * whole tree, depth first (a directory followed by its own entries; links
   * are listed, not followed). */
  async list(path = '.', opts: ListOptions = {}): Promise<EntryList> {
    const request: Record<string, unknown> = { op: 'list_files', path, recursive: Boolean(opts.recursive) };
    if (opts.maxEntries !== undefined) request.max_entries = opts.maxEntries;
    const out = await this.sandbox.call(request, opts);
    const entries = (out.entries ?? []).map((e: any) => entryInfo(e)) as EntryList;
    entries.truncated = Boolean(out.truncated);
    return entries;
  }

  /** What `path` is (a symbolic link as itself, with its `target`); throws
   * {@link SandboxFileNotFound} when it does not exist. */
  async stat(path: string, opts: OpOptions = {}): Promise<EntryInfo> {
    return entryInfo(await this.sandbox.call({ op: 'stat', path }, opts), path);
  }

  /** Whether `path` exists (a symbolic link counts as itself). */
  async exists(path: string, opts: OpOptions = {}): Promise<boolean> {
    return Boolean((await this.sandbox.call({ op: 'exists', path }, opts)).exists);
  }

  /** Makes the directory `path`, by default as `mkdir -p` (missing parents
   * too, one already there is fine); resolves with whether it made it. */
  async mkdir(path: string, opts: OpOptions & { parents?: boolean; existOk?: boolean } = {}): Promise<boolean> {
    const out = await this.sandbox.call({ op: 'mkdir', path, parents: opts.parents ?? true, exist_ok: opts.existOk ?? true }, opts);
    return Boolean(out.created);
  }

  /** Renames `src` to `dst` in the workspace, atomically: a file or link at
   * `dst` is replaced, a directory there is refused (IsADirectoryError);
   * links are moved, not followed; `dst`'s directory must exist. */
  async move(src: string, dst: string, opts: OpOptions = {}): Promise<void> {
    await this.sandbox.call({ op: 'move', src, dst }, opts);
  }

  /** Removes the file, link or directory `path`: a directory with its
   * contents, or, with `recursive: false`, only when it is empty. */
  async remove(path: string, opts: OpOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.sandbox.call({ op: 'remove', path, recursive: opts.recursive ?? true }, opts);
  }
}

function entryInfo(e: any, name?: string): EntryInfo {
  const info: EntryInfo = { name: name ?? e.name, type: e.type, size: Number(e.size ?? 0) };
  if (e.mode !== undefined) info.mode = Number(e.mode);
  if (e.mtime !== undefined) info.mtime = Number(e.mtime);
  if (typeof e.target === 'string') info.target = e.target;
  return info;
}

/** The whole of a (small) answer. */
async function readAll(res: http.IncomingMessage, run: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  try {
    for await (const chunk of res) chunks.push(chunk as Buffer);
  } catch (e) {
    const err = new KruntimesError(`the answer of sandbox ${run} broke off: ${(e as Error).message}`, { run, cause: e });
    err.notRun = false;
    throw err;
  }
  return Buffer.concat(chunks);
}

/**
 * The error of a runs/files answer. A missing file is a 404 whose Status
 * names the resource runs/files (an unknown Run names runs);
 * kruntimes-apiserver's 503s (not Ready yet, the sandbox moving or
 * unreachable) read or wrote nothing, so each is {@link Unavailable} even
 * without retryAfterSeconds. Everything else as {@link errorFor}.
 */
function fileError(code: number, retryAfter: string | undefined, body: Buffer, run: string): KruntimesError {
  const status = statusOf(body);
  if (code === 404 && status?.details?.kind === 'runs/files') {
    const err = new SandboxFileNotFound('FileNotFoundError', status.message ?? `no file ${status.details.name ?? ''}`, undefined, {
      code,
      reason: status.reason ?? '',
      run,
      status,
    });
    err.notRun = true;
    return err;
  }
  if (code === 503 && status !== undefined) {
    const seconds = status.details?.retryAfterSeconds || Number.parseInt(retryAfter ?? '', 10) || 1;
    return new Unavailable(status.message || 'HTTP 503', seconds, { code, reason: status.reason ?? '', run, status });
  }
  return errorFor(code, retryAfter, status, { run });
}
