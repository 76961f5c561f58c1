// Soak test of `deltaserve serve`: a load generator that runs a mix of good and bad requests
// against a live server on 127.0.0.1, bounded in requests and in time, and checks that the
// server keeps its promises under load (tests/cli/test_soak.sh starts the server and runs it).
//
// The mix: chat and completions, streamed and not, short and long prompts, prompts sharing
// prefixes (the prefix cache), long generations (with a small KV budget they force preemption),
// n = 2, logprobs, invalid UTF-8 in prompts (repaired: a normal answer); clients that leave in the
// middle of a stream or before an answer; and bad requests: malformed JSON, wrong types, unknown
// model, bodies over the limit, prompts and max_tokens over the context, a missing key, invalid
// UTF-8 where a name is expected.
//
// It asserts:
//   - the server process stays alive;
//   - every well-formed request gets a complete, valid answer: HTTP 200, well-formed UTF-8 JSON,
//     finish_reason stop or length for every choice, usage consistent with the content (tokens =
//     max_tokens when the end token is ignored, logprob entries = completion tokens), a stream
//     that has a role chunk (chat), one finish chunk per choice, one usage chunk when asked, no
//     error event and [DONE] last;
//   - every bad one gets the documented status with an OpenAI-style error body
//     ({"error": {"message", "type", "param", "code"}}, param naming the field, code a string or null);
//   - after the run, once idle: no request running or waiting, no state slot in use, every KV page
//     and checkpoint in use held by the prefix cache; RSS (VmRSS of the server) within 5% of RSS
//     after the warm-up; /metrics: requests started = success + client aborts + rejected + failed,
//     and these agree with what this client saw; the preemption counter went up.
//
// Env: SOAK_URL (http://127.0.0.1:PORT), SOAK_KEY, SOAK_MODEL, SOAK_PID (the server's pid),
//      SOAK_MAX_BODY_KB (the server's --max-body-kb), SOAK_REQUESTS (default 600) and
//      SOAK_SECONDS (default 60): the run stops at whichever comes first; SOAK_WARMUP
//      (requests before the RSS reference, default 80), SOAK_CONCURRENCY (default 8),
//      SOAK_SEED (default 1), SOAK_RSS_TOLERANCE (default 0.05; set it to a negative number to
//      report RSS without checking it, as under AddressSanitizer, whose quarantine holds freed
//      memory on purpose).
// Prints "ok NAME" / "FAIL NAME: why" lines, a summary, and "RESULT passed=N failed=M".
import http from 'node:http';
import fs from 'node:fs';

import { parseMetrics, parseSSE } from '../server/protocol.mjs';

const URL_ = process.env.SOAK_URL, KEY = process.env.SOAK_KEY || '', MODEL = process.env.SOAK_MODEL;
const PID = Number(process.env.SOAK_PID || 0);
const MAX_REQUESTS = Number(process.env.SOAK_REQUESTS || 600), MAX_SECONDS = Number(process.env.SOAK_SECONDS || 60);
const WARMUP = Number(process.env.SOAK_WARMUP || 80), CONCURRENCY = Number(process.env.SOAK_CONCURRENCY || 8);
const MAX_BODY = Number(process.env.SOAK_MAX_BODY_KB || 64) * 1024;
const RSS_TOL = Number(process.env.SOAK_RSS_TOLERANCE ?? 0.05);
const u = new URL(URL_);
if (u.hostname !== '127.0.0.1') { console.log(`FAIL soak: only 127.0.0.1 is allowed, got ${u.hostname}`); process.exit(1); }

let passed = 0, failed = 0;
const ok = (name) => { console.log(`ok ${name}`); passed++; };
const fail = (name, why) => { console.log(`FAIL ${name}: ${why}`); failed++; };

// --- deterministic randomness (SOAK_SEED) ---
let seed = (Number(process.env.SOAK_SEED || 1) * 2654435761) >>> 0 || 1;
function rnd() { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 4294967296; }
const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
const WORDS = 'alpha beta gamma delta river stone cloud paper orange violet window market silver engine garden winter'.split(' ');
const words = (n) => Array.from({ length: n }, () => pick(WORDS)).join(' ');
// about 5 tokens a word with the generated tokenizer of the test models
const PREFIXES = Array.from({ length: 4 }, (_, i) => `Shared instructions ${i}: ` + words(40));

