// The framework adapters against the cluster: a function Run with a
// description and schema.input as a tool of each framework, called through
// the framework's own tool execution by a scripted model; RBAC decides each
// call.
import assert from 'node:assert/strict';
import test from 'node:test';

import { aiTools } from '../../dist/adapters/ai.js';
import { langchainTools } from '../../dist/adapters/langchain.js';
import { openaiAgentsTool, openaiAgentsTools } from '../../dist/adapters/openai-agents.js';
import * as sdk from '../../dist/index.js';
import { runAIAgent, runLangChainAgent, runOpenAIAgent } from '../scripted.mjs';
import { cluster } from './cluster.mjs';

const FORECAST = `calls = 0

def handle(event, context):
    global calls
    calls += 1
    if event["city"] == "Atlantis":
        raise KeyError(event["city"])
    return {"city": event["city"], "celsius": [12.5] * event.get("days", 3), "calls": calls}
`;

const schema = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, description: 'The city.' },
    days: { type: 'integer', minimum: 1, maximum: 16 },
  },
  required: ['city'],
  additionalProperties: false,
};

const script = [
  { call: { name: 'forecast', args: { town: 'Oslo' } } },
  { call: { name: 'forecast', args: { city: 'Atlantis' } } },
  { call: { name: 'forecast', args: { city: 'Oslo', days: 2 } } },
  { text: 'Oslo: 12.5 °C' },
];

test('a Run as a tool of the OpenAI Agents SDK, LangChain.js and the AI SDK', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const fn = await c.client.functions.create({
    name: 'forecast',
    runtime: c.python,
    source: FORECAST,
    path: 'forecast.py',
    handler: 'forecast.handle',
    description: 'Daily temperature forecast for a city, in degrees Celsius.',
    schema: { input: schema },
    labels: { [sdk.TOOL_LABEL]: 'true' },
  });
  t.after(() => fn.delete());
  await fn.waitReady({ timeoutMs: 90_000 });

  const runs = [
    ['OpenAI Agents SDK', async () => runOpenAIAgent(await openaiAgentsTools(c.client), script)],
    ['LangChain.js', async () => runLangChainAgent(await langchainTools(c.client), script)],
    ['AI SDK', async () => runAIAgent(await aiTools(c.client), script)],
  ];
  let calls = 0;
  for (const [framework, runAgent] of runs) {
    const { output, seen } = await runAgent();
    assert.equal(output, 'Oslo: 12.5 °C', framework);
    assert.equal(seen.length, 3, `${framework}: ${JSON.stringify(seen)}`);
    // The violations in any order: kube-openapi lists them as it finds them.
    const [head, ...violations] = seen[0].text.split('\n');
    assert.equal(head, "the arguments do not match the tool's input schema, and the function did not run; fix these and call again:", framework);
    assert.deepEqual(violations.sort(), ['- city: Required value', '- town: Forbidden: is not a property the schema allows'], framework);
    assert.match(seen[1].text, /^the function ran and failed \(invocation [0-9a-f]{32}\): KeyError: 'Atlantis'$/, framework);
    calls += 2; // Atlantis and Oslo ran; the invalid call did not
    assert.deepEqual(JSON.parse(seen[2].text), { city: 'Oslo', celsius: [12.5, 12.5], calls }, framework);
  }

  // RBAC decides each call: a reader's tool says it may not invoke.
  const reader = new sdk.Client({ kubeconfig: c.reader });
  t.after(() => reader.close());
  const readerTool = openaiAgentsTool(await reader.functions.get('forecast'));
  const { seen } = await runOpenAIAgent([readerTool], [{ call: { name: 'forecast', args: { city: 'Oslo' } } }, { text: 'sorry' }]);
  assert.match(seen[0].text, /^the function did not run: you may not invoke it: /);
});
