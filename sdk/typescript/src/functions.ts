/** Function Runs: create, wait until Ready, invoke, delete. */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import {
  Aborted,
  Busy,
  ConnectFailed,
  FunctionError,
  Invalid,
  KruntimesError,
  NotFound,
  OutcomeUnknown,
  PayloadTooLarge,
  RunEnded,
  Unavailable,
  WaitTimeout,
  errorFor,
} from './errors.js';
import { RunHandle, deleteRun, sleep, type RunObject } from './run.js';
import { API_VERSION, TransportError, headerOf, runsPath, statusOf, type Transport } from './transport.js';

/** The largest invoke body kruntimes accepts (apis/invocation.MaxInputBytes). */
export const MAX_INPUT_BYTES = 1 << 20;
/** The longest invocation ID kruntimes accepts. */
export const MAX_INVOCATION_ID_BYTES = 128;
/** The server's default invocation timeout when none is asked for. */
const SERVER_DEFAULT_TIMEOUT_MS = 60_000;

export const HEADER_INVOCATION_ID = 'X-Kruntime-Invocation-ID';
export const HEADER_FUNCTION_ERROR = 'X-Kruntime-Function-Error';
export const HEADER_DEDUPLICATED = 'X-Kruntime-Deduplicated';

/** The first wait before an unknown outcome is sent again; it doubles up to
 * Retry.maxBackoffMs (no answer said how long to wait). */
const FIRST_UNKNOWN_WAIT_MS = 100;

export type { RunObject } from './run.js';

export const TERMINAL_PHASES = ['Succeeded', 'Failed', 'Timeout', 'Cancelled'];

/** Which answers an invocation is sent again on (opt-in; nothing is re-sent
 * without it). `busy` (429) and `unavailable` (kruntimes' own 503) guarantee
 * the handler did not run; each wait honours the answer's Retry-After, at
 * most `maxBackoffMs`. `unknown` (off by default) also re-sends after
 * {@link OutcomeUnknown}, which is safe because every attempt carries the
 * same invocation ID and the owning runtimed answers a repeat from its
 * record of the first (within the limits of docs/invoke.md, "Retrying
 * safely"); a replayed answer is final. A 504 is never re-sent. No attempt
 * starts after `deadlineMs` from the first. */
export interface Retry {
  busy?: boolean;
  unavailable?: boolean;
  unknown?: boolean;
  deadlineMs?: number;
  maxBackoffMs?: number;
}

/** What a handler wrote during one invocation (at most 64 KiB each). */
export interface Logs {
  stdout: string;
  stderr: string;
}

/** One part of a Server-Timing header: `dur` in milliseconds, `desc` its
 * description (e.g. worker;desc=warm). */
export interface TimingEntry {
  dur?: number;
  desc?: string;
}

/** A completed invocation. */
export interface InvokeResult {
  output: unknown;
  outputs: Record<string, string>;
  logs: Logs;
  invocationId: string;
  /** How long the handler ran, in milliseconds. */
  durationMs: number;
  /** The answer repeats the recorded outcome of an earlier attempt with
   * the same invocation ID. */
  replayed: boolean;
  /** The Server-Timing header by name: apiserver, runtimed, handler,
   * worker, dedup… (docs/invoke.md). */
  serverTiming: Record<string, TimingEntry>;
}

export interface InvokeOptions {
  /** Yours, or one the SDK generates: the owning runtimed deduplicates it. */
  invocationId?: string;
  /** The request's ?timeout=: the server stops the handler a little before
   * it and answers 504. */
  timeoutMs?: number;
  retry?: Retry;
  /** Aborting before the request is sent throws Aborted with notRun; after,
   * Aborted with notRun false (the outcome is unknown; nothing is recalled). */
  signal?: AbortSignal;
}

