// tokens.mjs - tokens over HTTP and the completions fields of issue 16, end to end against a running
// server (DS_URL, DS_MODEL): /tokenize and /detokenize in vLLM's and llama-server's shapes, the two
// render routes against what a real run reports, several prompts, echo, suffix, best_of, logit_bias
// on both endpoints, streamed and not. The model is random: checks are on structure and token ids.
// Prints ok/FAIL lines and "RESULT passed=N failed=M".
import OpenAI from 'openai';
import { parseSSE } from './protocol.mjs';

const URL_ = process.env.DS_URL, MODEL = process.env.DS_MODEL || 'tiny';
const client = new OpenAI({ baseURL: `${URL_}/v1`, apiKey: 'none', maxRetries: 0 });
let passed = 0, failed = 0;
function check(cond, msg) { if (!cond) throw new Error(msg); }
async function t(name, fn) {
  try { await fn(); console.log(`ok ${name}`); passed++; } catch (e) { console.log(`FAIL ${name}: ${e.message}`); failed++; }
}
async function post(path, body) {
  const r = await fetch(`${URL_}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* a stream */ }
  return { status: r.status, text, json };
}
const eq = (a, b) => JSON.stringify(a) === JSON.stringify(b);
async function bad(path, body, param) {
  const r = await post(path, body);
  check(r.status === 400, `status ${r.status}: ${r.text}`);
  check(r.json?.error?.param === param, `param ${r.json?.error?.param}: ${r.text}`);
  return r.json.error.message;
}

const strings = ['hello world', '', ' ', 'wörld café 😀 漢字', 'a\u0000b', '<|im_start|>user\nhi<|im_end|>',
  '<think>x</think>', '<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>', '\t\n  x  \r\n', 'ab'.repeat(300),
  'emoji 👩‍👩‍👧 zwj', 'numbers 1234567890', '"quotes" and \\backslashes\\', 'ﬁ ligature Å Å'];

// --- /tokenize, /detokenize ---
await t('tokenize (vLLM) -> detokenize round trip on many strings', async () => {
  for (const s of strings) {
    const a = await post('/tokenize', { model: MODEL, prompt: s, return_token_strs: true });
    check(a.status === 200, `${a.status} ${a.text}`);
    check(a.json.count === a.json.tokens.length && a.json.max_model_len > 0, `shape ${a.text}`);
    check(a.json.token_strs.length === a.json.tokens.length, 'token_strs');
    const d = await post('/detokenize', { model: MODEL, tokens: a.json.tokens });
    check(d.status === 200, `${d.status} ${d.text}`);
    check(d.json.prompt === s.normalize('NFC') && d.json.content === d.json.prompt, `${JSON.stringify(s)} -> ${JSON.stringify(d.json)}`);
  }
});
await t('tokenize (llama-server) equals vLLM shape; with_pieces pieces join to the text', async () => {
  for (const s of strings) {
    const v = await post('/tokenize', { prompt: s });
    const l = await post('/tokenize', { content: s });
    check(l.status === 200 && eq(Object.keys(l.json), ['tokens']), `shape ${l.text}`);
    check(eq(l.json.tokens, v.json.tokens), `ids differ for ${JSON.stringify(s)}`);
    const p = await post('/tokenize', { content: s, with_pieces: true });
    check(eq(p.json.tokens.map((x) => x.id), v.json.tokens), 'ids of pieces');
    const bytes = [];
    for (const { piece } of p.json.tokens) {
      if (typeof piece === 'string') bytes.push(...Buffer.from(piece, 'utf8'));
      else { check(Array.isArray(piece) && piece.every((b) => b >= 0 && b < 256), `piece ${JSON.stringify(piece)}`); bytes.push(...piece); }
    }
    check(Buffer.from(bytes).toString('utf8') === s.normalize('NFC'), `pieces of ${JSON.stringify(s)}`);
  }
});
await t('tokenize: invalid UTF-8 pieces come back as byte arrays', async () => {
  const p = await post('/tokenize', { content: 'wörld 😀', with_pieces: true });
  const arrays = p.json.tokens.filter((x) => Array.isArray(x.piece));
  check(arrays.length > 0, `no byte-array piece: ${p.text}`);
  // a lone continuation byte detokenizes to U+FFFD, not to broken JSON
  const d = await post('/detokenize', { tokens: [arrays[0].id] });
  check(d.status === 200 && d.json.prompt.includes('\ufffd'), d.text);
});
await t('tokenize: special tokens parsed by default, plain with parse_special false', async () => {
  const a = await post('/tokenize', { content: '<|im_start|>' });
  const b = await post('/tokenize', { content: '<|im_start|>', parse_special: false });
  check(a.json.tokens.length === 1 && b.json.tokens.length > 1, `${a.text} / ${b.text}`);
});
await t('tokenize (vLLM) with messages equals the chat render', async () => {
  const messages = [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi there' }];
  const a = await post('/tokenize', { messages });
  const r = await post('/v1/chat/completions/render', { messages });
  check(a.status === 200 && r.status === 200, `${a.text} ${r.text}`);
  check(eq(a.json.tokens, r.json.token_ids), 'tokenize(messages) != render');
  const g = await post('/tokenize', { messages, add_generation_prompt: false });
  check(g.json.count < a.json.count, 'add_generation_prompt: false did not drop the generation prompt');
});
await t('tokenize/detokenize errors: 400 naming the field and the index', async () => {
  let m = await bad('/detokenize', { tokens: [1, 2, 99999999] }, 'tokens');
  check(m.includes('tokens[2]'), m);
  m = await bad('/detokenize', { tokens: [1, -1] }, 'tokens');
  check(m.includes('tokens[1]'), m);
  await bad('/detokenize', { tokens: 'x' }, 'tokens');
  await bad('/tokenize', { content: 5 }, 'content');
  await bad('/tokenize', { prompt: 'x', return_token_strs: 'yes' }, 'return_token_strs');
  await bad('/tokenize', {}, 'prompt');
  const r = await post('/tokenize', { model: 'nope', prompt: 'x' });
  check(r.status === 404 && r.json.error.code === 'model_not_found', r.text);
});

// --- render == a real run ---
await t('chat render token_ids == the completion that runs (usage.prompt_tokens)', async () => {
  const body = { model: MODEL, messages: [{ role: 'user', content: 'render me' }], max_tokens: 2 };
  const r = await post('/v1/chat/completions/render', body);
  check(r.status === 200 && Array.isArray(r.json.token_ids), r.text);
  const c = await client.chat.completions.create(body);
  check(c.usage.prompt_tokens === r.json.token_ids.length, `${c.usage.prompt_tokens} vs ${r.json.token_ids.length}`);
  const d = await post('/detokenize', { tokens: r.json.token_ids });
  check(d.json.prompt === r.json.prompt, 'render prompt text');
  // vLLM's render: "features" is null for a prompt without images
  check('features' in r.json && r.json.features === null, `features ${JSON.stringify(r.json.features)}`);
});
await t('completions render == what runs: rerunning its token_ids gives the same answer', async () => {
  const body = { model: MODEL, prompt: ['first prompt', 'second'], suffix: 'tail', max_tokens: 4, temperature: 0 };
  const r = await post('/v1/completions/render', body);
  check(r.status === 200 && Array.isArray(r.json) && r.json.length === 2, r.text);
  check(r.json.every((x) => 'features' in x && x.features === null), 'features of text prompts');
  const c = await client.completions.create(body);
  check(c.usage.prompt_tokens === r.json[0].token_ids.length + r.json[1].token_ids.length, 'prompt_tokens');
  // the rendered ids, sent as ids without the suffix, run exactly the same prompt
  const again = await client.completions.create({ model: MODEL, prompt: r.json.map((x) => x.token_ids), max_tokens: 4, temperature: 0 });
  check(eq(c.choices.map((x) => x.text), again.choices.map((x) => x.text)), 'answers differ');
  // echo shows the text the ids stand for
  const e = await client.completions.create({ model: MODEL, prompt: [r.json[0].token_ids], max_tokens: 1, echo: true });
  check(e.choices[0].text.startsWith(r.json[0].prompt), 'echo of ids');
});
await t('render errors as the completion: same 400s', async () => {
  await bad('/v1/completions/render', { prompt: 'x', logit_bias: { 99999999: 1 } }, 'logit_bias');
  await bad('/v1/chat/completions/render', { messages: [] }, 'messages');
  await bad('/v1/completions/render', { prompt: [1, 99999999] }, 'prompt');
});

// --- several prompts, echo, suffix, best_of ---
await t('several prompts: choices in order, n each, index = prompt*n + choice, usage summed', async () => {
  const prompts = ['aa', 'bbbb bbbb', 'c'];
  const c = await client.completions.create({ model: MODEL, prompt: prompts, n: 2, max_tokens: 3, echo: true, seed: 1 });
  check(c.choices.length === 6, `${c.choices.length} choices`);
  c.choices.forEach((ch, i) => {
    check(ch.index === i, `index ${ch.index} at ${i}`);
    check(ch.text.startsWith(prompts[Math.floor(i / 2)]), `choice ${i} echoes ${JSON.stringify(ch.text)}`);
  });
  let want = 0;
  for (const p of prompts) want += (await post('/tokenize', { prompt: p })).json.count;
  check(c.usage.prompt_tokens === want, `prompt_tokens ${c.usage.prompt_tokens}, want ${want}`);
  check(c.usage.completion_tokens === 18, `completion_tokens ${c.usage.completion_tokens}`);
  // each prompt's choices are what that prompt alone gives (same seed, same choice index)
  const alone = await client.completions.create({ model: MODEL, prompt: 'aa', n: 2, max_tokens: 3, echo: true, seed: 1 });
  check(eq(alone.choices.map((x) => x.text), c.choices.slice(0, 2).map((x) => x.text)), 'the first prompt alone differs');
});
await t('several prompts of token ids, streamed: every index 0..5 ends once', async () => {
  const s = await client.completions.create({ model: MODEL, prompt: [[97, 98], [99], [100, 101, 102]], n: 2, max_tokens: 2, stream: true, echo: true });
  const text = {}, ends = {};
  for await (const ch of s) for (const c of ch.choices) {
    text[c.index] = (text[c.index] || '') + c.text;
    if (c.finish_reason) ends[c.index] = (ends[c.index] || 0) + 1;
  }
  check(eq(Object.keys(ends).map(Number).sort(), [0, 1, 2, 3, 4, 5]) && Object.values(ends).every((x) => x === 1), JSON.stringify(ends));
  check(text[0].startsWith('ab') && text[3].startsWith('c') && text[5].startsWith('def'), JSON.stringify(text));
});
await t('echo: the prompt then the completion, streamed and not', async () => {
  const a = await client.completions.create({ model: MODEL, prompt: 'echo this', max_tokens: 3, temperature: 0 });
  const b = await client.completions.create({ model: MODEL, prompt: 'echo this', max_tokens: 3, temperature: 0, echo: true });
  check(b.choices[0].text === 'echo this' + a.choices[0].text, JSON.stringify(b.choices[0].text));
  const s = await client.completions.create({ model: MODEL, prompt: 'echo this', max_tokens: 3, temperature: 0, echo: true, stream: true });
  let all = '';
  for await (const ch of s) all += ch.choices[0]?.text ?? '';
  check(all === b.choices[0].text, JSON.stringify(all));
  await bad('/v1/completions', { prompt: 'x', echo: true, logprobs: 1 }, 'echo');
});
await t('suffix: the fill-in-the-middle prompt (prefix, suffix, middle tokens)', async () => {
  const body = { model: MODEL, prompt: 'def f(', suffix: '\n    return x', max_tokens: 2 };
  const r = await post('/v1/completions/render', body);
  const id = async (s) => (await post('/tokenize', { content: s })).json.tokens[0];
  const [pre, suf, mid] = [await id('<|fim_prefix|>'), await id('<|fim_suffix|>'), await id('<|fim_middle|>')];
  const ids = r.json[0].token_ids;
  check(ids[0] === pre && ids.includes(suf) && ids[ids.length - 1] === mid, JSON.stringify(ids));
  const c = await client.completions.create(body);
  check(c.usage.prompt_tokens === ids.length && c.choices.length === 1, JSON.stringify(c.usage));
  await bad('/v1/completions', { prompt: 'x', suffix: 5 }, 'suffix');
});
await t('best_of: n of best_of candidates, the most likely first; streaming refused', async () => {
  const c = await client.completions.create({ model: MODEL, prompt: 'best', best_of: 4, n: 2, max_tokens: 4, seed: 3, logprobs: 0 });
  check(c.choices.length === 2 && c.choices[0].index === 0 && c.choices[1].index === 1, JSON.stringify(c.choices));
  const sum = (ch) => ch.logprobs.token_logprobs.reduce((a, b) => a + b, 0);
  check(sum(c.choices[0]) >= sum(c.choices[1]), 'not ordered by cumulative logprob');
  // the best of the 4 candidates: none of the n = 4 answers of the same seed is more likely
  const all = await client.completions.create({ model: MODEL, prompt: 'best', n: 4, max_tokens: 4, seed: 3, logprobs: 0 });
  const best = Math.max(...all.choices.map(sum));
  check(Math.abs(sum(c.choices[0]) - best) < 1e-4, `best ${sum(c.choices[0])} vs ${best}`);
  check(c.usage.completion_tokens === 16, `usage counts every candidate: ${c.usage.completion_tokens}`);
  await bad('/v1/completions', { prompt: 'x', best_of: 2, stream: true }, 'best_of');
  await bad('/v1/completions', { prompt: 'x', best_of: 1, n: 2 }, 'best_of');
});

// --- logit_bias ---
const id7 = async () => (await post('/tokenize', { content: 'Z' })).json.tokens[0];
for (const stream of [false, true]) {
  await t(`logit_bias forces and bans on chat and completions${stream ? ' (streamed)' : ''}`, async () => {
    const z = await id7();
    const force = { [String(z)]: 100 };
    const c = await post('/v1/completions', { prompt: 'x', max_tokens: 5, logit_bias: force, stream, ignore_eos: true });
    const text = stream ? parseSSE(c.text).filter((e) => e.data.startsWith('{')).map((e) => JSON.parse(e.data).choices[0]?.text ?? '').join('') : c.json.choices[0].text;
    check(text === 'ZZZZZ', `completions forced: ${JSON.stringify(text)}`);
    const h = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 4, logit_bias: force, stream, ignore_eos: true, reasoning_effort: 'none' });
    check(h.status === 200, h.text);
    const chat = stream ? parseSSE(h.text).filter((e) => e.data.startsWith('{')).map((e) => { const d = JSON.parse(e.data).choices[0]?.delta ?? {}; return (d.content ?? '') + (d.reasoning_content ?? ''); }).join('') : (h.json.choices[0].message.content ?? '') + (h.json.choices[0].message.reasoning_content ?? '');
    check(chat.replace(/\s/g, '') === 'ZZZZ', `chat forced: ${JSON.stringify(chat)}`);
    // ban the greedy answer's first token: the answer changes and never holds it
    const plain = await post('/v1/completions', { prompt: [[97, 98, 99]], max_tokens: 1, temperature: 0, logprobs: 0 });
    const first = (await post('/tokenize', { content: plain.json.choices[0].text })).json.tokens[0];
    const banned = await post('/v1/completions', { prompt: [[97, 98, 99]], max_tokens: 8, temperature: 0, logit_bias: { [String(first)]: -100 }, stream });
    check(banned.status === 200, banned.text);
    const ids = await post('/tokenize', { content: stream ? parseSSE(banned.text).filter((e) => e.data.startsWith('{')).map((e) => JSON.parse(e.data).choices[0]?.text ?? '').join('') : banned.json.choices[0].text });
    check(!ids.json.tokens.includes(first), `banned token ${first} drawn`);
  });
}
await t('logit_bias errors: 400 naming the key', async () => {
  let m = await bad('/v1/completions', { prompt: 'x', logit_bias: { 99999999: 5 } }, 'logit_bias');
  check(m.includes('99999999'), m);
  m = await bad('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], logit_bias: { abc: 5 } }, 'logit_bias');
  check(m.includes('abc'), m);
  m = await bad('/v1/completions', { prompt: 'x', logit_bias: { 5: 101 } }, 'logit_bias');
  check(m.includes('5'), m);
  await bad('/v1/completions', { prompt: 'x', logit_bias: Object.fromEntries([...Array(301)].map((_, i) => [String(i), 1])) }, 'logit_bias');
  const ok = await post('/v1/completions', { prompt: 'x', max_tokens: 1, logit_bias: Object.fromEntries([...Array(300)].map((_, i) => [String(i), -1])) });
  check(ok.status === 200, `300 entries: ${ok.text}`);
});
console.log(`RESULT passed=${passed} failed=${failed}`);
