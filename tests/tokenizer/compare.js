// compare.js - encodes the strings of gen_strings.js with deltaserve (one
// `deltaserve tokenize --jsonl-in` run) and with @lenml/tokenizers, a
// JavaScript port of Hugging Face's tokenizers, and checks per string that
//   - the ids are identical;
//   - decode(encode(s)) is NFC(s) (NFC taken between added tokens, as the
//     tokenizer normalizes; see sectionNfc);
//   - with --split, deltaserve's pre-tokenizer pieces equal the JavaScript
//     regex's (the direct check of the Qwen2/3 and Qwen3.5 patterns).
// Prints "ok NAME" / "FAIL NAME: ..." per string and "RESULT passed=N failed=M".
//
// usage: node compare.js --bin DELTASERVE --model PATH --ref DIR_OR_TOKENIZER_JSON [--name LABEL] [--split]
//   --model   what deltaserve loads (tokenizer.json, GGUF or HF directory)
//   --ref     tokenizer.json (+ tokenizer_config.json beside it) for the reference
//
// Two things deltaserve does as Hugging Face's Rust tokenizers (Oniguruma
// regexes) does, where JavaScript regexes differ, so the reference is given
// the Oniguruma meaning (patchPattern):
//   - \s is the Unicode White_Space property; JavaScript's \s adds U+FEFF
//     and lacks U+0085;
//   - (?i:'s|...) folds case by Unicode, so 's also matches 'ſ (U+017F);
//     @lenml/tokenizers rewrites the group to [sS] only.
// Bytes that are not UTF-8 reach the reference as Node's Buffer.toString
// decodes them (one U+FFFD per maximal ill-formed subpart), the rule
// deltaserve applies.
'use strict';

const fs = require('fs');
const path = require('path');
const os = require('os');
const {execFileSync} = require('child_process');
const {TokenizerLoader} = require('@lenml/tokenizers');
const {generate} = require('./gen_strings');

function args() {
    const a = {name: 'tok', split: false};
    for (let i = 2; i < process.argv.length; i++) {
        const k = process.argv[i];
        if (k === '--split') a.split = true;
        else a[k.replace(/^--/, '')] = process.argv[++i];
    }
    for (const k of ['bin', 'model', 'ref']) if (!a[k]) throw new Error(`--${k} is required`);
    return a;
}

const CONTRACTIONS_GROUP = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
const CONTRACTIONS_JS = "(?:'(?:[sS\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))";

function patchPattern(p) {
    if (!p.includes(CONTRACTIONS_GROUP)) throw new Error('unexpected pre-tokenizer pattern: ' + p);
    return p.split(CONTRACTIONS_GROUP).join(CONTRACTIONS_JS).replace(/\\\\|\\s|\\S/g,
        (m) => (m === '\\s' ? '\\p{White_Space}' : m === '\\S' ? '\\P{White_Space}' : m));
}

function loadReference(ref) {
    const file = fs.statSync(ref).isDirectory() ? path.join(ref, 'tokenizer.json') : ref;
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    const cfgFile = path.join(path.dirname(file), 'tokenizer_config.json');
    const config = fs.existsSync(cfgFile) ? JSON.parse(fs.readFileSync(cfgFile, 'utf8')) : {tokenizer_class: 'Qwen2Tokenizer'};
    let pattern = null;
    for (const p of json.pre_tokenizer.pretokenizers || [json.pre_tokenizer]) {
        if (p.type === 'Split') {
            pattern = patchPattern(p.pattern.Regex);
            p.pattern = {Regex: pattern};
        }
    }
    const tok = TokenizerLoader.fromPreTrained({tokenizerJSON: json, tokenizerConfig: config});
    const added = json.added_tokens.map((t) => t.content).sort((a, b) => b.length - a.length);
    return {tok, regex: new RegExp(pattern, 'gu'), added};
}

// The text between added tokens (leftmost-longest, as the tokenizers match
// them) and the tokens themselves, in order.
function sections(text, added) {
    const out = [];
    let start = 0;
    for (let i = 0; i < text.length;) {
        const t = added.find((a) => text.startsWith(a, i));
        if (!t) {
            i++;
            continue;
        }
        if (i > start) out.push({text: text.slice(start, i)});
        out.push({text: t, added: true});
        i += t.length;
        start = i;
    }
    if (start < text.length) out.push({text: text.slice(start)});
    return out;
}

