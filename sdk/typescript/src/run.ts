/** What function and task handles share: the Run, its names, delete. */
import { NotFound } from './errors.js';
import { runsPath, type Transport } from './transport.js';

/** A Run as the API serves it (apiVersion kruntimes.io/v1alpha1). */
export type RunObject = {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace: string; uid: string; labels?: Record<string, string>; [k: string]: unknown };
  spec?: any;
  status?: any;
};

/** A handle on one Run. */
export class RunHandle {
  /** The Run as last read. */
  run: RunObject;

  constructor(protected readonly transport: Transport, run: RunObject) {
    this.run = run;
  }

  get name(): string {
    return this.run.metadata.name;
  }

  get namespace(): string {
    return this.run.metadata.namespace;
  }

  get uid(): string {
    return this.run.metadata.uid;
  }

  get phase(): string {
    return this.run.status?.phase ?? '';
  }

  /** Reads the Run again. */
  async refresh(opts: { signal?: AbortSignal } = {}): Promise<this> {
    this.run = await this.transport.call('GET', runsPath(this.namespace, this.name), { run: this.name, signal: opts.signal });
    return this;
  }

  /** Deletes the Run (a Run already gone is no error). */
  async delete(opts: { signal?: AbortSignal } = {}): Promise<void> {
    await deleteRun(this.transport, this.namespace, this.name, opts.signal);
  }
}

/** Deletes the Run `name`; a Run already gone is no error. */
export async function deleteRun(transport: Transport, namespace: string, name: string, signal?: AbortSignal): Promise<void> {
  try {
    await transport.call('DELETE', runsPath(namespace, name), { run: name, signal });
  } catch (e) {
    if (!(e instanceof NotFound)) throw e;
  }
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
