// End-to-end tests of POST /v1/responses (started by tests/cli/test_responses.sh) with the official
// openai client and raw HTTP. Every streamed answer is checked event by event against the order of
// OpenAI's Responses stream (checkStream). The test model is random: its words mean nothing, tool
// calls come from tool_choice "required" (the grammar forces them).
// Env: DS_URL, DS_KEY, DS_MODEL; DS_MODE: "main", or "fault" (the server fails every request's
// model call after DS_FAULT_AT_TOKEN tokens: a stream ends with response.failed, a body is a 500).
// Prints "ok NAME" / "FAIL NAME: why" lines and "RESULT passed=N failed=M".
import OpenAI from 'openai';
import http from 'node:http';

import { parseSSE } from './protocol.mjs';

const URL_ = process.env.DS_URL, KEY = process.env.DS_KEY, MODEL = process.env.DS_MODEL;
const MODE = process.env.DS_MODE || 'main';
const client = new OpenAI({ baseURL: URL_ + '/v1', apiKey: KEY, maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;

function check(cond, msg) { if (!cond) throw new Error(msg); }
async function t(name, fn) {
  try { await fn(); console.log(`ok ${name}`); passed++; }
  catch (e) { console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`); failed++; }
}

function raw(path, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(URL_ + path);
    const h = { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}`, ...headers };
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: h }, (res) => {
      const parts = [];
      res.on('data', (c) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.write(typeof body === 'string' ? body : JSON.stringify(body));
    req.end();
  });
}

const USAGE_KEYS = ['input_tokens', 'output_tokens', 'total_tokens'];
function checkUsage(u) {
  check(u && USAGE_KEYS.every((k) => Number.isInteger(u[k])), `usage ${JSON.stringify(u)}`);
  check(Number.isInteger(u.input_tokens_details?.cached_tokens), `cached_tokens ${JSON.stringify(u)}`);
  check(Number.isInteger(u.output_tokens_details?.reasoning_tokens), `reasoning_tokens ${JSON.stringify(u)}`);
  check(u.total_tokens === u.input_tokens + u.output_tokens && u.input_tokens > 0, JSON.stringify(u));
}

// a response object as OpenAI's: the fields clients read, the request's settings echoed
function checkResponse(r, status) {
  check(r.object === 'response' && /^resp_[0-9a-f]{16,}$/.test(r.id), `id/object ${r.id} ${r.object}`);
  check(r.status === status, `status ${r.status}, want ${status}`);
  check(Number.isInteger(r.created_at) && r.model === MODEL && Array.isArray(r.output), 'created_at/model/output');
  check(r.store === false && r.previous_response_id === null && Array.isArray(r.tools), 'store/previous_response_id/tools');
  check(typeof r.parallel_tool_calls === 'boolean' && r.text?.format?.type, 'parallel_tool_calls/text');
  check('instructions' in r && 'tool_choice' in r && 'temperature' in r && 'top_p' in r && 'max_output_tokens' in r &&
        'reasoning' in r && 'metadata' in r && 'incomplete_details' in r && 'error' in r, 'echoed fields');
  for (const it of r.output) {
    if (it.type === 'message') {
      check(/^msg_/.test(it.id) && it.role === 'assistant' && it.content.length === 1, `message ${JSON.stringify(it)}`);
      const c = it.content[0];
      check(c.type === 'output_text' && typeof c.text === 'string' && Array.isArray(c.annotations), JSON.stringify(c));
    } else if (it.type === 'reasoning') {
      check(/^rs_/.test(it.id) && Array.isArray(it.summary) && it.content[0].type === 'reasoning_text', JSON.stringify(it));
    } else if (it.type === 'function_call') {
      check(/^fc_/.test(it.id) && /^call_/.test(it.call_id) && typeof it.name === 'string', JSON.stringify(it));
      JSON.parse(it.arguments);
    } else {
      throw new Error(`unknown output item ${JSON.stringify(it)}`);
    }
  }
  if (status === 'incomplete') check(r.incomplete_details?.reason === 'max_output_tokens', JSON.stringify(r.incomplete_details));
  if (status === 'completed') check(r.incomplete_details === null, 'incomplete_details');
  if (status === 'failed') check(r.error?.code === 'server_error' && typeof r.error.message === 'string', JSON.stringify(r.error));
  else checkUsage(r.usage);
}

// Checks one streamed answer (a list of event objects, in order) against the Responses stream:
//   response.created, response.in_progress,
//   per output item: output_item.added, then
//     message:       content_part.added, output_text.delta*, output_text.done, content_part.done
//     reasoning:     content_part.added, reasoning_text.delta*, reasoning_text.done, content_part.done
//     function_call: function_call_arguments.delta*, function_call_arguments.done
//   then output_item.done; last response.completed, response.incomplete or response.failed,
// with sequence_number 0, 1, 2, ..., output_index counting the items, item_id and content_index
// naming the open item, the done events carrying the deltas' text, and the final response's output
// the items as their done events gave them. Returns the final event.
function checkStream(events) {
  const where = (i) => `event ${i} (${events[i]?.type})`;
  let i = 0;
  const next = (type) => {
    const e = events[i];
    check(e, `the stream ended where ${type} was due`);
    check(e.type === type, `${where(i)}: want ${type}`);
    check(e.sequence_number === i, `${where(i)}: sequence_number ${e.sequence_number}`);
    i++;
    return e;
  };
  const created = next('response.created');
  check(created.response.status === 'in_progress' && created.response.output.length === 0, 'created: in_progress, no output');
  const progress = next('response.in_progress');
  check(progress.response.id === created.response.id, 'in_progress: same id');
  const items = [];
  while (events[i] && events[i].type === 'response.output_item.added') {
    const added = next('response.output_item.added'), it = added.item, index = items.length;
    check(added.output_index === index, `${where(i - 1)}: output_index ${added.output_index}, want ${index}`);
    const at = (e) => {
      check(e.item_id === it.id && e.output_index === index, `${where(i - 1)}: item_id/output_index`);
      if ('content_index' in e || it.type !== 'function_call') check(e.content_index === 0, `${where(i - 1)}: content_index`);
      return e;
    };
    if (it.type === 'message' || it.type === 'reasoning') {
      const kind = it.type === 'message' ? 'output_text' : 'reasoning_text';
      check(at(next('response.content_part.added')).part.type === kind, 'content part type');
      let text = '';
      while (events[i] && events[i].type === `response.${kind}.delta`) text += at(next(`response.${kind}.delta`)).delta;
      check(at(next(`response.${kind}.done`)).text === text, `${kind}.done: the deltas' text`);
      const pd = at(next('response.content_part.done'));
      check(pd.part.type === kind && pd.part.text === text, 'content_part.done: the text');
    } else if (it.type === 'function_call') {
      check(it.arguments === '' && it.status === 'in_progress', `function_call added: ${JSON.stringify(it)}`);
      let args = '';
      while (events[i] && events[i].type === 'response.function_call_arguments.delta')
        args += at(next('response.function_call_arguments.delta')).delta;
      const d = at(next('response.function_call_arguments.done'));
      check(d.arguments === args, 'function_call_arguments.done: the deltas');
      JSON.parse(args);
    } else {
      throw new Error(`${where(i - 1)}: unknown item type ${it.type}`);
    }
    const done = next('response.output_item.done');
    check(done.output_index === index && done.item.id === it.id && done.item.type === it.type, 'output_item.done: the item');
    items.push(done.item);
  }
  const last = events[i];
  check(last, 'the stream ended without response.completed / incomplete / failed');
  const terminal = ['response.completed', 'response.incomplete', 'response.failed'];
  check(terminal.includes(last.type), `${where(i)}: want one of ${terminal}`);
  next(last.type);
  check(i === events.length, `events after ${last.type}: ${events.slice(i).map((e) => e.type)}`);
  const want = { 'response.completed': 'completed', 'response.incomplete': 'incomplete', 'response.failed': 'failed' }[last.type];
  checkResponse(last.response, want);
  check(last.response.id === created.response.id, 'final response: same id');
  check(JSON.stringify(last.response.output) === JSON.stringify(items), 'final response: output is the streamed items');
  return last;
}

// an SSE body's events, each block's event name equal to its data's type
function sseEvents(body) {
  return parseSSE(body).map((b) => {
    const e = JSON.parse(b.data);
    check(b.event === e.type, `event name ${b.event} vs type ${e.type}`);
    return e;
  });
}

async function streamed(params) {
  const events = [];
  for await (const e of await client.responses.create({ ...params, stream: true })) events.push(e);
  return events;
}

const TOOLS = [{ type: 'function', name: 'get_weather', description: 'the weather in a city', strict: true,
                 parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] } },
                               required: ['city'], additionalProperties: false } }];