/** Parses a Server-Timing header: `apiserver;dur=0.412, worker;desc=warm`. */
export function parseServerTiming(value: string | undefined): Record<string, TimingEntry> {
  const timing: Record<string, TimingEntry> = {};
  if (!value) return timing;
  for (const part of value.split(',')) {
    const [name, ...params] = part.split(';').map((s) => s.trim());
    if (!name) continue;
    const entry: TimingEntry = {};
    for (const param of params) {
      const eq = param.indexOf('=');
      if (eq < 0) continue;
      const key = param.slice(0, eq).trim().toLowerCase();
      let val = param.slice(eq + 1).trim();
      if (val.startsWith('"') && val.endsWith('"') && val.length >= 2) val = val.slice(1, -1);
      if (key === 'dur') {
        const n = Number(val);
        if (!Number.isNaN(n)) entry.dur = n;
      } else if (key === 'desc') {
        entry.desc = val;
      }
    }
    timing[name] = entry;
  }
  return timing;
}

/** A Go duration for spec.timeout: seconds → "90s"; strings pass. */
export function durationString(value: number | string | undefined): string | undefined {
  if (value === undefined || typeof value === 'string') return value;
  return `${value}s`;
}

/** A key of a Secret in the Run's namespace. runtimed reads it when each
 * attempt starts, as the Runtime's ServiceAccount (`runtime-<runtime>`),
 * which a namespace admin must have granted `get` on that Secret; otherwise
 * the Run fails with the kubectl commands that grant it. The value is never
 * in the Run. `optional` leaves the variable unset when the Secret or key
 * does not exist. */
export interface SecretKeyRef {
  name: string;
  key: string;
  optional?: boolean;
}

/** A value of `env`: the value itself, or `{ secretKeyRef }` for one read
 * from a Secret, e.g. `{ TOKEN: { secretKeyRef: { name: 'db', key: 'password' } } }`. */
export type EnvValue = string | { secretKeyRef: SecretKeyRef };

/** One entry of spec.env. */
export type EnvVar = { name: string; value: string } | { name: string; valueFrom: { secretKeyRef: SecretKeyRef } };

export function envList(env: Record<string, EnvValue> | undefined): EnvVar[] {
  return Object.entries(env ?? {}).map(([name, value]): EnvVar => {
    if (typeof value === 'object' && value !== null && 'secretKeyRef' in value) {
      const ref: SecretKeyRef = { name: value.secretKeyRef.name, key: value.secretKeyRef.key };
      if (value.secretKeyRef.optional) ref.optional = true;
      return { name, valueFrom: { secretKeyRef: ref } };
    }
    return { name, value: String(value) };
  });
}

export function runMessage(run: RunObject): string {
  return run.status?.message ?? '';
}

function isReady(run: RunObject): boolean {
  if (run.status?.phase !== 'Ready') return false;
  return (run.status?.conditions ?? []).some((c: any) => c.type === 'Ready' && c.status === 'True');
}

/**
 * Yields the Run's current state, then each change, until `timeoutMs`
 * passed (a list and watch on metadata.name, as kubectl wait does). Throws
 * NotFound when the Run is deleted.
 */
export async function* watchRun(
  transport: Transport,
  namespace: string,
  name: string,
  timeoutMs: number | undefined,
  signal?: AbortSignal,
): AsyncGenerator<RunObject> {
  const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  const fieldSelector = `metadata.name=${name}`;
  for (;;) {
    const listed = await transport.call('GET', runsPath(namespace), { query: { fieldSelector }, run: name, signal });
    const items: RunObject[] = listed.items ?? [];
    if (!items.length) throw new NotFound(`run ${name} not found`, { code: 404, run: name });
    yield items[0];
    let rv: string = listed.metadata.resourceVersion;
    let expired = false;
    while (!expired) {
      const left = deadline === undefined ? undefined : deadline - Date.now();
      if (left !== undefined && left <= 0) return;
      const seconds = left === undefined ? 300 : Math.min(left / 1000, 300);
      for await (const event of transport.watch(
        runsPath(namespace),
        { fieldSelector, resourceVersion: rv, allowWatchBookmarks: 'true' },
        seconds,
        signal,
      )) {
        const obj = event.object ?? {};
        if (event.type === 'ERROR') {
          expired = true; // e.g. 410 Gone: list again
          break;
        }
        rv = obj.metadata?.resourceVersion ?? rv;
        if (event.type === 'BOOKMARK') continue;
        if (event.type === 'DELETED') throw new NotFound(`run ${name} was deleted`, { code: 404, run: name });
        yield obj as RunObject;
        if (deadline !== undefined && Date.now() >= deadline) return;
      }
    }
  }
}

