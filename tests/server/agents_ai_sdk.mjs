// The Vercel AI SDK's OpenAI-compatible provider against `deltaserve serve`
// (started by tests/cli/test_agents.sh): generateText, streamText, and a tool
// call (toolChoice required, which the server's grammar forces even from the
// random test model), plain and streamed.
// Env: DS_URL (http://127.0.0.1:PORT), DS_KEY (its API key), DS_MODEL (served name).
// Prints "ok NAME" / "FAIL NAME: why" lines and "RESULT passed=N failed=M".
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, jsonSchema, streamText, tool } from 'ai';

const URL_ = process.env.DS_URL, KEY = process.env.DS_KEY, MODEL = process.env.DS_MODEL;
const provider = createOpenAICompatible({ name: 'deltaserve', baseURL: URL_ + '/v1', apiKey: KEY, includeUsage: true });
const model = provider(MODEL);
// thinking off, so that a short answer is text (the template's kwarg, passed through by the provider)
const providerOptions = { deltaserve: { chat_template_kwargs: { enable_thinking: false } } };
let passed = 0, failed = 0;

function check(cond, msg) { if (!cond) throw new Error(msg); }
async function t(name, fn) {
  try { await fn(); console.log(`ok ${name}`); passed++; }
  catch (e) { console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`); failed++; }
}
function usageOk(u, max) {
  check(u && u.inputTokens > 0, `usage.inputTokens ${u && u.inputTokens}`);
  check(u.outputTokens > 0 && u.outputTokens <= max, `usage.outputTokens ${u.outputTokens} (max ${max})`);
}

const weather = tool({
  description: 'The weather in a city',
  inputSchema: jsonSchema({
    type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false,
  }),
});

await t('generateText', async () => {
  const r = await generateText({ model, prompt: 'Say hi.', maxOutputTokens: 12, temperature: 0, maxRetries: 0, providerOptions });
  check(typeof r.text === 'string' && r.text.length > 0, `text ${JSON.stringify(r.text)}`);
  check(['stop', 'length'].includes(r.finishReason), `finishReason ${r.finishReason}`);
  usageOk(r.usage, 12);
});

await t('streamText', async () => {
  const r = streamText({ model, prompt: 'Say hi.', maxOutputTokens: 12, temperature: 0, maxRetries: 0, providerOptions });
  let deltas = 0, text = '', errors = [], finishes = 0;
  for await (const p of r.fullStream) {
    if (p.type === 'text-delta') { deltas++; text += p.text; }
    else if (p.type === 'error') errors.push(String(p.error));
    else if (p.type === 'finish') finishes++;
  }
  check(errors.length === 0, `error parts: ${errors.join('; ')}`);
  check(deltas >= 2 && text.length > 0, `${deltas} text deltas, text ${JSON.stringify(text)}`);
  check(finishes === 1, `${finishes} finish parts`);
  check(['stop', 'length'].includes(await r.finishReason), `finishReason ${await r.finishReason}`);
  usageOk(await r.usage, 12);
});

await t('generateText tool call (toolChoice required)', async () => {
  const r = await generateText({
    model, prompt: 'What is the weather in Paris?', tools: { get_weather: weather }, toolChoice: 'required',
    maxOutputTokens: 200, temperature: 0, maxRetries: 0, providerOptions,
  });
  check(r.finishReason === 'tool-calls', `finishReason ${r.finishReason}`);
  check(r.toolCalls.length >= 1, `${r.toolCalls.length} tool calls`);
  const c = r.toolCalls[0];
  check(c.toolName === 'get_weather' && typeof c.input.city === 'string' && !c.invalid,
    `call ${JSON.stringify(c)}`);
  usageOk(r.usage, 200);
});

await t('streamText tool call (toolChoice required)', async () => {
  const r = streamText({
    model, prompt: 'What is the weather in Paris?', tools: { get_weather: weather }, toolChoice: 'required',
    maxOutputTokens: 200, temperature: 0, maxRetries: 0, providerOptions,
  });
  const calls = [], errors = [];
  for await (const p of r.fullStream) {
    if (p.type === 'tool-call') calls.push(p);
    else if (p.type === 'error') errors.push(String(p.error));
  }
  check(errors.length === 0, `error parts: ${errors.join('; ')}`);
  check(calls.length >= 1 && calls[0].toolName === 'get_weather' && typeof calls[0].input.city === 'string',
    `tool calls ${JSON.stringify(calls)}`);
  check((await r.finishReason) === 'tool-calls', `finishReason ${await r.finishReason}`);
});

console.log(`RESULT passed=${passed} failed=${failed}`);
process.exit(failed ? 1 : 0);
