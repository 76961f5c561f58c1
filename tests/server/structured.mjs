// Structured output end to end (issue 15), started by tests/cli/test_structured.sh against the
// random-weight tiny model. Env: DS_URL, DS_KEY, DS_MODEL (as e2e.mjs).
// Every constrained answer that ends `stop` must be valid (JSON Schema answers and tool arguments
// checked by Python's jsonschema, regexes by re.fullmatch, JSON objects by json.loads: Debian's
// python3, independent of the server), every `length` answer a prefix of a valid one (JSON: a
// prefix json.loads reads to its end). The official client's `chat.completions.parse`, strict
// tools under tool_choice required and auto, every vLLM and llama-server field, and the 400s.
// Prints "ok NAME" / "FAIL NAME: why" lines and "RESULT passed=N failed=M".
import OpenAI from 'openai';
import { spawnSync } from 'node:child_process';

import { parseMetrics } from './protocol.mjs';

const URL_ = process.env.DS_URL, KEY = process.env.DS_KEY, MODEL = process.env.DS_MODEL;
const client = new OpenAI({ baseURL: URL_ + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });
let passed = 0, failed = 0;

function check(cond, msg) { if (!cond) throw new Error(msg); }
async function t(name, fn) {
  try { await fn(); console.log(`ok ${name}`); passed++; }
  catch (e) { console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`); failed++; }
}

async function post(path, body) {
  const r = await fetch(URL_ + path, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
    body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

// Python checks, one run for many answers: {kind: 'schema', schema, text} (text validates),
// {kind: 'regex', pattern, text} (fullmatch), {kind: 'prefix', text} (the beginning of a JSON
// text); returns the failures as strings.
const PY = `
import json, re, sys, jsonschema
def json_prefix(t):
    # a prefix of a JSON text: with some ending, json.loads reads it, or stops only at its end
    for tail in ['', '0', '"', '0"', 'n"', '000"', 'u0000"', 'ue', 'e', 'lse', 'se', 'ull', 'll', 'l']:
        s = t + tail
        try:
            json.loads(s); return True
        except json.JSONDecodeError as e:
            if e.pos >= len(s.rstrip()): return True
    return False
bad = []
for r in json.load(sys.stdin):
    try:
        if r['kind'] == 'schema':
            jsonschema.validate(json.loads(r['text']), r['schema'])
        elif r['kind'] == 'regex':
            assert re.fullmatch(r['pattern'], r['text']), 'no match'
        elif r['kind'] == 'prefix':
            assert json_prefix(r['text']), 'not a prefix of JSON'
    except Exception as e:
        bad.append('%s: %s: %r' % (r.get('what', ''), str(e).split(chr(10))[0][:200], r['text'][:200]))
print(json.dumps(bad))
`;
function pyCheck(records) {
  const r = spawnSync('/usr/bin/python3', ['-c', PY], { input: JSON.stringify(records), encoding: 'utf8' });
  if (r.status !== 0) return [`python3 failed: ${r.stderr.slice(-300)}`];
  return JSON.parse(r.stdout);
}

const noThink = { chat_template_kwargs: { enable_thinking: false } };
const msgs = (content = 'answer') => [{ role: 'user', content }];
// bounded: every answer can complete within max_tokens
const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 8 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    ok: { type: 'boolean' },
    color: { enum: ['red', 'green', 'blue'] },
    tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 2 },
  },
  required: ['name', 'age', 'ok', 'color', 'tags'],
  additionalProperties: false,
};
const MAX = 250;

// a finished answer validates, a cut one is a prefix
function record(records, what, schema, text, finish) {
  if (finish === 'stop') records.push({ kind: 'schema', schema, text, what });
  else {
    check(finish === 'length', `${what}: finish_reason ${finish}`);
    records.push({ kind: 'prefix', text, what });
  }
}

async function main() {
  await t('chat.completions.parse with a json_schema response_format: every answer parses and validates', async () => {
    const records = [];
    for (let seed = 0; seed < 4; seed++) {
      const r = await client.chat.completions.parse({ model: MODEL, messages: msgs('a person'), max_tokens: MAX, seed, ...noThink,
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } } });
      const c = r.choices[0];
      check(c.finish_reason === 'stop', `seed ${seed}: ${c.finish_reason}: ${JSON.stringify(c.message.content)}`);
      check(JSON.stringify(c.message.parsed) === JSON.stringify(JSON.parse(c.message.content)), 'parsed');
      record(records, `seed ${seed}`, PERSON, c.message.content, c.finish_reason);
    }
    const bad = pyCheck(records);
    check(bad.length === 0, bad.join(' | '));
  });

  await t('every schema field (OpenAI, vLLM, llama-server), chat and completions, streamed too: stop answers validate', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 }, s: { enum: ['x', 'y'] } },
      required: ['n', 's'], additionalProperties: false };
    const fields = [
      { response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } },
      { response_format: { type: 'json_object', schema } },
      { structured_outputs: { json: schema } },
      { structured_outputs: { json: JSON.stringify(schema) } },
      { guided_json: schema },
      { guided_json: JSON.stringify(schema) },
      { json_schema: schema },
    ];
    const records = [];
    for (const [i, f] of fields.entries()) {
      const what = JSON.stringify(f).slice(0, 60);
      const chat = await post('/v1/chat/completions', { model: MODEL, messages: msgs(), max_tokens: MAX, seed: i, ...noThink, ...f });
      check(chat.status === 200, `${what}: ${chat.status} ${JSON.stringify(chat.body)}`);
      record(records, `chat ${what}`, schema, chat.body.choices[0].message.content, chat.body.choices[0].finish_reason);
      const cmpl = await post('/v1/completions', { model: MODEL, prompt: 'JSON:', max_tokens: MAX, seed: i, ...f });
      check(cmpl.status === 200, `${what}: ${cmpl.status} ${JSON.stringify(cmpl.body)}`);
      record(records, `completions ${what}`, schema, cmpl.body.choices[0].text, cmpl.body.choices[0].finish_reason);
    }
    const s = await client.chat.completions.create({ model: MODEL, messages: msgs(), max_tokens: MAX, seed: 9, stream: true, ...noThink,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } });
    let text = '', finish = null;
    for await (const ch of s) if (ch.choices[0]) { text += ch.choices[0].delta.content || ''; finish = ch.choices[0].finish_reason || finish; }
    record(records, 'stream', schema, text, finish);
    const bad = pyCheck(records);
    check(bad.length === 0, bad.join(' | '));
  });

  await t('json_object (response_format, structured_outputs): stop answers are objects, length answers prefixes', async () => {
    const records = [];
    for (let seed = 0; seed < 6; seed++) {
      const f = seed % 2 ? { structured_outputs: { json_object: true } } : { response_format: { type: 'json_object' } };
      const r = await post('/v1/chat/completions', { model: MODEL, messages: msgs(), max_tokens: 6 + seed * 20, seed, ...noThink, ...f });
      check(r.status === 200, JSON.stringify(r.body));
      const c = r.body.choices[0];
      record(records, `seed ${seed}`, { type: 'object' }, c.message.content, c.finish_reason);
    }
    const bad = pyCheck(records);
    check(bad.length === 0, bad.join(' | '));
  });

  const matching = (cases) => async () => {
    const records = [];
    for (const [i, [f, pattern]] of cases.entries()) {
      for (const path of ['/v1/chat/completions', '/v1/completions']) {
        const body = path === '/v1/completions' ? { prompt: 'answer:' } : { messages: msgs(), ...noThink };
        const r = await post(path, { model: MODEL, max_tokens: 60, seed: i, ...body, ...f });
        const what = `${path} ${JSON.stringify(f)}`;
        check(r.status === 200, `${what}: ${r.status} ${JSON.stringify(r.body)}`);
        const c = r.body.choices[0], text = path === '/v1/completions' ? c.text : c.message.content;
        check(c.finish_reason === 'stop', `${what}: ${c.finish_reason} ${JSON.stringify(text)}`);
        records.push({ kind: 'regex', pattern, text, what });
      }
    }
    const bad = pyCheck(records);
    check(bad.length === 0, bad.join(' | '));
  };
  await t('choice and grammar fields (vLLM, llama-server), chat and completions: every answer matches', matching([
    [{ structured_outputs: { choice: ['alpha', 'beta', 'a "quoted" one'] } }, '(alpha|beta|a "quoted" one)'],
    [{ guided_choice: ['x', 'xy', 'xyz'] }, '(x|xy|xyz)'],
    [{ grammar: 'root ::= ("yes" | "no") " " [0-9]{1,3}' }, '(yes|no) [0-9]{1,3}'],
    [{ guided_grammar: 'root ::= item ("," item){0,3}\nitem ::= [a-c]+' }, '[a-c]+(,[a-c]+){0,3}'],
    [{ structured_outputs: { grammar: 'root ::= "<" [0-9] ">"' } }, '<[0-9]>'],
  ]));
  await t('regex fields (vLLM), chat and completions: every answer fully matches', matching([
    [{ structured_outputs: { regex: '[a-z]{2,5}-[0-9]{1,3}' } }, '[a-z]{2,5}-[0-9]{1,3}'],
    [{ guided_regex: '(yes|no|maybe)!?' }, '(yes|no|maybe)!?'],
  ]));

  // string parameters (raw text in the XML form), and typed ones (JSON values under their schema)
  const WEATHER = { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['celsius', 'fahrenheit'] } },
    required: ['city', 'unit'], additionalProperties: false };
  const TIME = { type: 'object', properties: { tz: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['tz'], additionalProperties: false };
  const LEVEL = { type: 'object', properties: { level: { type: 'integer', minimum: 1, maximum: 7 }, loud: { type: 'boolean' },
    mode: { type: ['string', 'null'], enum: ['a', 'b', null] } }, required: ['level', 'loud', 'mode'], additionalProperties: false };
  const stringTools = [
    { type: 'function', function: { name: 'get_weather', description: 'weather', strict: true, parameters: WEATHER } },
    { type: 'function', function: { name: 'get_time', strict: true, parameters: TIME } },
  ];
  const typedTools = [...stringTools, { type: 'function', function: { name: 'set_level', strict: true, parameters: LEVEL } }];
  const argsOf = { get_weather: WEATHER, get_time: TIME, set_level: LEVEL };

  const forcedCalls = (tools) => async () => {
    const records = [];
    for (let seed = 0; seed < 6; seed++) {
      const named = seed % 3 === 2 ? 'get_time' : null;
      const tool_choice = named ? { type: 'function', function: { name: named } } : 'required';
      const r = await client.chat.completions.create({ model: MODEL, messages: msgs('weather?'), tools, tool_choice, seed,
        max_tokens: 400, parallel_tool_calls: seed % 2 === 0 ? false : undefined, ...(seed < 4 ? noThink : {}) });
      const c = r.choices[0], calls = c.message.tool_calls || [];
      const what = `seed ${seed} ${JSON.stringify(tool_choice)}`;
      if (c.finish_reason === 'length') continue;   // a thinking answer may not get to its call
      check(c.finish_reason === 'tool_calls' && calls.length > 0, `${what}: ${c.finish_reason} ${JSON.stringify(c.message)}`);
      if (seed % 2 === 0) check(calls.length === 1, `${what}: ${calls.length} calls`);
      for (const call of calls) {
        check(named ? call.function.name === named : call.function.name in argsOf, `${what}: ${call.function.name}`);
        records.push({ kind: 'schema', schema: argsOf[call.function.name], text: call.function.arguments, what });
      }
    }
    check(records.length >= 3, `only ${records.length} calls`);
    const bad = pyCheck(records);
    check(bad.length === 0, bad.join(' | '));
  };
  await t('strict tools (string parameters) with tool_choice required / named: valid calls, one with parallel_tool_calls false',
    forcedCalls(stringTools));
  await t('strict tools (typed parameters) with tool_choice required / named: valid calls, one with parallel_tool_calls false',
    forcedCalls(typedTools));

  await t('strict tools with tool_choice auto: text is free, a call once begun is valid', async () => {
    const tools = [stringTools[1]];
    const records = [];
    // the random-weight model writes <tool_call> by itself now and then: among these seeds, some do
    for (let seed = 0; seed < 12; seed++) {
      // the prompt ends where a call begins, so that the model starts one
      const r = await post('/v1/chat/completions', { model: MODEL, messages: msgs('weather?'), tools, tool_choice: 'auto', seed,
        max_tokens: 300, ...noThink });
      check(r.status === 200, JSON.stringify(r.body));
      const c = r.body.choices[0];
      for (const call of c.message.tool_calls || [])
        records.push({ kind: 'schema', schema: argsOf[call.function.name], text: call.function.arguments, what: `seed ${seed}` });
      check(['stop', 'length', 'tool_calls'].includes(c.finish_reason), c.finish_reason);
    }
    check(records.length > 0, 'no answer called a tool: nothing was checked');
    const bad = pyCheck(records);
    check(bad.length === 0, bad.join(' | '));
  });

  await t('thinking on: the reasoning stays free and the end token waits for a whole answer', async () => {
    // the same answers through a GBNF grammar and a JSON Schema
    const schema = { type: 'object', properties: { v: { enum: [1, 2, 3] } }, required: ['v'], additionalProperties: false };
    // (and a choice: the blanks allowed after </think> are not part of the answer)
    const rs = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7, 8].map((seed) => post('/v1/chat/completions', { model: MODEL,
      messages: msgs('hi'), max_tokens: 300, seed, ...(seed >= 6 ? { guided_choice: ['yes', 'no'] }
        : seed % 2 ? { grammar: 'root ::= "{\\"v\\": " [1-3] "}"' }
          : { response_format: { type: 'json_schema', json_schema: { name: 'v', schema, strict: true } } }) })));
    const records = [];
    rs.forEach((r, seed) => {
      check(r.status === 200, JSON.stringify(r.body));
      const c = r.body.choices[0];
      if (c.finish_reason === 'stop' && seed >= 6) records.push({ kind: 'regex', pattern: 'yes|no', text: c.message.content, what: `seed ${seed}` });
      else if (c.finish_reason === 'stop') records.push({ kind: 'schema', schema, text: c.message.content, what: `seed ${seed}` });
      else check(c.finish_reason === 'length' && r.body.usage.completion_tokens === 300, `seed ${seed}: ${JSON.stringify(r.body.usage)}`);
    });
    const bad = pyCheck(records);
    check(bad.length === 0, bad.join(' | '));
  });

  await t('the grammar cache: the same schema twice is one miss and one hit (/metrics)', async () => {
    const get = async () => parseMetrics(await (await fetch(URL_ + '/metrics')).text());
    const name = (m, k) => Object.entries(m).find(([key]) => key.startsWith(k))?.[1] ?? 0;
    const before = await get();
    const f = { guided_choice: [`only-${Date.now()}`] };
    for (let i = 0; i < 2; i++)
      check((await post('/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 20, ...f })).status === 200, 'status');
    const after = await get();
    const hits = name(after, 'deltaserve:grammar_cache_hits_total') - name(before, 'deltaserve:grammar_cache_hits_total');
    const misses = name(after, 'deltaserve:grammar_cache_misses_total') - name(before, 'deltaserve:grammar_cache_misses_total');
    check(hits === 1 && misses === 1, `hits ${hits}, misses ${misses}`);
  });

  const refused = async (cases) => {
    for (const [f, param, says] of cases) {
      const r = await post('/v1/chat/completions', { model: MODEL, messages: msgs(), max_tokens: 4, ...f });
      const e = r.body.error || {};
      check(r.status === 400 && e.type === 'invalid_request_error' && e.param === param && says.test(e.message),
        `${JSON.stringify(f).slice(0, 90)}: ${r.status} ${JSON.stringify(r.body)}`);
    }
  };
  await t('400s from the compilers: an unsupported schema keyword named, a regex backreference', () => refused([
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', if: { type: 'object' } }, strict: true } } },
      'response_format', /\bif\b/],
    [{ guided_json: { type: 'string', contentEncoding: 'base64' } }, 'guided_json', /contentEncoding/],
    [{ guided_regex: '(a)\\1' }, 'guided_regex', /./],
  ]));
  await t('400s: two constraints named, a bad grammar, refused fields, a strict tool that cannot compile', async () => {
    const tools = stringTools;
    const cases = [
      [{ response_format: { type: 'json_object' }, guided_regex: 'a' }, 'guided_regex', /response_format.*guided_regex/],
      [{ grammar: 'root ::= "a"', json_schema: {} }, 'json_schema', /'grammar' and 'json_schema'/],
      [{ structured_outputs: { regex: 'a', choice: ['a'] } }, 'structured_outputs.choice', /structured_outputs.regex/],
      [{ grammar: 'root ::= undefined-rule' }, 'grammar', /undefined-rule/],
      [{ guided_grammar: 'start: "a" | "b"' }, 'guided_grammar', /./],
      [{ structured_outputs: { grammar: 'root ::= "a' } }, 'structured_outputs.grammar', /./],
      [{ guided_choice: [] }, 'guided_choice', /non-empty/],
      [{ guided_whitespace_pattern: '\\s*' }, 'guided_whitespace_pattern', /not supported/],
      [{ structured_outputs: { structural_tag: '{}' } }, 'structured_outputs.structural_tag', /not supported/],
      [{ tools, tool_choice: 'required', response_format: { type: 'json_object' } }, 'response_format', /tool_choice/],
      [{ tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object', properties: {
        s: { type: 'string', pattern: 'a+', maxLength: 3 } } } } }], tool_choice: 'required' }, 'tools', /tools\[0\]\.function\.parameters/],
    ];
    await refused(cases);
  });

  console.log(`RESULT passed=${passed} failed=${failed}`);
}

main().catch((e) => { console.log(`FAIL structured: ${e.stack}`); console.log(`RESULT passed=${passed} failed=${failed + 1}`); });