// greedy: whether the random test model ends its answer within max_output_tokens is then the same every run
const base = (extra = {}) => ({ model: MODEL, input: 'hi', max_output_tokens: 8, temperature: 0, ...extra });

async function mainSuite() {
  await t('responses.create: a response object with output items, usage and the settings echoed', async () => {
    const r = await client.responses.create(base({ instructions: 'be brief', temperature: 0.5, metadata: { k: 'v' },
                                                   max_output_tokens: 400, reasoning: { effort: 'none' } }));
    check(r.status === 'completed' || r.status === 'incomplete', r.status);
    checkResponse(r, r.status);
    check(r.instructions === 'be brief' && r.temperature === 0.5 && r.metadata.k === 'v' && r.max_output_tokens === 400,
          `echo ${JSON.stringify(r)}`);
    check(r.output.length === 1 && r.output[0].type === 'message', `thinking off: one message ${JSON.stringify(r.output)}`);
    check(typeof r.output_text === 'string' && r.output_text === r.output[0].content[0].text, 'output_text');
  });
  await t('responses.create with thinking: a reasoning item with its text', async () => {
    const r = await client.responses.create(base({ reasoning: { effort: 'high', summary: 'auto' } }));
    checkResponse(r, 'incomplete');
    check(r.output[0].type === 'reasoning' && r.output[0].content[0].text.length > 0, JSON.stringify(r.output));
    check(r.usage.output_tokens_details.reasoning_tokens > 0, JSON.stringify(r.usage));
  });
  await t('max_output_tokens cuts the answer: status incomplete, reason max_output_tokens', async () => {
    const r = await client.responses.create(base({ max_output_tokens: 3, reasoning: { effort: 'none' } }));
    checkResponse(r, 'incomplete');
    check(r.usage.output_tokens === 3 && r.output[0].status === 'incomplete', JSON.stringify(r));
    const ev = await streamed(base({ max_output_tokens: 3 }));
    check(checkStream(ev).type === 'response.incomplete', 'stream ends with response.incomplete');
  });
  await t('a streamed response: every event in order (reasoning, then the message)', async () => {
    const ev = await streamed(base({ max_output_tokens: 40, input: [{ role: 'user', content: 'hello' }] }));
    const last = checkStream(ev);
    check(last.response.output.length >= 1 && last.response.output[0].type === 'reasoning', JSON.stringify(last.response.output));
    const ev2 = await streamed(base({ max_output_tokens: 300, reasoning: { effort: 'none' } }));
    const last2 = checkStream(ev2);
    check(last2.response.output[0].type === 'message', JSON.stringify(last2.response.output));
  });
  await t('responses.stream (the client accumulates the events) gives the final response', async () => {
    const s = client.responses.stream(base({ max_output_tokens: 30 }));
    const types = [];
    for await (const e of s) types.push(e.type);
    const r = await s.finalResponse();
    check(types[0] === 'response.created' && r.id.startsWith('resp_'), types.join(','));
  });
  let call = null;
  await t('function tools with tool_choice required: a function_call item', async () => {
    // parallel_tool_calls false: the answer ends with its call (else the model may go on to more calls)
    const r = await client.responses.create(base({ tools: TOOLS, tool_choice: 'required', max_output_tokens: 200,
                                                   reasoning: { effort: 'none' }, parallel_tool_calls: false }));
    checkResponse(r, 'completed');
    const calls = r.output.filter((o) => o.type === 'function_call');
    check(calls.length >= 1 && calls[0].name === 'get_weather', JSON.stringify(r.output));
    check(['Paris', 'Oslo'].includes(JSON.parse(calls[0].arguments).city), calls[0].arguments);
    check(JSON.stringify(r.tools) === JSON.stringify(TOOLS) && r.tool_choice === 'required', 'tools echoed');
    call = calls[0];
    const named = await client.responses.create(base({ tools: TOOLS, tool_choice: { type: 'function', name: 'get_weather' },
                                                       max_output_tokens: 200, reasoning: { effort: 'none' },
                                                       parallel_tool_calls: false }));
    check(named.output.some((o) => o.type === 'function_call' && o.name === 'get_weather'), JSON.stringify(named.output));
  });
  await t('a streamed function call: function_call_arguments events in order', async () => {
    const ev = await streamed(base({ tools: TOOLS, tool_choice: 'required', max_output_tokens: 200,
                                     parallel_tool_calls: false, reasoning: { effort: 'none' } }));
    const last = checkStream(ev);
    check(last.type === 'response.completed', last.type);
    const calls = last.response.output.filter((o) => o.type === 'function_call');
    check(calls.length === 1 && calls[0].status === 'completed', JSON.stringify(last.response.output));
    check(ev.some((e) => e.type === 'response.function_call_arguments.done' && e.name === 'get_weather'), 'arguments.done names it');
  });
  await t('a tool round trip: the function_call and its output sent back', async () => {
    check(call, 'no call from the test before');
    const input = [{ role: 'user', content: 'weather?' }, call,
                   { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }];
    const r = await client.responses.create(base({ tools: TOOLS, input, max_output_tokens: 20 }));
    checkResponse(r, r.status);
    const ev = await streamed(base({ tools: TOOLS, input, max_output_tokens: 20 }));
    checkStream(ev);
    // the output as parts, and a reasoning item before the call (its text goes back into the prompt)
    const input2 = [{ role: 'user', content: [{ type: 'input_text', text: 'weather?' }] },
                    { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'look it up' }],
                      encrypted_content: 'x' },
                    call, { type: 'function_call_output', call_id: call.call_id, output: [{ type: 'input_text', text: '21' }] }];
    checkResponse(await client.responses.create(base({ tools: TOOLS, input: input2 })), 'incomplete');
  });
  await t('text.format json_schema: the answer is JSON valid under the schema', async () => {
    const schema = { type: 'object', properties: { color: { enum: ['red', 'green'] }, ok: { type: 'boolean' } },
                     required: ['color', 'ok'], additionalProperties: false };
    for (const stream of [false, true]) {
      const params = base({ text: { format: { type: 'json_schema', name: 'c', schema, strict: true } },
                            reasoning: { effort: 'none' }, max_output_tokens: 200 });
      let text;
      if (stream) text = checkStream(await streamed(params)).response.output.find((o) => o.type === 'message').content[0].text;
      else {
        const r = await client.responses.create(params);
        checkResponse(r, 'completed');
        check(r.text.format.type === 'json_schema', 'text echoed');
        text = r.output_text;
      }
      const v = JSON.parse(text);
      check(['red', 'green'].includes(v.color) && typeof v.ok === 'boolean' && Object.keys(v).length === 2, text);
    }
    const jo = await client.responses.create(base({ text: { format: { type: 'json_object' } }, reasoning: { effort: 'none' },
                                                    max_output_tokens: 300 }));
    if (jo.status === 'completed') check(typeof JSON.parse(jo.output_text) === 'object', jo.output_text);
  });
  await t('previous_response_id: 400 saying the server keeps no responses', async () => {
    try {
      await client.responses.create(base({ previous_response_id: 'resp_123' }));
      throw new Error('accepted');
    } catch (e) {
      check(e.status === 400 && e.error?.param === 'previous_response_id' && /keeps no responses/.test(e.message), `${e.status} ${e.message}`);
    }
  });
  await t('refused inputs: 400 in OpenAI shape naming the Responses field', async () => {
    const cases = [
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AAAA' }] }] }, 'input[0].content[0].image_url', /no vision tower/],
      [{ input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input[0]', /stores no items/],
      [{ input: [{ role: 'user', content: 'x' }, { type: 'function_call_output', output: 'x' }] }, 'input[1].call_id', /must be a string/],
      [{ input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '[1]' }] }, 'input[0].arguments', /object/],
      [{ input: 'x', reasoning: { effort: 'extreme' } }, 'reasoning.effort', /none, minimal/],
      [{ input: 'x', text: { format: { type: 'json_schema', name: 'x' } } }, 'text.format.schema', /required/],
      [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens', /max_output_tokens/],
      [{ input: 'x', tools: TOOLS, tool_choice: { type: 'function', name: 'nope' } }, 'tool_choice', /not in/],
      [{ input: [] }, 'input', /empty/],
      [{ input: 'x', max_output_tokens: 100000 }, 'max_output_tokens', /max_output_tokens \(100000\) exceeds the context/],
    ];
    for (const [body, param, msg] of cases) {
      const r = await raw('/v1/responses', { model: MODEL, ...body });
      const e = JSON.parse(r.body).error;
      check(r.status === 400 && e.type === 'invalid_request_error' && e.param === param && msg.test(e.message),
            `${JSON.stringify(body)}: ${r.status} ${r.body}`);
    }
  });
  await t('several developer/system messages and a late one: accepted (one system message for the template)', async () => {
    const input = [{ role: 'developer', content: 'a' }, { role: 'system', content: 'b' }, { role: 'user', content: 'c' },
                   { role: 'developer', content: 'd' }];
    checkResponse(await client.responses.create(base({ instructions: 'i', input })), 'incomplete');
  });
  await t('the Codex CLI request (developer items with ids, namespace and web_search tools) streams to the end', async () => {
    const fn = (name) => ({ type: 'function', name, description: `the ${name} tool`, strict: false,
                            parameters: { type: 'object', properties: { command: { type: 'array', items: { type: 'string' } } },
                                          required: ['command'], additionalProperties: false } });
    const body = {
      model: MODEL, stream: true,
      input: [
        { type: 'message', id: 'msg_dev1', role: 'developer', content: [{ type: 'input_text', text: 'You are a coding agent.' }] },
        { type: 'message', id: 'msg_dev2', role: 'developer', content: [{ type: 'input_text', text: '<permissions>none</permissions>' }] },
        { type: 'message', id: 'msg_user1', role: 'user', content: [{ type: 'input_text', text: '<environment_context>cwd</environment_context>' }] },
        { type: 'message', id: 'msg_user2', role: 'user', content: [{ type: 'input_text', text: 'say hi' }] },
      ],
      tools: [fn('shell'), fn('apply_patch'),
              { type: 'namespace', name: 'mcp', description: 'tools of a server', tools: [fn('list_resources')] },
              { type: 'web_search', external_web_access: false }],
      tool_choice: 'auto', parallel_tool_calls: true, reasoning: { summary: 'auto' }, store: false,
      include: ['reasoning.encrypted_content'], prompt_cache_key: 'c0ffee-session', client_metadata: { originator: 'codex_exec' },
      max_output_tokens: 64,
    };
    const r = await raw('/v1/responses', body, { Accept: 'text/event-stream' });
    check(r.status === 200 && /text\/event-stream/.test(r.headers['content-type']), `${r.status} ${r.body.slice(0, 300)}`);
    const last = checkStream(sseEvents(r.body));
    check(last.type === 'response.completed' || last.type === 'response.incomplete', last.type);
    check(last.response.prompt_cache_key === 'c0ffee-session' && last.response.tools.length === 4, 'echo');
  });
  await t('a client abort mid-stream: the server stays healthy and answers the next request', async () => {
    const ac = new AbortController();
    const s = await client.responses.create(base({ stream: true, max_output_tokens: 2000 }), { signal: ac.signal });
    let n = 0;
    try {
      for await (const e of s) {
        // events already read from the socket may still come out after abort(): stop reading at once
        if (e.type.endsWith('.delta') && ++n === 3) { ac.abort(); break; }
      }
    } catch (e) {
      check(e.name === 'APIUserAbortError' || /abort/i.test(String(e)), String(e));
    }
    check(n === 3, `deltas before the abort: ${n}`);
    const r = await client.responses.create(base());
    checkResponse(r, 'incomplete');
    const h = await fetch(URL_ + '/health');
    check(h.status === 200, `health ${h.status}`);
  });
}

async function faultSuite() {
  await t('a model failure after the headers: the stream ends with response.failed', async () => {
    const r = await raw('/v1/responses', base({ stream: true, max_output_tokens: 50 }));
    check(r.status === 200, `${r.status} ${r.body.slice(0, 200)}`);
    const last = checkStream(sseEvents(r.body));
    check(last.type === 'response.failed' && last.response.status === 'failed', last.type);
    check(/failed/.test(last.response.error.message), JSON.stringify(last.response.error));
  });
  await t('a model failure, not streamed: 500 in OpenAI error shape', async () => {
    try {
      await client.responses.create(base({ max_output_tokens: 50 }));
      throw new Error('a 200');
    } catch (e) {
      check(e.status === 500 && e.error?.type === 'server_error' && /failed/.test(e.error.message), `${e.status} ${e.message}`);
    }
  });
}

if (MODE === 'fault') await faultSuite();
else await mainSuite();
console.log(`RESULT passed=${passed} failed=${failed}`);
