// A tool-using agent on kruntimes with the OpenAI Agents SDK: two tools are
// function Runs (each its own RBAC, audit trail and Pod slot) given to the
// agent by @kruntimes/sdk's adapter, and code runs in a sandbox.
//
// No model is reachable from where this is tested, so the default model is
// scripted: it plays the part of an LLM and decides from the tool results
// it is shown. With --model (e.g. gpt-5-mini) and OPENAI_API_KEY set, the
// same agent runs on OpenAI's model instead.
//
//   node agent.mjs --namespace agents --runtime python --sandbox-runtime sandbox
import { parseArgs } from 'node:util';

import { Agent, Usage, run, setTracingDisabled, tool } from '@openai/agents';
import { Client, TOOL_LABEL } from '@kruntimes/sdk';
import { openaiAgentsTool } from '@kruntimes/sdk/openai-agents';

const CALCULATOR = `import ast, operator

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv, ast.Pow: operator.pow, ast.USub: operator.neg}

def value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](value(node.left), value(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
        return OPS[type(node.op)](value(node.operand))
    raise ValueError("only numbers and + - * / ** are allowed")

def handle(event, context):
    return {"expression": event["expression"], "value": value(ast.parse(event["expression"], mode="eval").body)}
`;

const SEARCH = `CORPUS = {
    "kruntimes": "kruntimes runs trusted functions, CI steps and agent tools on warm Kubernetes Pods.",
    "warm pods": "A warm Pod has its interpreter loaded, so a function registers in milliseconds.",
    "invoke": "Every invocation is authorized by Kubernetes RBAC as create on runs/invoke.",
    "sandbox": "A sandbox keeps Python state between calls on a Pod of its own.",
}

def handle(event, context):
    words = set(event["query"].lower().split())
    hits = [{"title": t, "text": x} for t, x in CORPUS.items() if words & set((t + " " + x).lower().split())]
    return {"query": event["query"], "hits": hits}
`;

// The function Runs: the description and schema.input are what the model
// is shown; kruntimes checks the input against the schema before dispatch.
const FUNCTIONS = {
  calculator: {
    source: CALCULATOR,
    description: 'Evaluates an arithmetic expression of numbers and + - * / **.',
    schema: { type: 'object', properties: { expression: { type: 'string', minLength: 1 } }, required: ['expression'], additionalProperties: false },
  },
  search: {
    source: SEARCH,
    description: 'Searches a small corpus about kruntimes.',
    schema: { type: 'object', properties: { query: { type: 'string', minLength: 1 } }, required: ['query'], additionalProperties: false },
  },
};

/** The sandbox's operations as tools of their own. */
function sandboxTools(sandbox) {
  return [
    tool({
      name: 'run_code',
      description: "Runs Python in a stateful sandbox; returns stdout and the last expression's value.",
      parameters: { type: 'object', properties: { code: { type: 'string' } }, required: ['code'], additionalProperties: true },
      strict: false,
      execute: async ({ code }, _ctx, details) => {
        const e = await sandbox.runCode(code, { signal: details?.signal });
        return JSON.stringify(e.error ? { error: `${e.error.name}: ${e.error.value}` } : { stdout: e.stdout, result: e.result });
      },
    }),
    tool({
      name: 'read_file',
      description: "Reads a file of the sandbox's workspace.",
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'], additionalProperties: true },
      strict: false,
      execute: async ({ path }, _ctx, details) => (await sandbox.files.read(path, { signal: details?.signal })).toString('utf8'),
    }),
  ];
}

/** Plays the model: searches, computes with the calculator (first with a
 * wrong argument, which kruntimes refuses and explains), hands the result to
 * code in the sandbox, reads the file the code wrote, answers. */
