/**
 * kruntimes functions as LangChain.js tools (`@langchain/core`):
 *
 *     const tools = await langchainTools(client);
 *     const model = chatModel.bindTools(tools);
 *
 * Each is a StructuredTool whose schema is the Run's schema.input. LangChain
 * checks a JSON Schema itself and throws ToolInputParsingException on a
 * mismatch; this tool instead sends the arguments to kruntimes, whose
 * apiserver is the judge of its schema: its 400 (nothing ran) lists each
 * violation, and that list is the tool's result for the model to fix.
 */
import { ToolMessage } from '@langchain/core/messages';
import { StructuredTool, ToolInputParsingException } from '@langchain/core/tools';

import type { Client } from '../client.js';
import type { Function } from '../functions.js';
import { kruntimesTool, listTools, type KruntimesTool, type ToolOptions } from './tool.js';

type ToolCallLike = { type?: string; id?: string; name?: string; args: unknown };

function isToolCall(arg: unknown): arg is ToolCallLike {
  return typeof arg === 'object' && arg !== null && (arg as ToolCallLike).type === 'tool_call' && 'args' in arg;
}

/** A kruntimes function Run as a LangChain StructuredTool. */
export class KruntimesStructuredTool extends StructuredTool {
  name: string;
  description: string;
  schema: any;
  private readonly target: KruntimesTool;

  constructor(fn: Function, opts: ToolOptions = {}) {
    super();
    this.target = kruntimesTool(fn, opts);
    this.name = this.target.name;
    this.description = this.target.description;
    this.schema = this.target.parameters;
  }

  protected async _call(arg: unknown, _runManager?: unknown, config?: { signal?: AbortSignal }): Promise<string> {
    return this.target.call(arg, config?.signal);
  }

  override async call(arg: any, configArg?: any, tags?: string[]): Promise<any> {
    try {
      return await super.call(arg, configArg, tags);
    } catch (e) {
      if (!(e instanceof ToolInputParsingException)) throw e;
      // kruntimes validates the same schema before dispatch and says what
      // to fix; its answer is the result.
      const args = isToolCall(arg) ? arg.args : arg;
      const content = await this.target.call(args, configArg?.signal);
      const id = isToolCall(arg) ? arg.id : configArg?.toolCall?.id;
      return id ? new ToolMessage({ content, tool_call_id: id, name: this.name }) : content;
    }
  }
}

/** The function Run `fn` as a LangChain StructuredTool. */
export function langchainTool(fn: Function, opts: ToolOptions = {}): KruntimesStructuredTool {
  return new KruntimesStructuredTool(fn, opts);
}

/** Every tool of the client's namespace (see listTools) as LangChain tools. */
export async function langchainTools(
  client: Client,
  opts: ToolOptions & { labels?: Record<string, string> | string; signal?: AbortSignal } = {},
): Promise<KruntimesStructuredTool[]> {
  return (await listTools(client, opts)).map((fn) => langchainTool(fn, { timeoutMs: opts.timeoutMs }));
}
