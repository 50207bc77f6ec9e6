// The framework adapters on a loopback server: built with the real
// packages, called through each framework's own tool execution by a
// scripted model. A schema violation (the server's 400) and a handler's
// failure come back to the model as tool results it can act on.
import assert from 'node:assert/strict';
import test from 'node:test';

import { aiTool, aiTools } from '../dist/adapters/ai.js';
import { KruntimesStructuredTool, langchainTool, langchainTools } from '../dist/adapters/langchain.js';
import { openaiAgentsTool, openaiAgentsTools } from '../dist/adapters/openai-agents.js';
import { toolName } from '../dist/index.js';
import { RUN_PATH, run, sendJSON, serve, status } from './loopback.mjs';
import { runAIAgent, runLangChainAgent, runOpenAIAgent } from './scripted.mjs';

const schema = {
  type: 'object',
  properties: { city: { type: 'string', minLength: 1 }, days: { type: 'integer', minimum: 1, maximum: 16 } },
  required: ['city'],
  additionalProperties: false,
};

const forecast = run('forecast', {
  metadata: { name: 'forecast', namespace: 'unit', uid: 'uid-forecast', labels: { 'kruntimes.io/tool': 'true' } },
  spec: { runtime: 'python', mode: { function: { handler: 'forecast.handle', description: 'Daily temperature forecast for a city.', schema: { input: schema } } } },
  status: { phase: 'Ready', conditions: [{ type: 'Ready', status: 'True' }] },
});

/** A server with the Run forecast whose invoke checks the schema as the
 * apiserver does (400 with causes) and fails on city "Atlantis". */
async function forecastServer(t) {
  return serve(t, (req, res, r) => {
    if (r.method === 'GET' && r.path === `${RUN_PATH}/forecast`) return sendJSON(res, 200, forecast);
    if (r.method === 'GET' && r.path === RUN_PATH) return sendJSON(res, 200, { metadata: { resourceVersion: '1' }, items: [forecast] });
    const id = r.headers['x-kruntime-invocation-id'];
    const input = JSON.parse(r.body);
    const causes = [];
    if (typeof input.city !== 'string') causes.push({ field: 'input.city', reason: 'FieldValueRequired', message: 'Required value' });
    for (const k of Object.keys(input)) if (!(k in schema.properties)) causes.push({ field: `input.${k}`, reason: 'FieldValueForbidden', message: 'Forbidden: is not a property the schema allows' });
    if (causes.length) return sendJSON(res, 400, status(400, 'BadRequest', 'the input does not match', { causes }), { 'X-Kruntime-Invocation-ID': id });
    if (input.city === 'Atlantis') return sendJSON(res, 200, { invocationId: id, error: { type: 'KeyError', message: "'Atlantis'" } });
    sendJSON(res, 200, { invocationId: id, output: { city: input.city, celsius: Array(input.days ?? 3).fill(12.5) } });
  });
}

const script = [
  { call: { name: 'forecast', args: { town: 'Oslo' } } },
  { call: { name: 'forecast', args: { city: 'Atlantis' } } },
  { call: { name: 'forecast', args: { city: 'Oslo', days: 2 } } },
  { text: 'Oslo: 12.5 °C' },
];

function assertSeen(seen) {
  assert.equal(seen.length, 3, JSON.stringify(seen));
  assert.equal(
    seen[0].text,
    "the arguments do not match the tool's input schema, and the function did not run; fix these and call again:\n- city: Required value\n- town: Forbidden: is not a property the schema allows",
  );
  assert.match(seen[1].text, /^the function ran and failed \(invocation [0-9a-f]{32}\): KeyError: 'Atlantis'$/);
  assert.deepEqual(JSON.parse(seen[2].text), { city: 'Oslo', celsius: [12.5, 12.5] });
}

test('OpenAI Agents SDK: a Run as tool(), run by the Runner', async (t) => {
  const srv = await forecastServer(t);
  const tool = openaiAgentsTool(await srv.client.functions.get('forecast'));
  assert.equal(tool.type, 'function');
  assert.equal(tool.name, 'forecast');
  assert.equal(tool.description, 'Daily temperature forecast for a city.');
  assert.deepEqual(tool.parameters, schema);
  assert.equal(tool.strict, false);
  const { output, seen } = await runOpenAIAgent([tool], script);
  assert.equal(output, 'Oslo: 12.5 °C');
  assertSeen(seen);
  assert.equal(srv.invokes().length, 3);
  assert.deepEqual((await openaiAgentsTools(srv.client)).map((x) => x.name), ['forecast']);
});

test('LangChain.js: a Run as a StructuredTool, bound and invoked with tool calls', async (t) => {
  const srv = await forecastServer(t);
  const tool = langchainTool(await srv.client.functions.get('forecast'));
  assert.ok(tool instanceof KruntimesStructuredTool);
  assert.equal(tool.name, 'forecast');
  assert.equal(tool.description, 'Daily temperature forecast for a city.');
  assert.deepEqual(tool.schema, schema);
  const { output, seen, boundTools } = await runLangChainAgent([tool], script);
  assert.equal(output, 'Oslo: 12.5 °C');
  assert.deepEqual(boundTools, [tool]);
  assertSeen(seen);
  // The invalid call reached kruntimes, which said what to fix.
  assert.equal(srv.invokes().length, 3);
  assert.deepEqual((await langchainTools(srv.client)).map((x) => x.name), ['forecast']);
});

test('Vercel AI SDK: a Run as tool(), executed by generateText', async (t) => {
  const srv = await forecastServer(t);
  const tools = { forecast: aiTool(await srv.client.functions.get('forecast')) };
  assert.equal(tools.forecast.description, 'Daily temperature forecast for a city.');
  const { output, seen, calls } = await runAIAgent(tools, script);
  assert.equal(output, 'Oslo: 12.5 °C');
  assertSeen(seen);
  // The model was offered the Run's schema.
  const offered = calls[0].tools.find((x) => x.name === 'forecast');
  assert.deepEqual(offered.inputSchema, schema);
  assert.equal(srv.invokes().length, 3);
  assert.deepEqual(Object.keys(await aiTools(srv.client)), ['forecast']);
});

test('tool names fit function calling', () => {
  assert.equal(toolName('my.tool'), 'my_tool');
  const long = toolName('a'.repeat(100));
  assert.equal(long.length, 64);
  assert.match(long, /^a{55}-[0-9a-f]{8}$/);
});