export function scriptedModel() {
  const results = [];
  const steps = [
    () => ({ name: 'search', args: { query: 'invoke rbac' } }),
    () => ({ name: 'calculator', args: { formula: '6 * 7' } }),
    () => ({ name: 'calculator', args: { expression: '6 * 7' } }),
    () => {
      const hits = JSON.parse(results[0]).hits.length;
      const value = JSON.parse(results[2]).value;
      const code = `hits = ${hits}\nanswer = ${value}\nwith open('report.txt', 'w') as f:\n    f.write(f'{hits} hit(s); 6 * 7 = {answer}\\n')\nanswer * 2`;
      return { name: 'run_code', args: { code } };
    },
    () => ({ name: 'read_file', args: { path: 'report.txt' } }),
  ];
  return {
    async getResponse(request) {
      results.length = 0;
      for (const item of request.input) if (item.type === 'function_call_result') results.push(item.output?.text ?? String(item.output));
      const step = steps[results.length];
      if (step) {
        const { name, args } = step();
        return { usage: new Usage(), output: [{ type: 'function_call', callId: `call-${results.length}`, name, arguments: JSON.stringify(args), status: 'completed' }] };
      }
      const text = `${results[4].trim()} (doubled in the sandbox: ${JSON.parse(results[3]).result})`;
      return { usage: new Usage(), output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] }] };
    },
    // eslint-disable-next-line require-yield
    async *getStreamedResponse() {
      throw new Error('the scripted model does not stream');
    },
  };
}

/** The transcript of a run: each tool call, what it returned, the answer. */
export function render(question, result) {
  const lines = [`user: ${question}`];
  for (const item of result.newItems) {
    if (item.type === 'tool_call_item') lines.push(`agent -> ${item.rawItem.name}(${item.rawItem.arguments})`);
    if (item.type === 'tool_call_output_item') lines.push(`  <- ${typeof item.output === 'string' ? item.output : JSON.stringify(item.output)}`);
  }
  lines.push(`agent: ${result.finalOutput}`);
  return lines.join('\n');
}

/** Creates the tools and the sandbox, runs the agent, deletes all of it;
 * resolves with the run's result and its transcript. */
export async function main(argv = process.argv.slice(2)) {
  const { values } = parseArgs({
    args: argv,
    options: {
      kubeconfig: { type: 'string' },
      context: { type: 'string' },
      namespace: { type: 'string' },
      runtime: { type: 'string', default: 'python' },
      'sandbox-runtime': { type: 'string', default: 'sandbox' },
      model: { type: 'string' },
    },
  });
  const question = 'How are invocations authorized, and what is 6 * 7?';
  const client = new Client({ kubeconfig: values.kubeconfig, context: values.context, namespace: values.namespace });
  const functions = [];
  let sandbox;
  try {
    for (const [name, spec] of Object.entries(FUNCTIONS)) {
      functions.push(
        await client.functions.create({
          generateName: `tool-${name}-`,
          runtime: values.runtime,
          source: spec.source,
          handler: 'main.handle',
          description: spec.description,
          schema: { input: spec.schema },
          labels: { [TOOL_LABEL]: 'true' },
          idleTimeoutSeconds: 600,
        }),
      );
    }
    await Promise.all(functions.map((fn) => fn.waitReady({ timeoutMs: 120_000 })));
    sandbox = await client.sandbox(values['sandbox-runtime'], { idleTimeoutSeconds: 600 });
    const tools = [
      ...functions.map((fn, i) => openaiAgentsTool(fn, { name: Object.keys(FUNCTIONS)[i] })),
      ...sandboxTools(sandbox),
    ];
    if (!values.model) setTracingDisabled(true);
    const agent = new Agent({
      name: 'kruntimes demo',
      instructions: 'Answer with the tools: search the corpus, compute with the calculator, and use the sandbox for code.',
      model: values.model ?? scriptedModel(),
      tools,
    });
    const result = await run(agent, question, { maxTurns: 10 });
    const transcript = render(question, result);
    console.log(transcript);
    return { result, transcript };
  } finally {
    await sandbox?.close();
    await Promise.all(functions.map((fn) => fn.delete()));
    client.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => {
    console.error(`${e}`);
    process.exitCode = 1;
  });
}
