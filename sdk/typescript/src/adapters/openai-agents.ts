/**
 * kruntimes functions as OpenAI Agents SDK tools (`@openai/agents`):
 *
 *     const agent = new Agent({ name: 'ops', tools: await openaiAgentsTools(client) });
 *
 * Each tool is a `tool()` with the Run's description and schema.input as
 * its JSON-Schema parameters (strict: false: kruntimes checks them, before
 * dispatch, and a violation is the tool's output for the model to fix).
 */
import { tool, type FunctionTool } from '@openai/agents';

import type { Client } from '../client.js';
import type { Function } from '../functions.js';
import { kruntimesTool, listTools, type ToolOptions } from './tool.js';

/** The function Run `fn` as an OpenAI Agents SDK function tool. */
export function openaiAgentsTool(fn: Function, opts: ToolOptions = {}): FunctionTool<unknown, any, string> {
  const t = kruntimesTool(fn, opts);
  return tool({
    name: t.name,
    description: t.description,
    parameters: t.parameters as any,
    strict: false,
    execute: (input: unknown, _context?: unknown, details?: { signal?: AbortSignal }) => t.call(input, details?.signal),
  }) as FunctionTool<unknown, any, string>;
}

/** Every tool of the client's namespace (see listTools) as OpenAI Agents
 * SDK function tools. */
export async function openaiAgentsTools(
  client: Client,
  opts: ToolOptions & { labels?: Record<string, string> | string; signal?: AbortSignal } = {},
): Promise<FunctionTool<unknown, any, string>[]> {
  return (await listTools(client, opts)).map((fn) => openaiAgentsTool(fn, { timeoutMs: opts.timeoutMs }));
}