/** A handle on one function Run (see {@link Functions.create}). */
export class Function extends RunHandle {
  /** spec.mode.function.description, if the Run declares one. */
  get description(): string | undefined {
    return this.run.spec?.mode?.function?.description;
  }

  /** spec.mode.function.schema ({input, output}), if the Run declares one. */
  get schema(): { input?: Record<string, unknown>; output?: Record<string, unknown> } | undefined {
    return this.run.spec?.mode?.function?.schema;
  }

  /**
   * Waits, by watching the Run, until it is Ready and can be invoked. Throws
   * RunEnded with the Run's message as soon as it ends (e.g. Failed: its
   * source did not import), NotFound when it is deleted, WaitTimeout after
   * `timeoutMs` (default 120 s).
   */
  async waitReady(opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<this> {
    const timeoutMs = opts.timeoutMs ?? 120_000;
    for await (const run of watchRun(this.transport, this.namespace, this.name, timeoutMs, opts.signal)) {
      this.run = run;
      if (isReady(run)) return this;
      if (TERMINAL_PHASES.includes(this.phase)) {
        throw new RunEnded(`function Run ${this.name} ended ${this.phase} before it was Ready: ${runMessage(run)}`, this.phase, {
          run: this.name,
        });
      }
    }
    throw new WaitTimeout(
      `function Run ${this.name} was not Ready within ${timeoutMs / 1000}s (phase ${this.phase || 'Pending'}: ${runMessage(this.run)})`,
      { run: this.name },
    );
  }

  /**
   * Invokes the function once with `input` (anything JSON.stringify takes)
   * and resolves with its result.
   *
   * The request is sent once: no HTTP-level retry, ever. With `retry`, it is
   * sent again (same invocation ID) after a 429 or kruntimes' own 503, and —
   * with `unknown: true` — after an unknown outcome, which the owning
   * runtimed answers from its record of the first. A handler that threw is
   * FunctionError; see errors.ts for the others.
   */
  async invoke(input: unknown = null, opts: InvokeOptions = {}): Promise<InvokeResult> {
    const body = Buffer.from(JSON.stringify(input === undefined ? null : input));
    const invocationId = opts.invocationId ?? randomUUID().replaceAll('-', '');
    if (body.length > MAX_INPUT_BYTES) {
      throw new PayloadTooLarge(
        `the input is ${body.length} bytes of JSON, over the ${MAX_INPUT_BYTES}-byte limit of an invocation; it was not sent`,
        { code: 413, run: this.name, invocationId },
      );
    }
    if (Buffer.byteLength(invocationId) > MAX_INVOCATION_ID_BYTES) {
      throw new Invalid(`the invocation ID has over ${MAX_INVOCATION_ID_BYTES} bytes`, [], { run: this.name, invocationId });
    }
    const retry = opts.retry;
    const started = Date.now();
    let unknownWait = FIRST_UNKNOWN_WAIT_MS;
    for (;;) {
      let failed: KruntimesError;
      let wait: number;
      try {
        return await this.invokeOnce(body, invocationId, opts);
      } catch (e) {
        if (!retry) throw e;
        const maxBackoff = retry.maxBackoffMs ?? 5000;
        if (e instanceof Busy || e instanceof Unavailable) {
          if ((e instanceof Busy && retry.busy === false) || (e instanceof Unavailable && retry.unavailable === false)) throw e;
          failed = e;
          wait = Math.min(Math.max(e.retryAfter * 1000, 50), maxBackoff);
        } else if (e instanceof OutcomeUnknown && retry.unknown && !e.replayed) {
          failed = e;
          wait = unknownWait;
          unknownWait = Math.min(unknownWait * 2, maxBackoff);
        } else {
          throw e;
        }
      }
      if (Date.now() - started + wait > (retry.deadlineMs ?? 30_000)) throw failed;
      try {
        await sleep(wait, opts.signal);
      } catch (reason) {
        const err = new Aborted('aborted while waiting to send the invocation again', {
          run: this.name,
          invocationId,
          cause: reason,
        });
        err.notRun = failed.notRun;
        throw err;
      }
    }
  }

  private async invokeOnce(body: Buffer, invocationId: string, opts: InvokeOptions): Promise<InvokeResult> {
    const query: Record<string, string> = { uid: this.uid };
    if (opts.timeoutMs !== undefined) query.timeout = `${Math.trunc(opts.timeoutMs)}ms`;
    // The server answers (504) before its deadline; wait a little longer
    // for that answer than the invocation may take.
    const silentMs = (opts.timeoutMs ?? SERVER_DEFAULT_TIMEOUT_MS) + 5000;
    let res;
    try {
      res = await this.transport.send({
        method: 'POST',
        path: runsPath(this.namespace, this.name, 'invoke'),
        query,
        body,
        headers: { 'Content-Type': 'application/json', [HEADER_INVOCATION_ID]: invocationId },
        signal: opts.signal,
        timeoutMs: silentMs,
      });
    } catch (e) {
      const fields = { run: this.name, invocationId, cause: e };
      if (e instanceof TransportError) {
        if (e.aborted) {
          const err = new Aborted(
            e.sent ? 'aborted after the invocation was sent; the handler may have run' : 'aborted before the invocation was sent',
            fields,
          );
          err.notRun = !e.sent;
          throw err;
        }
        if (!e.sent) throw new ConnectFailed(`cannot connect to ${this.transport.server.origin}: ${e.message}`, fields);
        throw new OutcomeUnknown(`the invocation was sent and no answer came back (${e.message}); the handler may have run`, fields);
      }
      throw e;
    }
    const answeredId = headerOf(res.headers, HEADER_INVOCATION_ID) || invocationId;
    const replayed = (headerOf(res.headers, HEADER_DEDUPLICATED) ?? '').toLowerCase() === 'true';
    if (res.code !== 200) {
      const err = errorFor(res.code, headerOf(res.headers, 'Retry-After'), statusOf(res.body), {
        run: this.name,
        invocationId: answeredId,
        invoke: true,
      });
      err.replayed = replayed;
      throw err;
    }
    let doc: any;
    try {
      doc = JSON.parse(res.body.toString('utf8'));
    } catch (e) {
      throw new OutcomeUnknown(`the answer is not an InvokeResult: ${JSON.stringify(res.body.subarray(0, 200).toString('utf8'))}`, {
        code: 200,
        run: this.name,
        invocationId: answeredId,
        cause: e,
      });
    }
    const result: InvokeResult = {
      output: doc.output ?? null,
      outputs: { ...(doc.outputs ?? {}) },
      logs: { stdout: doc.logs?.stdout ?? '', stderr: doc.logs?.stderr ?? '' },
      invocationId: doc.invocationId || answeredId,
      durationMs: doc.durationMillis ?? 0,
      replayed,
      serverTiming: parseServerTiming(headerOf(res.headers, 'Server-Timing')),
    };
    if (doc.error) {
      const err = new FunctionError(
        doc.error.type || headerOf(res.headers, HEADER_FUNCTION_ERROR) || '',
        doc.error.message ?? '',
        result,
        { code: 200, run: this.name, invocationId: result.invocationId },
      );
      err.replayed = replayed;
      throw err;
    }
    return result;
  }

  /** `await using fn = await client.functions.create(…)` deletes it at the
   * end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.delete();
  }
}

/** A function Run to create. */
export interface CreateFunctionOptions {
  /** The Run's name; else one generated from generateName (default "fn-"). */
  name?: string;
  generateName?: string;
  /** A Runtime of the namespace. */
  runtime: string;
  /** The code: a string is written as main.py (so handler "main.handle");
   * `{ file }` is read and written under its own name. */
  source: string | { file: string };
  /** module.function, e.g. "main.handle". */
  handler: string;
  /** Overrides the file name the source is written as. */
  path?: string;
  env?: Record<string, EnvValue>;
  /** Seconds without an invocation, then the Run ends (Timeout). */
  idleTimeoutSeconds?: number;
  /** The Run's whole life: seconds, or a duration such as "1h". */
  timeout?: number | string;
  labels?: Record<string, string>;
  /** Registrations, as spec.retryPolicy.maxAttempts. */
  maxAttempts?: number;
  /** spec.mode.function.description: what an agent reads. */
  description?: string;
  /** spec.mode.function.schema: JSON Schemas (the OpenAPI v3 subset of
   * CRDs) of the input, checked by the server before dispatch, and of the
   * output. */
  schema?: { input?: Record<string, unknown>; output?: Record<string, unknown> };
  namespace?: string;
  signal?: AbortSignal;
}

/** `client.functions`: function Runs of the client's namespace. */
export class Functions {
  constructor(private readonly transport: Transport, private readonly namespace: string) {}

  /** Creates a function Run and resolves with its handle (not yet Ready:
   * call {@link Function.waitReady}). */
  async create(opts: CreateFunctionOptions): Promise<Function> {
    let inline: string;
    let inlinePath: string;
    if (typeof opts.source === 'string') {
      inline = opts.source;
      inlinePath = opts.path ?? 'main.py';
    } else {
      inline = await fs.promises.readFile(opts.source.file, 'utf8');
      inlinePath = opts.path ?? path.basename(opts.source.file);
    }
    const metadata: Record<string, unknown> = { labels: { ...(opts.labels ?? {}) } };
    if (opts.name) metadata.name = opts.name;
    else metadata.generateName = opts.generateName ?? 'fn-';
    const fn: Record<string, unknown> = { handler: opts.handler };
    if (opts.idleTimeoutSeconds !== undefined) fn.idleTimeoutSeconds = Math.trunc(opts.idleTimeoutSeconds);
    if (opts.description !== undefined) fn.description = opts.description;
    if (opts.schema !== undefined) fn.schema = opts.schema;
    const spec: Record<string, unknown> = {
      runtime: opts.runtime,
      source: { inline, inlinePath },
      mode: { function: fn },
    };
    if (opts.env && Object.keys(opts.env).length) spec.env = envList(opts.env);
    if (opts.timeout !== undefined) spec.timeout = durationString(opts.timeout);
    if (opts.maxAttempts !== undefined) spec.retryPolicy = { maxAttempts: Math.trunc(opts.maxAttempts) };
    const ns = opts.namespace ?? this.namespace;
    const run = await this.transport.call<RunObject>('POST', runsPath(ns), {
      run: opts.name,
      obj: { apiVersion: API_VERSION, kind: 'Run', metadata, spec },
      signal: opts.signal,
    });
    return new Function(this.transport, run);
  }

  /** The function Run `name`. */
  async get(name: string, opts: { namespace?: string; signal?: AbortSignal } = {}): Promise<Function> {
    const run = await this.transport.call<RunObject>('GET', runsPath(opts.namespace ?? this.namespace, name), {
      run: name,
      signal: opts.signal,
    });
    return new Function(this.transport, run);
  }

  /** The function Runs of the namespace, with these labels if given (a map,
   * or a label selector string such as "team=agents,tier!=dev"). */
  async list(
    labels?: Record<string, string> | string,
    opts: { namespace?: string; signal?: AbortSignal } = {},
  ): Promise<Function[]> {
    const query: Record<string, string> = {};
    if (labels && (typeof labels === 'string' || Object.keys(labels).length)) {
      query.labelSelector =
        typeof labels === 'string' ? labels : Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(',');
    }
    const listed = await this.transport.call('GET', runsPath(opts.namespace ?? this.namespace), { query, signal: opts.signal });
    return (listed.items as RunObject[])
      .filter((r) => r.spec?.mode?.function != null)
      .map((r) => new Function(this.transport, r));
  }

  /** Deletes the function Run `name` (a Run already gone is no error). */
  async delete(name: string, opts: { namespace?: string; signal?: AbortSignal } = {}): Promise<void> {
    await deleteRun(this.transport, opts.namespace ?? this.namespace, name, opts.signal);
  }
}
