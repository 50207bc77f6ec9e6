/**
 * What every framework adapter shares: a function Run as a tool — its name,
 * description and input schema from the Run's spec, and one call that
 * invokes it once and says in text what happened, as `krt mcp` does.
 *
 * The text is what the model reads: the output as JSON; or, when the call
 * failed, whether the function ran and whether the same call may be made
 * again. A schema violation (kruntimes' 400, checked by the apiserver
 * before dispatch) lists each field to fix, so the model can call again;
 * it is a result, never an exception that would end the agent's loop.
 */
import { createHash } from 'node:crypto';

import type { Client } from '../client.js';
import {
  Aborted,
  Busy,
  Forbidden,
  FunctionError,
  InvalidInput,
  InvocationTimeout,
  KruntimesError,
  NotFound,
  OutcomeUnknown,
  Unavailable,
} from '../errors.js';
import type { Function, InvokeResult } from '../functions.js';

/** The label `krt mcp` lists tools by, and {@link listTools}' default. */
export const TOOL_LABEL = 'kruntimes.io/tool';

/** How a function Run becomes a tool. */
export interface ToolOptions {
  /** The tool's name; default the Run's, made fit for function calling
   * (letters, digits, _ and -, at most 64). */
  name?: string;
  /** Overrides the Run's spec.mode.function.description. */
  description?: string;
  /** Each call's ?timeout=; the server's 60 s when unset. */
  timeoutMs?: number;
}

/** A function Run as a framework-neutral tool. */
export interface KruntimesTool {
  name: string;
  description: string;
  /** The Run's schema.input (a JSON Schema object), {"type":"object"} when unset. */
  parameters: Record<string, unknown>;
  /** Invokes the Run once with `args` and resolves with the text for the
   * model. Only an abort (and a failure that is not kruntimes') throws. */
  call(args: unknown, signal?: AbortSignal): Promise<string>;
}

/** The Run's name as a function-calling tool name: [a-zA-Z0-9_-]{1,64}; a
 * longer name keeps 55 characters, "-" and 8 hex digits of its SHA-256. */
export function toolName(runName: string): string {
  const clean = runName.replace(/[^a-zA-Z0-9_-]/g, '_');
  if (clean.length <= 64) return clean;
  return `${clean.slice(0, 55)}-${createHash('sha256').update(runName).digest('hex').slice(0, 8)}`;
}

/** A function Run as a tool: the Run must have been read (get, list or
 * create), so that its description and schema are known. */
export function kruntimesTool(fn: Function, opts: ToolOptions = {}): KruntimesTool {
  const parameters = (fn.schema?.input as Record<string, unknown> | undefined) ?? { type: 'object' };
  return {
    name: opts.name ?? toolName(fn.name),
    description: opts.description ?? fn.description ?? `kruntimes function ${fn.namespace}/${fn.name}`,
    parameters,
    async call(args: unknown, signal?: AbortSignal): Promise<string> {
      try {
        const result = await fn.invoke(args ?? {}, { timeoutMs: opts.timeoutMs, signal });
        return outputText(result);
      } catch (e) {
        if (e instanceof Aborted || !(e instanceof KruntimesError)) throw e;
        return errorText(e);
      }
    },
  };
}

/** The function Runs of the client's namespace that are tools: labelled
 * `kruntimes.io/tool=true` (or matching `labels`), Ready and not being
 * deleted. The caller's RBAC still decides each call. */
export async function listTools(
  client: Client,
  opts: { labels?: Record<string, string> | string; signal?: AbortSignal } = {},
): Promise<Function[]> {
  const fns = await client.functions.list(opts.labels ?? { [TOOL_LABEL]: 'true' }, { signal: opts.signal });
  return fns.filter(
    (fn) =>
      fn.phase === 'Ready' &&
      !fn.run.metadata.deletionTimestamp &&
      (fn.run.status?.conditions ?? []).some((c: any) => c.type === 'Ready' && c.status === 'True'),
  );
}

/** The output as the model reads it: JSON. */
export function outputText(result: InvokeResult): string {
  return JSON.stringify(result.output ?? null);
}

/** What an error of an invocation means for the model, in the words of
 * `krt mcp`: did the function run, may the call be made again, and when. */
export function errorText(e: KruntimesError): string {
  const id = e.invocationId ?? '';
  if (e instanceof FunctionError) {
    return `the function ran and failed (invocation ${id}): ${e.type}: ${e.errorMessage}`;
  }
  if (e instanceof Busy || e instanceof Unavailable) {
    const why = e instanceof Busy ? 'busy: another invocation is in flight' : 'unavailable (not Ready, recovering or unreachable)';
    const after = e.retryAfter > 0 ? ` after ${e.retryAfter} s` : '';
    return `the function did not run: it is ${why}; the same call may be made again${after} (invocation ${id}): ${e.message}`;
  }
  if (e instanceof InvocationTimeout) {
    return `the outcome is unknown: the function timed out and was stopped at its deadline, and may have run in part or in full; it was not re-sent (invocation ${id}): ${e.message}`;
  }
  if (e instanceof OutcomeUnknown) {
    return `the outcome is unknown: the call was sent and no answer says what happened, so the function may have run; it was not re-sent (invocation ${id}): ${e.message}`;
  }
  if (e instanceof InvalidInput && e.causes.length) {
    const lines = e.causes.map((c) => {
      const field = c.field.replace(/^input/, '').replace(/^\./, '') || '(the arguments)';
      return `\n- ${field}: ${c.message}`;
    });
    return `the arguments do not match the tool's input schema, and the function did not run; fix these and call again:${lines.join('')}`;
  }
  if (e instanceof NotFound) {
    return `the function did not run: its Run is gone or was created again under the name (list the tools again): ${e.message}`;
  }
  if (e instanceof Forbidden) return `the function did not run: you may not invoke it: ${e.message}`;
  if (!e.notRun) return `the outcome is unknown: ${e.message} (invocation ${id})`;
  return `the call was refused, and the function did not run: ${e.message}`;
}