// --- HTTP ---
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const utf8 = new TextDecoder('utf-8', { fatal: true });
const headers = (extra = {}) => ({ 'Content-Type': 'application/json', ...(KEY ? { Authorization: `Bearer ${KEY}` } : {}), ...extra });

// Sends a request; leave: undefined (read all), {afterChunks: k} (stream: go after k chunks),
// {afterMs: t} (go after t ms whatever came). Resolves {status, bytes, text, utf8, left}.
function send(method, path, body, hdrs, leave) {
  return new Promise((resolve) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method, headers: hdrs, agent }, (res) => {
      const parts = [];
      let chunks = 0, done = false;
      const finish = (left) => {
        if (done) return;
        done = true;
        const bytes = Buffer.concat(parts);
        let good = true;
        try { utf8.decode(bytes); } catch { good = false; }
        resolve({ status: res.statusCode, headers: res.headers, text: bytes.toString('utf8'), utf8: good, left });
      };
      res.on('data', (c) => {
        parts.push(c);
        chunks++;
        if (leave && leave.afterChunks && chunks >= leave.afterChunks) { req.destroy(); finish(true); }
      });
      res.on('end', () => finish(false));
      res.on('error', () => finish(true));
      res.on('close', () => finish(true));
    });
    req.on('error', (e) => resolve({ status: 0, text: String(e), utf8: true, left: true, error: e }));
    if (leave && leave.afterMs) setTimeout(() => { req.destroy(); resolve({ status: 0, text: '', utf8: true, left: true }); }, leave.afterMs);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

async function metrics() {
  const r = await send('GET', '/metrics', undefined, {});
  return parseMetrics(r.text);
}

