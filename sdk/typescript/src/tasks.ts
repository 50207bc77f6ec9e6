/** Task Runs: run once, wait, cancel, read or follow the log. */
import type http from 'node:http';

import { WaitTimeout, errorFor } from './errors.js';
import { TERMINAL_PHASES, durationString, envList, runMessage, watchRun, type EnvValue, type RunObject } from './functions.js';
import { RunHandle, sleep } from './run.js';
import { API_VERSION, headerOf, runsPath, statusOf, type Transport } from './transport.js';

// How long a follow waits before following an attempt again that has printed
// nothing yet, or before looking for the next attempt.
const FOLLOW_AGAIN_MS = 200;

/** How a task Run ended. */
export interface TaskResult {
  name: string;
  /** Succeeded, Failed, Timeout or Cancelled (or the phase as of now, from
   * {@link Task.result}). */
  phase: string;
  exitCode: number | null;
  outputs: Record<string, string>;
  message: string;
  attempt: number;
  succeeded: boolean;
}

export interface LogOptions {
  /** Lines live as the program writes them, each attempt's after the one
   * before, until the attempt the Run ended with is done. */
  follow?: boolean;
  stream?: 'All' | 'Stdout' | 'Stderr';
  /** Only this attempt (the latest by default; with follow, from the first). */
  attempt?: number;
  tailLines?: number;
  signal?: AbortSignal;
}

/** A handle on one task Run (see {@link Tasks.run}). */
export class Task extends RunHandle {
  /** The result as of the last read (the phase may not be terminal yet). */
  result(): TaskResult {
    const status = this.run.status ?? {};
    return {
      name: this.name,
      phase: status.phase ?? '',
      exitCode: status.exitCode ?? null,
      outputs: { ...(status.outputs ?? {}) },
      message: runMessage(this.run),
      attempt: Number(status.attempt ?? 0),
      succeeded: status.phase === 'Succeeded',
    };
  }

  /** Waits, by watching the Run, until it ends; resolves with its result.
   * Throws WaitTimeout after `timeoutMs` (no bound by default). */
  async wait(opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<TaskResult> {
    for await (const run of watchRun(this.transport, this.namespace, this.name, opts.timeoutMs, opts.signal)) {
      this.run = run;
      if (TERMINAL_PHASES.includes(this.phase)) return this.result();
    }
    throw new WaitTimeout(`task Run ${this.name} did not end within ${(opts.timeoutMs ?? 0) / 1000}s (phase ${this.phase})`, {
      run: this.name,
    });
  }

  /** Asks kruntimes to cancel the Run (spec.cancelRequested, as krt cancel);
   * wait() then says Cancelled (or the end it reached first). */
  async cancel(opts: { signal?: AbortSignal } = {}): Promise<void> {
    this.run = await this.transport.call('PATCH', runsPath(this.namespace, this.name), {
      run: this.name,
      obj: { spec: { cancelRequested: true } },
      contentType: 'application/merge-patch+json',
      signal: opts.signal,
    });
  }

  /**
   * Yields the log of an attempt (the latest by default) line by line, each
   * with its newline, stdout and stderr interleaved (`stream` picks one).
   * Bytes that are not UTF-8 are replaced. Without `follow` it is the log as
   * of now; with `follow`, the lines arrive live (runs/log?follow=true).
   */
  async *logs(opts: LogOptions = {}): AsyncGenerator<string> {
    const stream = opts.stream ?? 'All';
    if (opts.follow) {
      yield* this.follow(stream, opts.attempt, opts.tailLines, opts.signal);
      return;
    }
    let resp;
    try {
      resp = await this.transport.send({
        method: 'GET',
        path: runsPath(this.namespace, this.name, 'log'),
        query: { stream, attempt: opts.attempt, tailLines: opts.tailLines },
        signal: opts.signal,
        timeoutMs: 60_000,
      });
    } catch (e) {
      throw this.transport.failure(e, `log of ${this.name}`, { run: this.name });
    }
    if (resp.code !== 200) throw errorFor(resp.code, headerOf(resp.headers, 'Retry-After'), statusOf(resp.body), { run: this.name });
    const text = new TextDecoder('utf-8').decode(resp.body);
    const lines = text.split(/(?<=\n)/);
    for (const line of lines) if (line) yield line;
  }

  private async refreshStatus(signal?: AbortSignal): Promise<any> {
    this.run = await this.transport.call('GET', runsPath(this.namespace, this.name), { run: this.name, signal });
    return this.run.status ?? {};
  }

  private async *follow(stream: string, attempt: number | undefined, tailLines: number | undefined, signal?: AbortSignal): AsyncGenerator<string> {
    let n = attempt ?? 1;
    for (;;) {
      // Attempt n exists once the Run counts it (the first always does).
      while (n > 1 && Number((await this.refreshStatus(signal)).attempt ?? 0) < n) {
        if (TERMINAL_PHASES.includes(this.phase)) return;
        await sleep(FOLLOW_AGAIN_MS, signal);
      }
      for (;;) {
        const counter = { bytes: 0 };
        yield* this.followAttempt(n, stream, tailLines, counter, signal);
        const status = await this.refreshStatus(signal);
        const ended = Number(status.attempt ?? 0) > n || TERMINAL_PHASES.includes(this.phase);
        // A follow that ended without a byte before the attempt did (the
        // server waits a bounded time for a first byte) is started again;
        // nothing was yielded, so nothing repeats.
        if (counter.bytes > 0 || ended) break;
        await sleep(FOLLOW_AGAIN_MS, signal);
      }
      if (attempt !== undefined) return;
      if (TERMINAL_PHASES.includes(this.phase) && Number(this.run.status?.attempt ?? 0) <= n) return;
      n += 1;
    }
  }

  private async *followAttempt(
    n: number,
    stream: string,
    tailLines: number | undefined,
    counter: { bytes: number },
    signal?: AbortSignal,
  ): AsyncGenerator<string> {
    let res: http.IncomingMessage;
    try {
      res = await this.transport.open({
        method: 'GET',
        path: runsPath(this.namespace, this.name, 'log'),
        query: { follow: 'true', attempt: n, stream, tailLines },
        signal,
      });
    } catch (e) {
      throw this.transport.failure(e, `log of ${this.name}`, { run: this.name });
    }
    try {
      if (res.statusCode !== 200) {
        const chunks: Buffer[] = [];
        for await (const chunk of res) chunks.push(chunk as Buffer);
        throw errorFor(res.statusCode ?? 0, headerOf(res.headers, 'Retry-After'), statusOf(Buffer.concat(chunks)), { run: this.name });
      }
      const decoder = new TextDecoder('utf-8');
      let pending = '';
      try {
        for await (const chunk of res) {
          counter.bytes += (chunk as Buffer).length;
          pending += decoder.decode(chunk as Buffer, { stream: true });
          let nl: number;
          while ((nl = pending.indexOf('\n')) >= 0) {
            yield pending.slice(0, nl + 1);
            pending = pending.slice(nl + 1);
          }
        }
      } catch (e) {
        throw this.transport.failure(e, `log of ${this.name}`, { run: this.name });
      }
      pending += decoder.decode();
      if (pending) yield pending;
    } finally {
      // A follow stopped early has unread data: never reuse its connection.
      res.destroy();
    }
  }

}

/** A task Run to create: exactly one of `script` (inline source, run with
 * `args`) and `entrypoint` (a command of the Runtime's image). */
export interface RunTaskOptions {
  script?: string;
  entrypoint?: string;
  args?: string[];
  env?: Record<string, EnvValue>;
  /** The Run's own spec.timeout: seconds or a duration such as "10m". */
  timeout?: number | string;
  name?: string;
  generateName?: string;
  labels?: Record<string, string>;
  maxAttempts?: number;
  namespace?: string;
  signal?: AbortSignal;
}

/** `client.tasks`: task Runs of the client's namespace. */
export class Tasks {
  constructor(private readonly transport: Transport, private readonly namespace: string) {}

