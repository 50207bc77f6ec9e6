/**
 * Errors of the kruntimes SDK.
 *
 * Every error says whether the handler may have run: `notRun` is true only
 * when kruntimes guarantees it did not (the request was refused before the
 * handler started, or never left this process). Only {@link Busy} and
 * {@link Unavailable} are worth sending again unchanged, and only they are
 * re-sent by an opt-in {@link Retry} (plus {@link OutcomeUnknown} with
 * `unknown: true`, answered from the owner's record by invocation ID).
 */

/** A Kubernetes metav1.Status, as decoded from an error answer. */
export interface Status {
  kind?: string;
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  details?: {
    name?: string;
    kind?: string;
    retryAfterSeconds?: number;
    causes?: { field?: string; reason?: string; message?: string }[];
  };
}

/** One field error of a 422 Invalid or a schema 400 InvalidInput answer. */
export interface Cause {
  field: string;
  reason: string;
  message: string;
}

export interface ErrorFields {
  code?: number;
  reason?: string;
  run?: string;
  invocationId?: string;
  status?: Status;
  cause?: unknown;
}

/**
 * The base of every error the SDK throws. `code` is the HTTP status (0 when
 * there was no answer), `reason` the Status reason, `run` the Run's name and
 * `invocationId` the invocation's ID when the error is an invocation's.
 */
export class KruntimesError extends Error {
  override name = 'KruntimesError';
  /** True when kruntimes guarantees that the handler did not run. */
  notRun = true;
  /** True when the answer repeats the recorded outcome of an earlier
   * attempt with the same invocation ID (X-Kruntime-Deduplicated). */
  replayed = false;
  readonly code: number;
  readonly reason: string;
  readonly run?: string;
  invocationId?: string;
  readonly status: Status;

  constructor(message: string, fields: ErrorFields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.code = fields.code ?? 0;
    this.reason = fields.reason ?? '';
    this.run = fields.run;
    this.invocationId = fields.invocationId;
    this.status = fields.status ?? {};
  }

  override toString(): string {
    const parts: string[] = [];
    if (this.run) parts.push(`run=${this.run}`);
    if (this.invocationId) parts.push(`invocation=${this.invocationId}`);
    if (this.code) parts.push(`code=${this.code}`);
    return `${this.name}: ${this.message}${parts.length ? ` (${parts.join(', ')})` : ''}`;
  }
}

/** The handler ran and failed: a 200 carrying `error`. `type` is e.g. the
 * exception class, `NonZeroExit` or `WorkerExited`; `result` the whole
 * InvokeResult (with `logs`). */
export class FunctionError extends KruntimesError {
  override name = 'FunctionError';
  override notRun = false;
  readonly type: string;
  readonly errorMessage: string;
  readonly result?: import('./functions.js').InvokeResult;

  constructor(type: string, errorMessage: string, result: import('./functions.js').InvokeResult | undefined, fields: ErrorFields = {}) {
    super(`${type}: ${errorMessage}`, fields);
    this.type = type;
    this.errorMessage = errorMessage;
    this.result = result;
  }

  get logs(): import('./functions.js').Logs | undefined {
    return this.result?.logs;
  }
}

/** 429: another invocation is in flight (one at a time, no queue). It did not
 * run; send it again after `retryAfter` seconds. */
export class Busy extends KruntimesError {
  override name = 'Busy';
  constructor(message: string, readonly retryAfter: number, fields: ErrorFields = {}) {
    super(message, fields);
  }
}

/** kruntimes' own 503 with retryAfterSeconds: not Ready, registering,
 * recovering, or refused before the handler started. It did not run; send it
 * again after `retryAfter` seconds. */
export class Unavailable extends KruntimesError {
  override name = 'Unavailable';
  constructor(message: string, readonly retryAfter: number, fields: ErrorFields = {}) {
    super(message, fields);
  }
}

/** 504: stopped at its deadline. The handler ran, maybe partly. */
export class InvocationTimeout extends KruntimesError {
  override name = 'InvocationTimeout';
  override notRun = false;
}

/** The request was sent and no answer says what happened: a 502, any other
 * 5xx (kube-apiserver's plain-text 503 included), a broken connection or a
 * read timeout. The handler may have run. */
export class OutcomeUnknown extends KruntimesError {
  override name = 'OutcomeUnknown';
  override notRun = false;
}

/** 404: no such Run, or not the UID of the handle. */
export class NotFound extends KruntimesError {
  override name = 'NotFound';
}

/** 403 (or 401): e.g. no `create runs/invoke`. */
export class Forbidden extends KruntimesError {
  override name = 'Forbidden';
}

/** 422: the object or request is invalid; `causes` name each field. */
export class Invalid extends KruntimesError {
  override name = 'Invalid';
  constructor(message: string, readonly causes: Cause[] = [], fields: ErrorFields = {}) {
    super(message, fields);
  }
}