function rssKiB() {
  const s = fs.readFileSync(`/proc/${PID}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(s)[1]);
}
function alive() { try { process.kill(PID, 0); return true; } catch { return false; } }

// --- the mix ---
let CTX = 0;
const stats = { served: {}, bad: {}, disconnects: 0, problems: [] };
const count = (o, k) => (o[k] = (o[k] || 0) + 1);
const problem = (what) => { if (stats.problems.length < 20) stats.problems.push(what); };

// good requests: [kind, weight, make() -> {path, body (object or Buffer), check info}]
const GOOD = [
  ['chat short', 6, () => ({ path: '/v1/chat/completions', body: { messages: [{ role: 'user', content: words(3 + Math.floor(rnd() * 10)) }], max_tokens: 4 + Math.floor(rnd() * 12) } })],
  ['chat short streamed', 6, () => ({ path: '/v1/chat/completions', stream: true, body: { messages: [{ role: 'user', content: words(5) }], max_tokens: 8, stream_options: { include_usage: true } } })],
  ['chat shared prefix', 4, () => ({ path: '/v1/chat/completions', body: { messages: [{ role: 'system', content: pick(PREFIXES) }, { role: 'user', content: words(6) }], max_tokens: 6, chat_template_kwargs: { enable_thinking: false } } })],
  ['chat n=2 logprobs', 2, () => ({ path: '/v1/chat/completions', body: { messages: [{ role: 'user', content: words(8) }], max_tokens: 6, n: 2, logprobs: true, top_logprobs: 2, temperature: 1, seed: Math.floor(rnd() * 1000) } })],
  ['completion short', 5, () => ({ path: '/v1/completions', body: { prompt: words(4), max_tokens: 6, logprobs: 1 } })],
  ['completion shared prefix streamed', 4, () => ({ path: '/v1/completions', stream: true, body: { prompt: pick(PREFIXES) + ' ' + words(10), max_tokens: 8, stream_options: { include_usage: true } } })],
  ['completion long prompt', 3, () => ({ path: '/v1/completions', body: { prompt: words(60 + Math.floor(rnd() * 50)), max_tokens: 4 } })],
  ['completion long generation', 4, () => ({ path: '/v1/completions', stream: rnd() < 0.5, label: (sp) => sp.stream ? 'completion long generation streamed' : 'completion long generation', body: { prompt: words(40), max_tokens: 150 + Math.floor(rnd() * 150), ignore_eos: true, temperature: 1, seed: Math.floor(rnd() * 1000), stream_options: undefined } })],
  ['chat invalid UTF-8 (repaired)', 2, () => ({ path: '/v1/chat/completions', body: Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"caf'), Buffer.from([0xe9, 0x20, 0xff, 0xfe, 0x20, 0xf0, 0x9f, 0x98, 0x20, 0xed, 0xa0, 0x80]), Buffer.from(' ok"}],"max_tokens":6,"ignore_eos":true}')]), maxTokens: 6 })],
];
// bad requests: [kind, weight, make() -> {path, body, headers?, status, param?}]
const BAD = [
  ['malformed JSON', 3, () => ({ path: '/v1/chat/completions', body: '{"messages": [{"role": "user", "content": "x"}', status: 400, param: null })],
  ['not an object', 1, () => ({ path: '/v1/completions', body: '[1, 2, 3]', status: 400, param: null })],
  ['wrong type', 2, () => ({ path: '/v1/chat/completions', body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }), status: 400, param: 'temperature' })],
  ['unknown role', 1, () => ({ path: '/v1/chat/completions', body: JSON.stringify({ messages: [{ role: 'wizard', content: 'x' }] }), status: 400, param: 'messages[0].role' })],
  ['invalid UTF-8 role', 1, () => ({ path: '/v1/chat/completions', body: Buffer.concat([Buffer.from('{"messages":[{"role":"us'), Buffer.from([0xff, 0xc3]), Buffer.from('er","content":"x"}]}')]), status: 400, param: 'messages[0].role' })],
  ['unknown model', 1, () => ({ path: '/v1/completions', body: JSON.stringify({ model: 'no-such-model', prompt: 'x' }), status: 404, param: 'model' })],
  ['body over the limit', 2, () => ({ path: '/v1/chat/completions', body: JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(MAX_BODY + 1024) }] }), status: 413, param: null })],
  ['prompt over the context', 2, () => ({ path: '/v1/completions', body: JSON.stringify({ prompt: Array.from({ length: CTX + 8 }, (_, i) => 100 + (i % 500)), max_tokens: 1 }), status: 400, param: 'prompt' })],
  ['max_tokens over the context', 2, () => ({ path: '/v1/chat/completions', body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: CTX }), status: 400, param: 'max_tokens' })],
  ['missing key', KEY ? 1 : 0, () => ({ path: '/v1/chat/completions', body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }] }), headers: { 'Content-Type': 'application/json' }, status: 401, param: null })],
];
// clients that leave
const LEAVE = [
  ['disconnect mid-stream', 3, () => ({ path: '/v1/completions', body: { prompt: words(20), max_tokens: 400, ignore_eos: true, stream: true, temperature: 1 }, leave: { afterChunks: 2 + Math.floor(rnd() * 4) } })],
  ['disconnect before the answer', 1, () => ({ path: '/v1/chat/completions', body: { messages: [{ role: 'user', content: words(30) }], max_tokens: 300, ignore_eos: true }, leave: { afterMs: 20 + Math.floor(rnd() * 100) } })],
];
const ALL = [...GOOD.map((g) => ['good', ...g]), ...BAD.map((b) => ['bad', ...b]), ...LEAVE.map((l) => ['leave', ...l])];
const TOTAL_W = ALL.reduce((s, x) => s + x[2], 0);
function choose() {
  let x = rnd() * TOTAL_W;
  for (const e of ALL) { x -= e[2]; if (x < 0) return e; }
  return ALL[0];
}

// --- checks of answers ---
function checkChoiceTokens(kind, j, r, info) {
  const n = info.n || 1;
  if (!j.usage || typeof j.usage.completion_tokens !== 'number') return `${kind}: no usage`;
  const us = j.usage;
  if (us.total_tokens !== us.prompt_tokens + us.completion_tokens || us.prompt_tokens < 1) return `${kind}: usage ${JSON.stringify(us)}`;
  if (us.completion_tokens < n || us.completion_tokens > n * info.maxTokens) return `${kind}: ${us.completion_tokens} tokens for max ${info.maxTokens} x ${n}`;
  if (info.ignoreEos && us.completion_tokens !== n * info.maxTokens) return `${kind}: ${us.completion_tokens} tokens, ignore_eos wants ${n * info.maxTokens}`;
  return null;
}

function checkNonStream(kind, r, info) {
  if (r.status !== 200) return `${kind}: status ${r.status}: ${r.text.slice(0, 200)}`;
  if (!r.utf8) return `${kind}: body not UTF-8`;
  let j;
  try { j = JSON.parse(r.text); } catch { return `${kind}: body not JSON`; }
  const chat = info.path.includes('chat');
  if (j.object !== (chat ? 'chat.completion' : 'text_completion')) return `${kind}: object ${j.object}`;
  const n = info.n || 1;
  if (!Array.isArray(j.choices) || j.choices.length !== n) return `${kind}: ${j.choices && j.choices.length} choices`;
  let lpTokens = 0;
  for (const c of j.choices) {
    if (c.finish_reason !== 'stop' && c.finish_reason !== 'length') return `${kind}: finish_reason ${c.finish_reason}`;
    if (info.ignoreEos && c.finish_reason !== 'length') return `${kind}: finish_reason ${c.finish_reason} with ignore_eos`;
    if (chat ? typeof c.message.content !== 'string' && !c.message.tool_calls : typeof c.text !== 'string') return `${kind}: no text`;
    if (info.logprobs) {
      const k = chat ? c.logprobs.content.length : c.logprobs.tokens.length;
      // the end token is counted in usage but has no entry
      lpTokens += c.finish_reason === 'length' ? k : k + 1;
    }
  }
  const e = checkChoiceTokens(kind, j, r, info);
  if (e) return e;
  if (info.logprobs && lpTokens !== j.usage.completion_tokens) return `${kind}: ${lpTokens} logprob entries for ${j.usage.completion_tokens} tokens`;
  return null;
}

function checkStream(kind, r, info) {
  if (r.status !== 200) return `${kind}: status ${r.status}: ${r.text.slice(0, 200)}`;
  if (!r.utf8) return `${kind}: stream not UTF-8`;
  if (!String(r.headers['content-type']).startsWith('text/event-stream')) return `${kind}: content-type ${r.headers['content-type']}`;
  const evs = parseSSE(r.text);
  if (evs.some((e) => e.event === 'error')) return `${kind}: error event ${r.text.slice(-300)}`;
  if (!evs.length || evs[evs.length - 1].data !== '[DONE]') return `${kind}: no [DONE] at the end`;
  if (evs.filter((e) => e.data === '[DONE]').length !== 1) return `${kind}: several [DONE]`;
  const chat = info.path.includes('chat');
  const n = info.n || 1;
  const fin = new Map(), role = new Set();
  let usage = null, usageChunks = 0;
  for (const e of evs.slice(0, -1)) {
    let j;
    try { j = JSON.parse(e.data); } catch { return `${kind}: a chunk is not JSON`; }
    if (j.usage) { usage = j; usageChunks++; continue; }
    for (const c of j.choices) {
      if (chat && c.delta.role === 'assistant') role.add(c.index);
      if (c.finish_reason) {
        if (fin.has(c.index)) return `${kind}: two finish chunks for choice ${c.index}`;
        fin.set(c.index, c.finish_reason);
      }
    }
  }
  if (chat && role.size !== n) return `${kind}: role chunks for ${role.size} of ${n} choices`;
  if (fin.size !== n) return `${kind}: finish chunks for ${fin.size} of ${n} choices`;
  for (const f of fin.values()) {
    if (f !== 'stop' && f !== 'length') return `${kind}: finish_reason ${f}`;
    if (info.ignoreEos && f !== 'length') return `${kind}: finish_reason ${f} with ignore_eos`;
  }
  if (info.includeUsage) {
    if (usageChunks !== 1) return `${kind}: ${usageChunks} usage chunks`;
    return checkChoiceTokens(kind, usage, r, info);
  }
  if (usageChunks !== 0) return `${kind}: usage without include_usage`;
  return null;
}

function checkError(kind, r, want) {
  if (r.status !== want.status) return `${kind}: status ${r.status}, expected ${want.status}: ${r.text.slice(0, 200)}`;
  if (!r.utf8) return `${kind}: error body not UTF-8`;
  let j;
  try { j = JSON.parse(r.text); } catch { return `${kind}: error body not JSON: ${r.text.slice(0, 100)}`; }
  const e = j.error;
  if (!e || typeof e.message !== 'string' || !e.message || typeof e.type !== 'string' || !(e.code === null || typeof e.code === 'string') || !('param' in e))
    return `${kind}: not an OpenAI error body: ${r.text.slice(0, 200)}`;
  if (want.param !== undefined && e.param !== want.param) return `${kind}: param ${e.param}, expected ${want.param}`;
  return null;
}

const client = { sent: 0, ok: 0, bad: 0, left: 0, leftBeforeAnswer: 0 };

async function one() {
  const [group, kind, , make] = choose();
  const spec = make();
  client.sent++;
  if (group === 'good') {
    const body = Buffer.isBuffer(spec.body) ? spec.body : JSON.stringify({ model: MODEL, ...spec.body, stream: spec.stream || undefined });
    const b = Buffer.isBuffer(spec.body) ? {} : spec.body;
    const info = { path: spec.path, n: b.n || 1, maxTokens: spec.maxTokens || b.max_tokens, ignoreEos: Buffer.isBuffer(spec.body) || !!b.ignore_eos,
      logprobs: !!b.logprobs, includeUsage: !!(b.stream_options && b.stream_options.include_usage) };
    const r = await send('POST', spec.path, body, headers());
    const why = spec.stream ? checkStream(kind, r, info) : checkNonStream(kind, r, info);
    if (why) problem(why); else { count(stats.served, spec.label ? spec.label(spec) : kind); client.ok++; }
  } else if (group === 'bad') {
    const r = await send('POST', spec.path, spec.body, spec.headers || headers());
    const why = checkError(kind, r, spec);
    if (why) problem(why); else { count(stats.bad, kind); client.bad++; }
  } else {
    const r = await send('POST', spec.path, JSON.stringify({ model: MODEL, ...spec.body }), headers(), spec.leave);
    if (r.left) { stats.disconnects++; client.left++; }
    else if (r.status === 200) { count(stats.served, kind + ' (finished first)'); client.ok++; }
    else problem(`${kind}: status ${r.status}: ${r.text.slice(0, 200)}`);
  }
}

// runs the mix with CONCURRENCY workers until n requests or the deadline
async function runMix(n, deadline) {
  let started = 0;
  const worker = async () => {
    while (started < n && Date.now() < deadline && alive()) {
      started++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return started;
}

// waits (bounded) until the server is idle and its outcome counters add up
async function settle(limitMs) {
  const t0 = Date.now();
  let m;
  for (;;) {
    m = await metrics();
    const sum = m['deltaserve:request_success_total'] + m['deltaserve:request_client_aborts_total'] +
      m['deltaserve:requests_rejected_total'] + m['deltaserve:requests_failed_total'];
    const idle = m['deltaserve:num_requests_running'] === 0 && m['deltaserve:num_requests_waiting'] === 0 &&
      m['deltaserve:state_slots_used'] === 0;
    if ((idle && sum === m['deltaserve:requests_started_total']) || Date.now() - t0 > limitMs) return m;
    await new Promise((r) => setTimeout(r, 50));
  }
}

// --- the run ---
const t0 = Date.now();
const models = await send('GET', '/v1/models', undefined, headers());
CTX = JSON.parse(models.text).data[0].max_model_len;
const m0 = await metrics();

const nWarm = await runMix(WARMUP, t0 + MAX_SECONDS * 1000 / 4);
const mWarm = await settle(30000);
const rssWarm = rssKiB();
const prWarm = mWarm['deltaserve:num_preemptions_total'];
const runStart = Date.now();
const nRun = await runMix(Math.max(0, MAX_REQUESTS - nWarm), t0 + MAX_SECONDS * 1000);
const mEnd = await settle(30000);
const rssEnd = rssKiB();
const runSeconds = (Date.now() - runStart) / 1000;

// --- checks ---
if (alive()) ok('the server is alive after the run'); else fail('the server is alive after the run', `process ${PID} is gone`);
if (stats.problems.length === 0) ok(`every answer was complete and every error as documented (${client.sent} requests)`);
else fail('every answer was complete and every error as documented', `${stats.problems.length} problems:\n     ` + stats.problems.join('\n     '));
const idle = mEnd['deltaserve:num_requests_running'] === 0 && mEnd['deltaserve:num_requests_waiting'] === 0 && mEnd['deltaserve:state_slots_used'] === 0;
if (idle) ok('nothing running or waiting, no state slot in use'); else fail('pools back to baseline', `running ${mEnd['deltaserve:num_requests_running']}, waiting ${mEnd['deltaserve:num_requests_waiting']}, state slots ${mEnd['deltaserve:state_slots_used']}`);
if (mEnd['deltaserve:kv_pages_used'] === mEnd['deltaserve:kv_pages_cached'] && mEnd['deltaserve:checkpoint_slots_used'] === mEnd['deltaserve:checkpoints_cached'])
  ok(`every KV page and checkpoint in use is the prefix cache's (${mEnd['deltaserve:kv_pages_used']} pages, ${mEnd['deltaserve:checkpoint_slots_used']} checkpoints)`);
else fail('every KV page and checkpoint in use is the prefix cache\'s', `pages used ${mEnd['deltaserve:kv_pages_used']} cached ${mEnd['deltaserve:kv_pages_cached']}, checkpoints used ${mEnd['deltaserve:checkpoint_slots_used']} cached ${mEnd['deltaserve:checkpoints_cached']}`);
const d = (k) => mEnd[k] - m0[k];
const started = d('deltaserve:requests_started_total'), success = d('deltaserve:request_success_total');
const aborts = d('deltaserve:request_client_aborts_total'), rejected = d('deltaserve:requests_rejected_total'), failedN = d('deltaserve:requests_failed_total');
if (started === success + aborts + rejected + failedN) ok(`metrics: started ${started} = success ${success} + aborts ${aborts} + rejected ${rejected} + failed ${failedN}`);
else fail('metrics: started = success + aborts + rejected + failed', `${started} != ${success} + ${aborts} + ${rejected} + ${failedN}`);
// what this client saw: every request reached the server; a client that left may still have been
// answered in full before the server noticed
if (started === client.sent && rejected === client.bad && failedN === 0 && success + aborts === client.ok + client.left && aborts <= client.left)
  ok('metrics agree with the client (sent, rejected, answered or left)');
else fail('metrics agree with the client', `server: started ${started} success ${success} aborts ${aborts} rejected ${rejected} failed ${failedN}; client: sent ${client.sent} ok ${client.ok} bad ${client.bad} left ${client.left}`);
const errorsByKind = ['bad_request', 'auth', 'not_found', 'too_large'].map((k) => d(`deltaserve:request_errors_total:${k}`)).reduce((a, b) => a + b, 0);
if (errorsByKind === rejected) ok('errors by kind add up to the rejected requests'); else fail('errors by kind add up to the rejected requests', `${errorsByKind} vs ${rejected}`);
const preemptions = mEnd['deltaserve:num_preemptions_total'] - m0['deltaserve:num_preemptions_total'];
if (preemptions > 0) ok(`the KV budget forced preemptions (${preemptions}, ${mEnd['deltaserve:num_preemptions_total'] - prWarm} after the warm-up)`);
else fail('the KV budget forced preemptions', 'the preemption counter did not move');
const drift = (rssEnd - rssWarm) / rssWarm;
if (RSS_TOL < 0) console.log(`# RSS not checked (SOAK_RSS_TOLERANCE < 0): ${rssWarm} KiB after warm-up, ${rssEnd} KiB after the run`);
else if (Math.abs(drift) <= RSS_TOL) ok(`RSS flat: ${rssWarm} KiB after warm-up, ${rssEnd} KiB after the run (${(drift * 100).toFixed(2)}%)`);
else fail(`RSS within ${RSS_TOL * 100}% of warm-up`, `${rssWarm} KiB after warm-up, ${rssEnd} KiB after the run (${(drift * 100).toFixed(2)}%)`);

// --- summary ---
const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);
console.log(`# soak: ${client.sent} requests in ${((Date.now() - t0) / 1000).toFixed(1)} s (${nWarm} warm-up, ${nRun} in ${runSeconds.toFixed(1)} s), concurrency ${CONCURRENCY}, context ${CTX}`);
console.log(`# served ${sum(stats.served)}:`);
for (const [k, v] of Object.entries(stats.served).sort()) console.log(`#   ${String(v).padStart(5)}  ${k}`);
console.log(`# bad inputs tried ${sum(stats.bad)}:`);
for (const [k, v] of Object.entries(stats.bad).sort()) console.log(`#   ${String(v).padStart(5)}  ${k}`);
console.log(`# disconnects ${stats.disconnects} (server: ${aborts} aborted, ${stats.disconnects - aborts} answered before it noticed)`);
console.log(`# preemptions ${preemptions}; generated tokens ${d('deltaserve:generation_tokens_total')}; prefix cache hits ${d('deltaserve:prefix_cache_hits_total')} of ${d('deltaserve:prefix_cache_queries_total')} prompt tokens`);
console.log(`# RSS ${rssWarm} KiB after warm-up, ${rssEnd} KiB after the run (${(drift * 100).toFixed(2)}%)`);
console.log(`RESULT passed=${passed} failed=${failed}`);
