/**
 * kruntimes functions as Vercel AI SDK tools (`ai`):
 *
 *     const tools = await aiTools(client);   // { name: tool, … }
 *     await generateText({ model, tools, prompt, stopWhen: stepCountIs(5) });
 *
 * Each is a `tool()` whose inputSchema is the Run's schema.input as
 * `jsonSchema()` without a client-side validator: kruntimes checks it
 * before dispatch, and a violation is the tool's output for the model.
 */
import { jsonSchema, tool, type Tool } from 'ai';

import type { Client } from '../client.js';
import type { Function } from '../functions.js';
import { kruntimesTool, listTools, type ToolOptions } from './tool.js';

/** The function Run `fn` as an AI SDK tool (its name is the key you give
 * it in `tools`; {@link aiTools} uses the Run's). */
export function aiTool(fn: Function, opts: ToolOptions = {}): Tool<unknown, string> {
  const t = kruntimesTool(fn, opts);
  return tool<unknown, string>({
    description: t.description,
    inputSchema: jsonSchema<unknown>(t.parameters as any),
    execute: (input: unknown, options: { abortSignal?: AbortSignal }) => t.call(input, options.abortSignal),
  });
}

/** Every tool of the client's namespace (see listTools), keyed by tool name. */
export async function aiTools(
  client: Client,
  opts: ToolOptions & { labels?: Record<string, string> | string; signal?: AbortSignal } = {},
): Promise<Record<string, Tool<unknown, string>>> {
  const tools: Record<string, Tool<unknown, string>> = {};
  for (const fn of await listTools(client, opts)) {
    const t = kruntimesTool(fn);
    tools[t.name] = aiTool(fn, { timeoutMs: opts.timeoutMs });
  }
  return tools;
}
