// images.mjs - images in, end to end, against servers started by tests/cli/test_images.sh:
//   DS_URL       a server with a vision tower (--state-checkpoint-interval 64, --max-image-pixels,
//                --max-image-mb, --limit-mm-per-prompt, --allowed-local-media-path, --allowed-media-domains
//                as the script gives them)
//   DS_URL_TEXT  the same model without its tower (--no-mmproj)
//   DS_IMG       the folder of images the script made (PIL), DS_MEDIA the allowed local folder,
//   DS_HTTP      a local HTTP server of DS_IMG (an allowed domain), DS_OUTSIDE a file outside DS_MEDIA.
// The official openai client (chat completions, Responses) and raw HTTP (Messages, errors). The model is
// random: the checks are on token counts (one per merged 2x2 patch group, (H/32) x (W/32) for the
// sizes used here, which smart resize keeps), the prefix cache and the errors.
// Prints ok/FAIL lines and "RESULT passed=N failed=M".
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';

const URL_ = process.env.DS_URL, URL_TEXT = process.env.DS_URL_TEXT, MODEL = process.env.DS_MODEL || 'tiny';
const IMG = process.env.DS_IMG, MEDIA = process.env.DS_MEDIA, HTTP = process.env.DS_HTTP, OUTSIDE = process.env.DS_OUTSIDE;
const client = new OpenAI({ baseURL: `${URL_}/v1`, apiKey: 'none', maxRetries: 0 });
let passed = 0, failed = 0;
function check(cond, msg) { if (!cond) throw new Error(msg); }
async function t(name, fn) {
  try { await fn(); console.log(`ok ${name}`); passed++; } catch (e) { console.log(`FAIL ${name}: ${e.message}`); failed++; }
}
async function post(path_, body, base = URL_) {
  const r = await fetch(`${base}${path_}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* a stream */ }
  return { status: r.status, text, json };
}
const file = (name) => fs.readFileSync(path.join(IMG, name));
const dataUrl = (name, mime = name.endsWith('.jpg') ? 'image/jpeg' : 'image/png') =>
  `data:${mime};base64,${file(name).toString('base64')}`;
const img = (url) => ({ type: 'image_url', image_url: { url } });
const user = (...parts) => ({ role: 'user', content: parts.map((p) => (typeof p === 'string' ? { type: 'text', text: p } : p)) });
const tokensOf = (w, h) => (w / 32) * (h / 32);
const NO_THINK = { chat_template_kwargs: { enable_thinking: false } };

const padId = (await post('/tokenize', { content: '<|image_pad|>' })).json?.tokens?.[0];
async function render(messages) {
  const r = await post('/v1/chat/completions/render', { model: MODEL, messages, ...NO_THINK });
  check(r.status === 200, `render ${r.status}: ${r.text}`);
  return r.json.token_ids;
}
const pads = (ids) => ids.filter((x) => x === padId).length;
async function chat(messages, extra = {}) {
  return client.chat.completions.create({ model: MODEL, messages, max_tokens: 2, temperature: 0, ...NO_THINK, ...extra });
}

await t('the image pad token is in the vocabulary', async () => {
  check(Number.isInteger(padId), `tokenize <|image_pad|>: ${padId}`);
});

await t('/v1/models says the model takes images (capabilities, input_modalities)', async () => {
  const r = await fetch(`${URL_}/v1/models`).then((x) => x.json());
  const m = r.data[0];
  check(m.capabilities.includes('multimodal'), JSON.stringify(m));
  check(m.architecture.input_modalities.includes('image') && m.architecture.input_modalities.includes('text'), JSON.stringify(m));
  const one = await fetch(`${URL_}/v1/models/${MODEL}`).then((x) => x.json());
  check(one.capabilities.includes('multimodal'), JSON.stringify(one));
});

await t('without a tower: /v1/models says text only, an image gets 400 naming the part', async () => {
  const r = await fetch(`${URL_TEXT}/v1/models`).then((x) => x.json());
  check(!r.data[0].capabilities.includes('multimodal') && !r.data[0].architecture.input_modalities.includes('image'), JSON.stringify(r));
  const e = await post('/v1/chat/completions', { model: MODEL, max_tokens: 2, messages: [user('what is it?', img(dataUrl('a256.png')))] }, URL_TEXT);
  check(e.status === 400 && e.json.error.param === 'messages[0].content[1].image_url', `${e.status} ${e.text}`);
  check(/no vision tower/.test(e.json.error.message) && /--mmproj/.test(e.json.error.message), e.json.error.message);
});

// base64 images of several sizes, PNG and JPEG: prompt_tokens = the rendered ids, which hold one pad per token
for (const [name, w, h] of [['a256.png', 256, 256], ['b320x256.png', 320, 256], ['c480x352.jpg', 480, 352], ['d256x512.jpg', 256, 512]]) {
  await t(`base64 ${name}: ${tokensOf(w, h)} image tokens, counted in prompt_tokens`, async () => {
    const messages = [user('Describe this.', img(dataUrl(name)))];
    const ids = await render(messages);
    check(pads(ids) === tokensOf(w, h), `${pads(ids)} pads, want ${tokensOf(w, h)}`);
    const text = await render([user('Describe this.')]);
    // the image adds its tokens and <|vision_start|>, <|vision_end|>
    check(ids.length === text.length + tokensOf(w, h) + 2, `render ${ids.length} vs text ${text.length}`);
    const r = await chat(messages);
    check(r.usage.prompt_tokens === ids.length, `prompt_tokens ${r.usage.prompt_tokens}, render ${ids.length}`);
    check(r.choices[0].finish_reason, JSON.stringify(r));
  });
}

await t('two images in one message (and the string form of image_url)', async () => {
  const messages = [user('Compare', img(dataUrl('a256.png')), 'with', { type: 'image_url', image_url: dataUrl('b320x256.png') })];
  const ids = await render(messages);
  check(pads(ids) === tokensOf(256, 256) + tokensOf(320, 256), `${pads(ids)} pads`);
  const r = await chat(messages);
  check(r.usage.prompt_tokens === ids.length, `prompt_tokens ${r.usage.prompt_tokens} vs ${ids.length}`);
});

// vLLM's render features, from which a router keys the blocks holding image tokens: per image its id
// (the SHA-256 hex our KV events put in those blocks' extra_keys) and where its pad tokens are
await t('render features: mm_hashes and mm_placeholders of each image, null without images', async () => {
  const post_ = async (messages) => {
    const r = await post('/v1/chat/completions/render', { model: MODEL, messages, ...NO_THINK });
    check(r.status === 200, `render ${r.status}: ${r.text}`);
    return r.json;
  };
  const two = await post_([user('Compare', img(dataUrl('a256.png')), 'with', img(dataUrl('b320x256.png')))]);
  const f = two.features;
  check(f && eq(Object.keys(f.mm_hashes), ['image']) && eq(Object.keys(f.mm_placeholders), ['image']), `features ${JSON.stringify(f)}`);
  const [ha, hb] = f.mm_hashes.image, places = f.mm_placeholders.image;
  check(f.mm_hashes.image.length === 2 && places.length === 2, JSON.stringify(f));
  check(/^[0-9a-f]{64}$/.test(ha) && /^[0-9a-f]{64}$/.test(hb) && ha !== hb, `ids ${ha} ${hb}`);
  const ids = two.token_ids;
  [tokensOf(256, 256), tokensOf(320, 256)].forEach((n, k) => {
    const { offset, length } = places[k];
    check(eq(Object.keys(places[k]).sort(), ['length', 'offset']), JSON.stringify(places[k]));
    check(length === n && ids.slice(offset, offset + length).every((x) => x === padId), `image ${k}: ${JSON.stringify(places[k])}`);
    check(ids[offset - 1] !== padId && ids[offset + length] !== padId, `image ${k}: the range is not all its pads`);
  });
  check(places[0].offset === ids.indexOf(padId) && places[1].offset > places[0].offset + places[0].length, JSON.stringify(places));
  // the same picture: the same id, wherever it is; another picture of the same size: another id
  const again = await post_([user(img(dataUrl('a256.png')), 'only this one')]);
  check(eq(again.features.mm_hashes.image, [ha]) && again.features.mm_placeholders.image[0].offset === again.token_ids.indexOf(padId),
    JSON.stringify(again.features));
  const red = await post_([user(img(dataUrl('e256_red.png')), 'x')]), blue = await post_([user(img(dataUrl('e256_blue.png')), 'x')]);
  check(red.features.mm_hashes.image[0] !== blue.features.mm_hashes.image[0], 'red and blue have one id');
  const text = await post_([user('no picture')]);
  check('features' in text && text.features === null, JSON.stringify(text.features));
});

await t('n = 2 with an image: each choice runs with it (its own copy of the patches)', async () => {
  const messages = [user(img(dataUrl('b320x256.png')), 'two answers')];
  const ids = await render(messages);
  const r = await chat(messages, { n: 2, temperature: 1, seed: 5 });
  check(r.choices.length === 2 && r.choices.every((c) => c.finish_reason), JSON.stringify(r.choices));
  check(r.usage.prompt_tokens === ids.length, `prompt_tokens ${r.usage.prompt_tokens} vs ${ids.length}`);
});
await t('streamed, with include_usage', async () => {
  const messages = [user(img(dataUrl('a256.png')), 'hi')];
  const ids = await render(messages);
  const s = await chat(messages, { stream: true, stream_options: { include_usage: true } });
  let usage = null;
  for await (const c of s) if (c.usage) usage = c.usage;
  check(usage && usage.prompt_tokens === ids.length, JSON.stringify(usage));
});

// the prefix cache: the same picture hits, another picture with the same text does not
const long = 'Please look at the picture carefully and describe every detail you can see in it. '.repeat(6);
await t('the same image again: cached_tokens cover it', async () => {
  const messages = [user(img(dataUrl('c480x352.jpg')), long)];
  const ids = await render(messages);
  const end = ids.lastIndexOf(padId) + 1;
  await chat(messages);
  const r = await chat(messages);
  const cached = r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  check(cached >= end, `cached ${cached}, the image ends at ${end}`);
});
await t('an image in an earlier turn: the next turn reports cached_tokens covering it', async () => {
  const first = [user(img(dataUrl('d256x512.jpg')), long)];
  const a = await chat(first, { max_tokens: 4 });
  const second = [...first, { role: 'assistant', content: a.choices[0].message.content || 'ok' }, user('And the colours?')];
  const ids = await render(second);
  const end = ids.lastIndexOf(padId) + 1;
  const b = await chat(second);
  const cached = b.usage.prompt_tokens_details?.cached_tokens ?? 0;
  check(cached >= end, `cached ${cached}, the image ends at ${end} (prompt ${ids.length})`);
});
await t('same text, another image of the same size: no cache hit over the image', async () => {
  const a = [user('Which one?', img(dataUrl('e256_red.png')), long)];
  const b = [user('Which one?', img(dataUrl('e256_blue.png')), long)];
  const ids = await render(b);
  const first = ids.indexOf(padId);
  check(first > 0 && eq(ids, await render(a)), 'both render the same ids');
  await chat(a);
  const r = await chat(b);
  const cached = r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  check(cached <= first, `cached ${cached}, but the image starts at ${first}`);
});

// every bad image: 400 naming the part and saying why
const png = file('a256.png');
const cases = [
  ['bad base64', 'data:image/png;base64,iVBO*w0K', /base64/],
  ['not an image', `data:image/png;base64,${Buffer.from('just some text, not a picture at all').toString('base64')}`, /not a JPEG, PNG, WebP or GIF/],
  ['truncated', `data:image/png;base64,${png.subarray(0, Math.floor(png.length / 2)).toString('base64')}`, /truncated/],
  ['truncated JPEG', `data:image/jpeg;base64,${file('c480x352.jpg').subarray(0, 2000).toString('base64')}`, /JPEG/],
  ['zero size', dataUrl('zero.gif', 'image/gif'), /zero size/],
  ['too many pixels', dataUrl('big1100x1000.png'), /pixel/],
  ['too large', dataUrl('noise.png'), /larger than|limit/],
  ['not an image media type', `data:text/plain;base64,${png.toString('base64')}`, /not an image type/],
  ['scheme not allowed', 'ftp://example.com/x.png', /scheme/],
  ['http refused (host not allowed)', 'http://example.com/x.png', /allowed-media-domains/],
  ['file outside the allowed path', `file://${OUTSIDE}`, /outside --allowed-local-media-path/],
  ['file escaping through ..', `file://${MEDIA}/../outside.png`, /outside --allowed-local-media-path/],
  ['file escaping through a symbolic link', `file://${MEDIA}/link.png`, /outside --allowed-local-media-path/],
  ['fetch failed', `${HTTP}/missing.png`, /fetch/],
];
for (const [name, url, why] of cases) {
  await t(`bad image: ${name} -> 400 naming messages[0].content[1].image_url`, async () => {
    const r = await post('/v1/chat/completions', { model: MODEL, max_tokens: 2, messages: [user('x', img(url))] });
    check(r.status === 400, `${r.status} ${r.text}`);
    check(r.json.error.param === 'messages[0].content[1].image_url', `param ${r.json.error.param}`);
    check(r.json.error.type === 'invalid_request_error', r.text);
    check(why.test(r.json.error.message), r.json.error.message);
  });
}
await t('more images than --limit-mm-per-prompt: 400', async () => {
  const many = Array.from({ length: 5 }, () => img(dataUrl('a256.png')));
  const r = await post('/v1/chat/completions', { model: MODEL, max_tokens: 2, messages: [user('x', ...many)] });
  check(r.status === 400 && /limit-mm-per-prompt/.test(r.json.error.message), `${r.status} ${r.text}`);
  check(r.json.error.param === 'messages[0].content[5].image_url', r.json.error.param);
});
await t('an image in an assistant message: 400', async () => {
  const r = await post('/v1/chat/completions', { model: MODEL, max_tokens: 2, messages: [user('x'), { role: 'assistant', content: [img(dataUrl('a256.png'))] }, user('y')] });
  check(r.status === 400 && r.json.error.param === 'messages[1].content[0].image_url', `${r.status} ${r.text}`);
});

await t('file:// under --allowed-local-media-path: the same tokens as base64', async () => {
  const viaFile = await render([user('x', img(`file://${MEDIA}/a256.png`))]);
  const viaData = await render([user('x', img(dataUrl('a256.png')))]);
  check(eq(viaFile, viaData), 'ids differ');
  const r = await chat([user('x', img(`file://${MEDIA}/a256.png`))]);
  check(r.usage.prompt_tokens === viaData.length, `${r.usage.prompt_tokens}`);
});
await t('http from an allowed domain: the same tokens as base64', async () => {
  const r = await chat([user('x', img(`${HTTP}/a256.png`))]);
  const viaData = await render([user('x', img(dataUrl('a256.png')))]);
  check(r.usage.prompt_tokens === viaData.length, `${r.usage.prompt_tokens} vs ${viaData.length}`);
});

// the other APIs
await t('Responses API: input_image (openai client) counts the image in input_tokens', async () => {
  const r = await client.responses.create({ model: MODEL, max_output_tokens: 2, reasoning: { effort: 'none' },
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Describe this.' }, { type: 'input_image', image_url: dataUrl('a256.png'), detail: 'auto' }] }] });
  const ids = await render([user('Describe this.', img(dataUrl('a256.png')))]);
  check(r.usage.input_tokens === ids.length, `input_tokens ${r.usage.input_tokens} vs ${ids.length}`);
});
await t('Responses API: a bad image names input[0].content[1].image_url', async () => {
  const r = await post('/v1/responses', { model: MODEL, max_output_tokens: 2, input: [{ role: 'user', content: [{ type: 'input_text', text: 'x' }, { type: 'input_image', image_url: 'data:image/png;base64,iVBO*' }] }] });
  check(r.status === 400 && r.json.error.param === 'input[0].content[1].image_url', `${r.status} ${r.text}`);
});
await t('Messages API: base64 image block, count_tokens equals input_tokens', async () => {
  const body = { model: MODEL, max_tokens: 2, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Describe this.' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: file('a256.png').toString('base64') } }] }] };
  const c = await post('/v1/messages/count_tokens', body);
  check(c.status === 200, `${c.status} ${c.text}`);
  const m = await post('/v1/messages', body);
  check(m.status === 200, `${m.status} ${m.text}`);
  check(m.json.usage.input_tokens + (m.json.usage.cache_read_input_tokens || 0) === c.json.input_tokens, `${m.text} vs ${c.text}`);
  const ids = await render([user('Describe this.', img(dataUrl('a256.png')))]);
  check(c.json.input_tokens === ids.length, `count ${c.json.input_tokens} vs render ${ids.length}`);
});
await t('Messages API: a bad image names messages[0].content[0].source', async () => {
  const r = await post('/v1/messages', { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBO*' } }] }] });
  check(r.status === 400 && /messages\[0\]\.content\[0\]\.source/.test(r.json.error.message), `${r.status} ${r.text}`);
});

function eq(a, b) { return JSON.stringify(a) === JSON.stringify(b); }
console.log(`RESULT passed=${passed} failed=${failed}`);