  /** Creates a task Run and resolves with its handle; see {@link run}. */
  async start(runtime: string, opts: RunTaskOptions): Promise<Task> {
    if ((opts.script === undefined) === (opts.entrypoint === undefined)) {
      throw new TypeError('give exactly one of script and entrypoint');
    }
    const taskMode: Record<string, unknown> = {};
    if (opts.entrypoint !== undefined) taskMode.entrypoint = opts.entrypoint;
    if (opts.args?.length) taskMode.args = opts.args.map(String);
    const spec: Record<string, unknown> = { runtime, mode: { task: taskMode } };
    if (opts.script !== undefined) spec.source = { inline: opts.script };
    if (opts.env && Object.keys(opts.env).length) spec.env = envList(opts.env);
    if (opts.timeout !== undefined) spec.timeout = durationString(opts.timeout);
    if (opts.maxAttempts !== undefined) spec.retryPolicy = { maxAttempts: Math.trunc(opts.maxAttempts) };
    const metadata: Record<string, unknown> = { labels: { ...(opts.labels ?? {}) } };
    if (opts.name) metadata.name = opts.name;
    else metadata.generateName = opts.generateName ?? 'task-';
    const run = await this.transport.call<RunObject>('POST', runsPath(opts.namespace ?? this.namespace), {
      run: opts.name,
      obj: { apiVersion: API_VERSION, kind: 'Run', metadata, spec },
      signal: opts.signal,
    });
    return new Task(this.transport, run);
  }

  /** Creates a task Run and waits until it ends (by watch), resolving with
   * its result. `waitTimeoutMs` bounds only the wait. Use {@link start} for
   * the handle instead (to follow its log or cancel it). */
  async run(runtime: string, opts: RunTaskOptions & { waitTimeoutMs?: number }): Promise<TaskResult> {
    const task = await this.start(runtime, opts);
    return task.wait({ timeoutMs: opts.waitTimeoutMs, signal: opts.signal });
  }

  /** The task Run `name`. */
  async get(name: string, opts: { namespace?: string; signal?: AbortSignal } = {}): Promise<Task> {
    const run = await this.transport.call<RunObject>('GET', runsPath(opts.namespace ?? this.namespace, name), {
      run: name,
      signal: opts.signal,
    });
    return new Task(this.transport, run);
  }
}
