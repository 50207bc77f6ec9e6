// Scripted models for each framework: no network model. A script is a list
// of turns, each { call: { name, args } } (a tool call) or { text }. Each
// model records the tool results it was shown, so a test asserts what the
// model read; each agent runs through its framework's own tool execution.
import { Agent, Usage, run, setTracingDisabled } from '@openai/agents';
import { BaseChatModel } from '@langchain/core/language_models/chat_models';
import { AIMessage, HumanMessage } from '@langchain/core/messages';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';

setTracingDisabled(true);

/** Runs an OpenAI Agents SDK Agent with `tools` on a scripted model;
 * resolves with the final output and the tool results the model saw. */
export async function runOpenAIAgent(tools, script, prompt = 'go') {
  const seen = [];
  let turn = 0;
  const model = {
    async getResponse(request) {
      for (const item of request.input) {
        if (item.type === 'function_call_result' && !seen.some((s) => s.callId === item.callId)) {
          seen.push({ callId: item.callId, name: item.name, text: item.output?.text ?? String(item.output) });
        }
      }
      const step = script[turn++];
      const output = step.call
        ? [{ type: 'function_call', callId: `call-${turn}`, name: step.call.name, arguments: JSON.stringify(step.call.args), status: 'completed' }]
        : [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: step.text }] }];
      return { usage: new Usage(), output };
    },
    // eslint-disable-next-line require-yield
    async *getStreamedResponse() {
      throw new Error('the scripted model does not stream');
    },
  };
  const agent = new Agent({ name: 'scripted', instructions: 'use the tools', model, tools });
  const result = await run(agent, prompt);
  return { output: result.finalOutput, seen };
}

/** A LangChain chat model that answers from a script. */
class ScriptedChatModel extends BaseChatModel {
  constructor(script) {
    super({});
    this.script = script;
    this.turn = 0;
  }
  _llmType() {
    return 'scripted';
  }
  bindTools(tools) {
    this.boundTools = tools;
    return this;
  }
  async _generate() {
    const step = this.script[this.turn++];
    const message = step.call
      ? new AIMessage({ content: '', tool_calls: [{ id: `call-${this.turn}`, name: step.call.name, args: step.call.args, type: 'tool_call' }] })
      : new AIMessage(step.text);
    return { generations: [{ text: step.text ?? '', message }] };
  }
}

/** The tool-calling loop of a LangChain agent: the model bound to `tools`,
 * each tool call executed by tool.invoke(toolCall) (as LangGraph's ToolNode
 * does) and its ToolMessage given back to the model. */
export async function runLangChainAgent(tools, script, prompt = 'go') {
  const model = new ScriptedChatModel(script).bindTools(tools);
  const messages = [new HumanMessage(prompt)];
  const seen = [];
  for (;;) {
    const ai = await model.invoke(messages);
    messages.push(ai);
    if (!ai.tool_calls?.length) return { output: ai.content, seen, boundTools: model.boundTools };
    for (const call of ai.tool_calls) {
      const tool = tools.find((t) => t.name === call.name);
      const message = await tool.invoke(call);
      seen.push({ callId: call.id, name: call.name, text: message.content });
      messages.push(message);
    }
  }
}

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** generateText of the AI SDK with `tools` (a name → tool map) on a
 * scripted MockLanguageModelV3. */
export async function runAIAgent(tools, script, prompt = 'go') {
  let turn = 0;
  const model = new MockLanguageModelV3({
    doGenerate: async () => {
      const step = script[turn++];
      if (step.call) {
        return {
          content: [{ type: 'tool-call', toolCallId: `call-${turn}`, toolName: step.call.name, input: JSON.stringify(step.call.args) }],
          finishReason: { unified: 'tool-calls', raw: undefined },
          usage,
          warnings: [],
        };
      }
      return { content: [{ type: 'text', text: step.text }], finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] };
    },
  });
  const result = await generateText({ model, tools, prompt, stopWhen: stepCountIs(script.length + 1) });
  const seen = [];
  for (const step of result.steps) {
    for (const r of step.toolResults) seen.push({ callId: r.toolCallId, name: r.toolName, text: r.output });
    for (const part of step.content) {
      if (part.type === 'tool-error') seen.push({ callId: part.toolCallId, name: part.toolName, error: part.error });
    }
  }
  return { output: result.text, seen, calls: model.doGenerateCalls };
}
