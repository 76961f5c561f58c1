// Anthropic's Messages API end to end (issue 16), started by tests/cli/test_messages.sh against the
// random-weight tiny model with the official @anthropic-ai/sdk client and raw HTTP. The model's text
// is gibberish: the checks are about structure and protocol. Tool calls come only from the grammar
// (tool_choice any / tool). Every event stream is checked against Anthropic's event order.
// Env: DS_URL, DS_KEY, DS_MODEL, DS_MODE (main | fault: every request fails after 3 tokens).
// Prints "ok NAME" / "FAIL NAME: why" lines and "RESULT passed=N failed=M".
import Anthropic from '@anthropic-ai/sdk';
import { readFileSync } from 'node:fs';

const URL_ = process.env.DS_URL, KEY = process.env.DS_KEY, MODEL = process.env.DS_MODEL, MODE = process.env.DS_MODE || 'main';
const client = new Anthropic({ baseURL: URL_, apiKey: KEY, maxRetries: 0, timeout: 120000 });
let passed = 0, failed = 0;

function check(cond, msg) { if (!cond) throw new Error(msg); }
async function t(name, fn) {
  try { await fn(); console.log(`ok ${name}`); passed++; }
  catch (e) { console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`); failed++; }
}

const user = (text) => [{ role: 'user', content: text }];
// thinking off unless a test says: the template's default opens a reasoning part the random model never closes
// greedy: whether the random test model ends early (before max_tokens, or before a fault at token 3) is the same every run
const base = (extra = {}) => ({ model: MODEL, max_tokens: 6, messages: user('hello'), thinking: { type: 'disabled' }, temperature: 0, ...extra });
// small values (an enum, one digit): a forced call of the random model ends within max_tokens
const tools = [
  { name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string', enum: ['Oslo', 'Rome'] } }, required: ['city'] } },
  { name: 'add', description: 'Adds', input_schema: { $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object',
    properties: { a: { type: 'integer', minimum: 0, maximum: 9 }, b: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['a', 'b'], additionalProperties: false } },
  { name: 'get_time', description: 'The time', input_schema: { type: 'object' } },
];

async function raw(method, path, body, headers = {}) {
  const r = await fetch(URL_ + path, { method, headers: { 'content-type': 'application/json', 'x-api-key': KEY,
    'anthropic-version': '2023-06-01', ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

// "event: NAME\ndata: JSON" records
function parseSSE(text) {
  const out = [];
  for (const rec of text.split('\n\n')) {
    if (!rec.trim()) continue;
    let event = null, data = null;
    for (const line of rec.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data = JSON.parse(line.slice(6));
    }
    out.push({ event, data });
  }
  return out;
}

// Anthropic's order: message_start, then blocks (start, deltas of its kind, stop; indices 0, 1, ...;
// a thinking block gets its signature_delta before it stops), message_delta, message_stop; ping
// anywhere after message_start; an error event ends the stream. Returns the final message built
// from the events. events: the data objects (their type is the event's name).
const DELTA_OF = { text: ['text_delta'], thinking: ['thinking_delta', 'signature_delta'], tool_use: ['input_json_delta'] };
function checkEvents(events, { allowError = false } = {}) {
  check(events.length >= 2 && events[0].type === 'message_start', `starts with message_start: ${JSON.stringify(events[0])}`);
  const msg = { ...events[0].message, content: [] };
  check(msg.type === 'message' && msg.role === 'assistant' && /^msg_/.test(msg.id) && msg.stop_reason === null &&
        Array.isArray(events[0].message.content) && events[0].message.content.length === 0, JSON.stringify(events[0]));
  let open = null, signed = false, sawDelta = false, ended = false, errored = false;
  for (let i = 1; i < events.length; i++) {
    const e = events[i];
    check(!ended, `event after message_stop: ${e.type}`);
    check(!errored, `event after error: ${e.type}`);
    switch (e.type) {
      case 'ping': break;
      case 'content_block_start':
        check(open === null && !sawDelta, `block start while block ${open} is open or after message_delta`);
        check(e.index === msg.content.length, `index ${e.index}, want ${msg.content.length}`);
        check(DELTA_OF[e.content_block.type], `block type ${e.content_block.type}`);
        msg.content.push(structuredClone(e.content_block));
        if (e.content_block.type === 'tool_use') { check(/^toolu_/.test(e.content_block.id), e.content_block.id); msg.content.at(-1).json = ''; }
        open = e.index; signed = false;
        break;
      case 'content_block_delta': {
        check(open === e.index, `delta for ${e.index} while ${open} is open`);
        const b = msg.content[e.index];
        check(DELTA_OF[b.type].includes(e.delta.type), `${e.delta.type} in a ${b.type} block`);
        check(!signed, 'delta after signature_delta');
        if (e.delta.type === 'text_delta') b.text += e.delta.text;
        else if (e.delta.type === 'thinking_delta') b.thinking += e.delta.thinking;
        else if (e.delta.type === 'signature_delta') { signed = true; b.signature = e.delta.signature; }
        else b.json += e.delta.partial_json;
        break;
      }
      case 'content_block_stop': {
        check(open === e.index, `stop for ${e.index} while ${open} is open`);
        const b = msg.content[e.index];
        if (b.type === 'thinking') check(signed, 'a thinking block stops without its signature_delta');
        if (b.type === 'tool_use') { b.input = JSON.parse(b.json || '{}'); delete b.json; check(typeof b.input === 'object' && !Array.isArray(b.input), 'input'); }
        open = null;
        break;
      }
      case 'message_delta':
        check(open === null && !sawDelta, 'message_delta with a block open, or twice');
        sawDelta = true;
        check(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(e.delta.stop_reason), JSON.stringify(e));
        check(e.delta.stop_reason === 'stop_sequence' ? typeof e.delta.stop_sequence === 'string' : e.delta.stop_sequence === null, JSON.stringify(e));
        check(Number.isInteger(e.usage.output_tokens) && Number.isInteger(e.usage.cache_read_input_tokens), JSON.stringify(e.usage));
        msg.stop_reason = e.delta.stop_reason; msg.stop_sequence = e.delta.stop_sequence;
        msg.usage = { ...msg.usage, ...e.usage };
        break;
      case 'message_stop':
        check(sawDelta, 'message_stop before message_delta');
        ended = true;
        break;
      case 'error':
        check(allowError, `error event: ${JSON.stringify(e)}`);
        check(e.error && e.error.type === 'api_error' && typeof e.error.message === 'string', JSON.stringify(e));
        errored = true;
        break;
      default: check(false, `unknown event ${e.type}`);
    }
  }
  check(ended || errored, 'the stream ends with message_stop or error');
  return { msg, errored };
}

// a raw streamed request: its events (names checked against data.type) and the message they build
async function rawStream(body, path = '/v1/messages', headers = {}) {
  const r = await raw('POST', path, { ...body, stream: true }, headers);
  check(r.status === 200, `${r.status} ${r.text.slice(0, 300)}`);
  check((r.headers.get('content-type') || '').startsWith('text/event-stream'), r.headers.get('content-type'));
  const recs = parseSSE(r.text);
  for (const x of recs) check(x.event && x.data && x.data.type === x.event, `event name ${x.event} vs data ${JSON.stringify(x.data)}`);
  return recs.map((x) => x.data);
}

function checkMessage(m) {
  check(/^msg_/.test(m.id) && m.type === 'message' && m.role === 'assistant' && m.model === MODEL, JSON.stringify(m));
  check(Array.isArray(m.content) && m.content.length >= 1, JSON.stringify(m.content));
  const u = m.usage;
  check(u.input_tokens > 0 && u.output_tokens >= 1 && Number.isInteger(u.cache_read_input_tokens) &&
        u.cache_creation_input_tokens === 0, JSON.stringify(u));
}

async function mainSuite() {
  await t('messages.create: a message object', async () => {
    const m = await client.messages.create(base());
    checkMessage(m);
    check(m.content.some((b) => b.type === 'text'), JSON.stringify(m.content));
    check(['end_turn', 'max_tokens'].includes(m.stop_reason) && m.stop_sequence === null, m.stop_reason);
  });
  await t('messages.stream: events in order, the final message as the events say', async () => {
    const stream = client.messages.stream(base({ max_tokens: 8, thinking: { type: 'disabled' } }));
    const events = [];
    for await (const e of stream) events.push(structuredClone(e));
    const { msg } = checkEvents(events);
    const fin = await stream.finalMessage();
    checkMessage(fin);
    check(JSON.stringify(fin.content) === JSON.stringify(msg.content), `${JSON.stringify(fin.content)} vs ${JSON.stringify(msg.content)}`);
    check(fin.usage.output_tokens === msg.usage.output_tokens && fin.stop_reason === msg.stop_reason, JSON.stringify(fin.usage));
    check(events[0].message.usage.input_tokens > 0, `message_start input_tokens: ${JSON.stringify(events[0].message.usage)}`);
  });
  await t('raw stream: event names match their data, ping after message_start', async () => {
    const events = await rawStream(base());
    checkEvents(events);
    check(events[1].type === 'ping', events[1].type);
  });
  await t('countTokens equals the input of the same request', async () => {
    const body = base({ system: [{ type: 'text', text: `count me ${Date.now()}` }], tools, messages: user('count these tokens please') });
    const c = await client.messages.countTokens({ model: body.model, system: body.system, tools, messages: body.messages, thinking: body.thinking });
    const m = await client.messages.create(body);
    const u = m.usage;
    check(c.input_tokens === u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens, `${c.input_tokens} vs ${JSON.stringify(u)}`);
    if (u.cache_read_input_tokens === 0) check(c.input_tokens === u.input_tokens, `${c.input_tokens} vs ${u.input_tokens}`);
    const c2 = await client.messages.countTokens({ model: MODEL, messages: user('count these tokens please'), thinking: body.thinking });
    check(c2.input_tokens > 0 && c2.input_tokens < c.input_tokens, `${c2.input_tokens} vs ${c.input_tokens}`);
  });
  await t('tool_choice any (one call): tool_use blocks, stop_reason tool_use (create and stream)', async () => {
    const m = await client.messages.create(base({ tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, max_tokens: 200 }));
    const uses = m.content.filter((b) => b.type === 'tool_use');
    check(uses.length >= 1 && m.stop_reason === 'tool_use', JSON.stringify(m));
    for (const b of uses) check(/^toolu_/.test(b.id) && tools.some((x) => x.name === b.name) && typeof b.input === 'object', JSON.stringify(b));
    const events = [];
    const s = client.messages.stream(base({ tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, max_tokens: 200 }));
    for await (const e of s) events.push(structuredClone(e));
    const { msg } = checkEvents(events);
    check(msg.stop_reason === 'tool_use' && msg.content.some((b) => b.type === 'tool_use'), JSON.stringify(msg));
    check(events.some((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta'), 'no input_json_delta');
    const fin = await s.finalMessage();
    const fu = fin.content.filter((b) => b.type === 'tool_use'), mu = msg.content.filter((b) => b.type === 'tool_use');
    check(JSON.stringify(fu.map((b) => b.input)) === JSON.stringify(mu.map((b) => b.input)), 'the SDK reads the same inputs');
  });
  await t('tool_choice tool: the named tool, with the schema\'s fields; then a tool round trip', async () => {
    const m = await client.messages.create(base({ tools, tool_choice: { type: 'tool', name: 'add', disable_parallel_tool_use: true },
      max_tokens: 200 }));
    const uses = m.content.filter((b) => b.type === 'tool_use');
    check(uses.length === 1 && uses[0].name === 'add' && m.stop_reason === 'tool_use', JSON.stringify(m));
    check(Number.isInteger(uses[0].input.a) && Number.isInteger(uses[0].input.b), JSON.stringify(uses[0].input));
    const next = await client.messages.create({ model: MODEL, max_tokens: 5, tools, messages: [
      { role: 'user', content: 'add 2 and 3' },
      { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: '5' },
                                { type: 'tool_result', tool_use_id: 'toolu_x', is_error: true, content: [{ type: 'text', text: 'no' }] },
                                { type: 'text', text: 'thanks' }] }] });
    checkMessage(next);
    const c = await client.messages.countTokens({ model: MODEL, tools, messages: [{ role: 'user', content: 'add 2 and 3' }, { role: 'assistant', content: m.content }] });
    check(c.input_tokens > 0, JSON.stringify(c));
  });
  await t('thinking enabled: a thinking block first (signature_delta before it stops); disabled: none', async () => {
    const on = await client.messages.create(base({ max_tokens: 6, thinking: { type: 'enabled', budget_tokens: 1024 } }));
    check(on.content[0].type === 'thinking' && typeof on.content[0].thinking === 'string' && on.content[0].signature === '', JSON.stringify(on.content));
    const events = [];
    for await (const e of client.messages.stream(base({ max_tokens: 6, thinking: { type: 'enabled', budget_tokens: 1024 } }))) events.push(structuredClone(e));
    const { msg } = checkEvents(events);
    check(msg.content[0].type === 'thinking' && events.some((e) => e.type === 'content_block_delta' && e.delta.type === 'thinking_delta'),
      JSON.stringify(msg.content));
    const off = await client.messages.create(base({ max_tokens: 6, thinking: { type: 'disabled' } }));
    check(off.content.every((b) => b.type !== 'thinking'), JSON.stringify(off.content));
    // an earlier turn's thinking block is accepted back
    const again = await client.messages.create({ model: MODEL, max_tokens: 3, messages: [
      { role: 'user', content: 'hi' }, { role: 'assistant', content: on.content.concat([{ type: 'text', text: 'hello' }]) },
      { role: 'user', content: 'again' }] });
    checkMessage(again);
  });
  await t('stop_sequences: stop_reason stop_sequence with the string that matched', async () => {
    const p = base({ max_tokens: 12, temperature: 0, thinking: { type: 'disabled' } });
    const a = await client.messages.create(p);
    const text = a.content.find((b) => b.type === 'text').text;
    const chars = [...text];
    // two characters from the middle, none a repaired byte (U+FFFD: the stop filter sees the raw bytes)
    const at = chars.findIndex((c, i) => i >= 1 && i + 1 < chars.length && c !== '\ufffd' && chars[i + 1] !== '\ufffd');
    check(at > 0, `too little text: ${JSON.stringify(text)}`);
    const stop = chars.slice(at, at + 2).join('');
    const b = await client.messages.create({ ...p, stop_sequences: ['\u0007never', stop] });
    check(b.stop_reason === 'stop_sequence' && b.stop_sequence === stop, `${b.stop_reason} ${JSON.stringify(b.stop_sequence)}`);
    check(!b.content.find((x) => x.type === 'text').text.includes(stop), 'the stop sequence is not in the text');
    const events = await rawStream({ ...p, stop_sequences: [stop] });
    const { msg } = checkEvents(events);
    check(msg.stop_reason === 'stop_sequence' && msg.stop_sequence === stop, JSON.stringify(events.at(-2)));
  });
  await t('max_tokens cut: stop_reason max_tokens; 32000 is cut to the context, not refused', async () => {
    const m = await client.messages.create(base({ max_tokens: 3, thinking: { type: 'disabled' }, temperature: 0 }));
    check(m.stop_reason === 'max_tokens' && m.usage.output_tokens === 3, JSON.stringify(m));
    const events = await rawStream(base({ max_tokens: 3, thinking: { type: 'disabled' }, temperature: 0 }));
    check(checkEvents(events).msg.stop_reason === 'max_tokens', 'stream');
    const models = JSON.parse((await raw('GET', '/v1/models')).text);
    const ctx = models.data[0].max_model_len;
    check(ctx < 32000, `the context (${ctx}) is not below 32000: the clamp is not tested`);
    const r = await raw('POST', '/v1/messages', base({ max_tokens: 32000, temperature: 0, stop_sequences: ['\u0007'] }));
    check(r.status === 200, `${r.status} ${r.text.slice(0, 200)}`);
  });
  await t('errors in Anthropic\'s shape: bad field 400, wrong key 401, unknown model 404', async () => {
    const cases = [
      [raw('POST', '/v1/messages', base({ temperature: 2 })), 400, 'invalid_request_error', /temperature/],
      [raw('POST', '/v1/messages', { model: MODEL, messages: user('x') }), 400, 'invalid_request_error', /max_tokens/],
      [raw('POST', '/v1/messages', base({ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] })),
        400, 'invalid_request_error', /no vision tower/],
      [raw('POST', '/v1/messages', base(), { 'x-api-key': 'wrong' }), 401, 'authentication_error', /key/],
      [raw('POST', '/v1/messages', base({ model: 'no-such-model' })), 404, 'not_found_error', /no-such-model/],
      [raw('POST', '/v1/messages/count_tokens', { model: MODEL, messages: 7 }), 400, 'invalid_request_error', /messages/],
      [raw('POST', '/v1/messages', '{not json'), 400, 'invalid_request_error', /./],
    ];
    for (const [p, status, type, re] of cases) {
      const r = await p;
      check(r.status === status, `${r.status} (want ${status}) ${r.text}`);
      const b = JSON.parse(r.text);
      check(b.type === 'error' && b.error.type === type && re.test(b.error.message), r.text);
    }
    // the SDK's own error classes
    const bad = new Anthropic({ baseURL: URL_, apiKey: 'wrong', maxRetries: 0 });
    for (const [fn, cls] of [[() => client.messages.create(base({ temperature: 2 })), Anthropic.BadRequestError],
                             [() => bad.messages.create(base()), Anthropic.AuthenticationError],
                             [() => client.messages.create(base({ model: 'nope' })), Anthropic.NotFoundError]]) {
      let err = null;
      try { await fn(); } catch (e) { err = e; }
      check(err instanceof cls && err.error && err.error.type === 'error', `${err && err.constructor.name}: ${err && err.message}`);
    }
  });
  await t('an abort mid-stream leaves the server serving', async () => {
    const s = client.messages.stream(base({ max_tokens: 400, thinking: { type: 'disabled' }, stop_sequences: ['\u0007'] }));
    let n = 0, aborted = false;
    try {
      for await (const e of s) { if (e.type === 'content_block_delta' && ++n === 2) s.abort(); }
    } catch (e) { aborted = e instanceof Anthropic.APIUserAbortError || /abort/i.test(String(e)); }
    check(aborted && n >= 2, `aborted ${aborted} after ${n} deltas`);
    checkMessage(await client.messages.create(base()));
  });
  await t('Claude Code\'s request: HEAD /, ?beta=true, its headers; two billing hashes share the prefix cache', async () => {
    const head = await fetch(URL_ + '/', { method: 'HEAD' });
    check(head.status < 500, `HEAD / ${head.status}`);
    const rec = JSON.parse(readFileSync(new URL('./claude_code_request.json', import.meta.url), 'utf8'));
    const headers = { 'anthropic-version': '2023-06-01', 'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27',
      'anthropic-dangerous-direct-browser-access': 'true', 'x-app': 'cli', 'user-agent': 'claude-cli/2.1.12 (external, cli)', accept: 'application/json' };
    const stamp = String(Date.now() % 100000).padStart(5, '0');
    const bodyWith = (cch) => {
      const b = structuredClone(rec);
      b.model = MODEL;
      b.system[0].text = b.system[0].text.replace(/cch=[0-9a-f]+;/, `cch=${cch};`);
      b.system[2].text += `\n(run ${stamp})`;   // no earlier run of this test is in the cache
      return b;
    };
    const count = JSON.parse((await raw('POST', '/v1/messages/count_tokens?beta=true', { ...bodyWith('a5145'), stream: undefined }, headers)).text);
    // the system turn alone (tools and system text, as the template renders them first)
    const sysOnly = JSON.parse((await raw('POST', '/v1/messages/count_tokens?beta=true',
      { model: MODEL, system: bodyWith('a5145').system, tools: rec.tools, messages: user('x'), thinking: rec.thinking }, headers)).text);
    const runs = [];
    for (const cch of ['a5145', '0f3e9']) {
      const events = await rawStream(bodyWith(cch), '/v1/messages?beta=true', headers);
      const { msg } = checkEvents(events);
      runs.push({ start: events[0].message.usage, end: msg.usage });
    }
    const [a, b] = runs;
    console.log(`# Claude Code replay: prompt ${count.input_tokens} tokens, system turn ${sysOnly.input_tokens}; cache read: first ${a.end.cache_read_input_tokens}, second ${b.end.cache_read_input_tokens}`);
    check(a.start.input_tokens > 0 && a.start.input_tokens + a.start.cache_read_input_tokens === count.input_tokens,
      `message_start input_tokens ${JSON.stringify(a.start)} vs count_tokens ${count.input_tokens}`);
    check(b.end.cache_read_input_tokens > 0 && b.end.cache_read_input_tokens >= sysOnly.input_tokens - 16,
      `the second request read ${b.end.cache_read_input_tokens} tokens from the cache; the system part is ${sysOnly.input_tokens} of ${count.input_tokens}`);
    check(b.start.cache_read_input_tokens === b.end.cache_read_input_tokens &&
          b.start.input_tokens + b.start.cache_read_input_tokens === count.input_tokens, JSON.stringify(b));
  });
}