/** 400 from an invocation: the input does not match the function's
 * `schema.input` (then `causes` lists each violation, `field` being the
 * path below `input`) or the request was malformed. The handler did not
 * run; the same input always fails the same way. */
export class InvalidInput extends KruntimesError {
  override name = 'InvalidInput';
  constructor(message: string, readonly causes: Cause[] = [], fields: ErrorFields = {}) {
    super(message, fields);
  }
}

/** The JSON input is over 1 MiB: thrown before sending (or a 413). */
export class PayloadTooLarge extends KruntimesError {
  override name = 'PayloadTooLarge';
}

/** 409: the Run ended or is being deleted; a name taken. */
export class Conflict extends KruntimesError {
  override name = 'Conflict';
}

/** The cause type of the 409 that answers a repeat of an invocation ID whose
 * recorded outcome was evicted. */
export const CAUSE_OUTCOME_EVICTED = 'InvocationOutcomeEvicted';

/** 409 InvocationOutcomeEvicted: a repeat of an invocation ID whose recorded
 * outcome runtimed evicted before its window ended. The first attempt ran,
 * or may have; this repeat did not run, and every repeat of the ID is
 * refused the same way: send a new invocation ID to run it again. */
export class OutcomeEvicted extends Conflict {
  override name = 'OutcomeEvicted';
  constructor(message: string, fields: ErrorFields = {}) {
    super(message, fields);
    this.notRun = false;
  }
}

/** No connection could be made: nothing was sent. */
export class ConnectFailed extends KruntimesError {
  override name = 'ConnectFailed';
}

/** The caller's AbortSignal fired. `notRun` is true when it fired before the
 * request was sent; after that, an invocation's outcome is unknown (an abort
 * never recalls a request already sent). */
export class Aborted extends KruntimesError {
  override name = 'AbortError';
}

/** A Run waited on ended (Failed, Timeout, Cancelled) instead of becoming
 * Ready; `phase` is its phase and the message the Run's. */
export class RunEnded extends KruntimesError {
  override name = 'RunEnded';
  constructor(message: string, readonly phase: string, fields: ErrorFields = {}) {
    super(message, fields);
  }
}

/** A wait did not see what it waited for within its timeout. */
export class WaitTimeout extends KruntimesError {
  override name = 'WaitTimeout';
}

function retryAfterOf(header: string | undefined, status: Status): number {
  let seconds = status.details?.retryAfterSeconds;
  if (!seconds) {
    const parsed = Number.parseInt(header ?? '', 10);
    seconds = Number.isNaN(parsed) ? 1 : parsed;
  }
  return Math.max(seconds, 0);
}

function causesOf(status: Status): Cause[] {
  return (status.details?.causes ?? []).map((c) => ({ field: c.field ?? '', reason: c.reason ?? '', message: c.message ?? '' }));
}

/**
 * Maps an HTTP error answer to its error. `status` is the decoded
 * metav1.Status, or undefined when the body was none (a proxy's plain text).
 */
export function errorFor(
  code: number,
  retryAfterHeader: string | undefined,
  status: Status | undefined,
  opts: { run?: string; invocationId?: string; invoke?: boolean } = {},
): KruntimesError {
  const st = status ?? {};
  const message = st.message || `HTTP ${code}`;
  const fields: ErrorFields = { code, reason: st.reason ?? '', run: opts.run, invocationId: opts.invocationId, status: st };
  if (code === 429) return new Busy(message, retryAfterOf(retryAfterHeader, st), fields);
  if (code === 503 && status !== undefined && st.details?.retryAfterSeconds) {
    return new Unavailable(message, retryAfterOf(retryAfterHeader, st), fields);
  }
  if (code === 504) {
    if (opts.invoke) return new InvocationTimeout(message, fields);
    const err = new KruntimesError(message, fields);
    err.notRun = false;
    return err;
  }
  if (code >= 500 && code !== 501) {
    if (opts.invoke) return new OutcomeUnknown(message, fields);
    const err = new KruntimesError(message, fields);
    err.notRun = false;
    return err;
  }
  if (code === 404) return new NotFound(message, fields);
  if (code === 403 || code === 401) return new Forbidden(message, fields);
  if (code === 422) return new Invalid(message, causesOf(st), fields);
  if (code === 400 && opts.invoke) return new InvalidInput(message, causesOf(st), fields);
  if (code === 413) return new PayloadTooLarge(message, fields);
  if (code === 409) {
    if (st.details?.causes?.some((c) => c.reason === CAUSE_OUTCOME_EVICTED)) return new OutcomeEvicted(message, fields);
    return new Conflict(message, fields);
  }
  return new KruntimesError(message, fields);
}