function sectionNfc(text, added) {
    return sections(text, added).map((s) => (s.added ? s.text : s.text.normalize('NFC'))).join('');
}

function expectedSplit(text, ref) {
    const pieces = [];
    for (const s of sections(text, ref.added)) {
        if (s.added) {
            pieces.push(s.text);
            continue;
        }
        const norm = s.text.normalize('NFC');
        let prev = 0;
        for (const m of norm.matchAll(ref.regex)) {
            if (m.index > prev) pieces.push(norm.slice(prev, m.index));
            if (m[0].length) pieces.push(m[0]);
            prev = m.index + m[0].length;
        }
        if (prev < norm.length) pieces.push(norm.slice(prev));
    }
    return pieces.map((p) => Buffer.from(p).toString('hex'));
}

function show(a, n = 12) {
    return JSON.stringify(a.length > n ? a.slice(0, n).concat(['...']) : a);
}

function firstDiff(a, b) {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
}

function main() {
    const a = args();
    const cases = generate();
    const tmp = fs.mkdtempSync(path.join(process.env.DS_TMP || os.tmpdir(), 'tokcmp-'));
    const input = path.join(tmp, 'in.jsonl');
    fs.writeFileSync(input, cases.map((c) => JSON.stringify({hex: (c.bytes || Buffer.from(c.text)).toString('hex')})).join('\n') + '\n');
    const cmd = ['tokenize', '-m', a.model, '--jsonl-in', input].concat(a.split ? ['--split'] : []);
    const t0 = Date.now();
    const out = execFileSync(a.bin, cmd, {maxBuffer: 1 << 30, encoding: 'utf8'}).split('\n').filter((l) => l);
    const ms = Date.now() - t0;
    fs.rmSync(tmp, {recursive: true, force: true});
    const ref = loadReference(a.ref);
    let passed = 0, failed = 0, nfcBoundary = 0;
    const counts = {};
    cases.forEach((c, i) => {
        const name = `${a.name}/${c.cls}/${i}`;
        const text = c.bytes ? c.bytes.toString('utf8') : c.text;
        const got = out[i] ? JSON.parse(out[i]) : {error: 'no output line'};
        const problems = [];
        if (got.error) problems.push('deltaserve: ' + got.error);
        else {
            const want = Array.from(ref.tok.encode(text));
            if (want.length !== got.ids.length || firstDiff(want, got.ids) < want.length) {
                const d = firstDiff(want, got.ids);
                problems.push(`ids differ at ${d}: deltaserve ${show(got.ids.slice(d))} reference ${show(want.slice(d))}`);
            }
            const nfc = sectionNfc(text, ref.added);
            if (nfc !== text.normalize('NFC')) nfcBoundary++;
            if (got.text_hex !== Buffer.from(nfc).toString('hex')) problems.push('decode(encode(s)) != NFC(s)');
            if (a.split) {
                const want_split = expectedSplit(text, ref);
                const d = firstDiff(want_split, got.split_hex);
                if (d < want_split.length || want_split.length !== got.split_hex.length)
                    problems.push(`pre-token split differs at piece ${d}: deltaserve ${show(got.split_hex.slice(d), 4)}` +
                                  ` regex ${show(want_split.slice(d), 4)}`);
            }
        }
        counts[c.cls] = (counts[c.cls] || 0) + 1;
        if (problems.length) {
            failed++;
            console.log(`FAIL ${name}: ${problems.join('; ')}; input hex ${(c.bytes || Buffer.from(c.text)).toString('hex').slice(0, 200)}`);
        } else {
            passed++;
            console.log(`ok ${name}`);
        }
    });
    console.log(`# ${a.name}: ${cases.length} strings (${Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', ')}); ` +
                `deltaserve took ${ms} ms for all; ${nfcBoundary} where an added token stops NFC from composing across it`);
    console.log(`RESULT passed=${passed} failed=${failed}`);
    return failed ? 1 : 0;
}

process.exitCode = main();