async function faultSuite() {
  await t('fault: a model failure is a 500 api_error before any output', async () => {
    const r = await raw('POST', '/v1/messages', base({ max_tokens: 20, thinking: { type: 'disabled' }, stop_sequences: ['\u0007'] }));
    check(r.status === 500, `${r.status} ${r.text.slice(0, 300)}`);
    const b = JSON.parse(r.text);
    check(b.type === 'error' && b.error.type === 'api_error' && /failed/.test(b.error.message), r.text);
    let err = null;
    try { await client.messages.create(base({ max_tokens: 20, stop_sequences: ['\u0007'] })); } catch (e) { err = e; }
    check(err instanceof Anthropic.InternalServerError, `${err && err.constructor.name}`);
  });
  await t('fault: after the headers, an error event in Anthropic\'s shape ends the stream', async () => {
    const events = await rawStream(base({ max_tokens: 20, thinking: { type: 'disabled' }, stop_sequences: ['\u0007'] }));
    const { errored } = checkEvents(events, { allowError: true });
    check(errored && events.some((e) => e.type === 'content_block_delta'), events.map((e) => e.type).join(','));
    let err = null;
    try {
      for await (const e of client.messages.stream(base({ max_tokens: 20, stop_sequences: ['\u0007'] }))) void e;
    } catch (e) { err = e; }
    check(err instanceof Anthropic.APIError && /failed/.test(err.message), `${err && err.constructor.name}: ${err && err.message}`);
  });
}

if (MODE === 'fault') await faultSuite();
else await mainSuite();
console.log(`RESULT passed=${passed} failed=${failed}`);
