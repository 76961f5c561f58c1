// vocab_coverage.js - how much of real text a vocabulary's first N token ids
// cover, with a real tokenizer (@lenml/tokenizers, a JavaScript port of
// Hugging Face's). MTP drafts are drawn over the first N ids only
// (--spec-vocab N): in a BPE vocabulary ordered by merge rank those are the
// most frequent tokens, and the share of a text's tokens whose id is below N
// bounds the share of positions where a draft over the subset can be kept.
// A measurement, not a test.
//
//   node vocab_coverage.js TOKENIZER_JSON NAME=FILE[,FILE...] [NAME=...] ...
//
// Prints, per named group of files and over all of them, the number of tokens
// and the share with id < N for N = 4k .. 128k (Markdown table).
'use strict';
const fs = require('fs');
const zlib = require('zlib');
const {TokenizerLoader} = require('@lenml/tokenizers');

const SIZES = [4096, 8192, 16384, 32768, 65536, 131072];

function readText(file) {
    const buf = fs.readFileSync(file);
    return (file.endsWith('.gz') ? zlib.gunzipSync(buf) : buf).toString('utf8');
}

function main() {
    const [tokFile, ...groups] = process.argv.slice(2);
    if (!tokFile || groups.length === 0) {
        console.error('usage: node vocab_coverage.js TOKENIZER_JSON NAME=FILE[,FILE...] ...');
        process.exit(2);
    }
    const json = JSON.parse(fs.readFileSync(tokFile, 'utf8'));
    const tok = TokenizerLoader.fromPreTrained({tokenizerJSON: json, tokenizerConfig: {tokenizer_class: 'Qwen2Tokenizer'}});
    const firstAdded = Math.min(...json.added_tokens.map((t) => t.id));
    console.log(`tokenizer: ${Object.keys(json.model.vocab).length} regular tokens (ids 0..${firstAdded - 1}), ` +
                `${json.added_tokens.length} added from id ${firstAdded}`);
    const header = '| text | tokens | ' + SIZES.map((n) => `< ${n / 1024}k`).join(' | ') + ' |';
    console.log(header);
    console.log('|' + '---|'.repeat(SIZES.length + 2));
    const total = {n: 0, below: SIZES.map(() => 0)};
    for (const g of groups) {
        const eq = g.indexOf('=');
        const name = g.slice(0, eq), files = g.slice(eq + 1).split(',').filter((f) => f);
        const acc = {n: 0, below: SIZES.map(() => 0)};
        for (const f of files) {
            // in pieces: the port is quadratic on very long inputs
            const text = readText(f);
            for (let i = 0; i < text.length; i += 4000) {
                const ids = tok.encode(text.slice(i, i + 4000), {add_special_tokens: false});
                acc.n += ids.length;
                for (const id of ids) SIZES.forEach((n, k) => { if (id < n) acc.below[k]++; });
            }
        }
        total.n += acc.n;
        acc.below.forEach((b, k) => { total.below[k] += b; });
        console.log(`| ${name} | ${acc.n} | ` + acc.below.map((b) => (100 * b / acc.n).toFixed(1) + '%').join(' | ') + ' |');
    }
    console.log(`| all | ${total.n} | ` + total.below.map((b) => (100 * b / total.n).toFixed(1) + '%').join(' | ') + ' |');
}

main();
