// gen_strings.js - a deterministic set of test strings for the tokenizer
// comparison (compare.js), in the classes the issue lists: English with
// contractions, CJK, emoji with ZWJ, combining marks, digit runs, whitespace
// and newline runs, code, special tokens inside text, random Unicode, random
// bytes, mixtures, and long strings.
//
// Each case is {cls, text} or {cls, bytes} (a Buffer that need not be UTF-8).
// `node gen_strings.js --bench-text N` prints about N tokens of mixed text
// for timing `deltaserve tokenize --bench`.
'use strict';

// Code points whose general category differs between Unicode 14.0 (the
// tables of Debian 12's PCRE2 10.42, which deltaserve splits with) and the
// Unicode 17.0 of Node 20's ICU: almost all are characters assigned after
// 14.0. Random text avoids them, because for them the answer depends on the
// Unicode version a tokenizer was built with, not on its algorithm. Derived
// by comparing Python 3.11's unicodedata (14.0.0) with /\p{gc=..}/u in Node.
const UNICODE_VERSION_SKEW = [
    [0x295, 0x295], [0x88f, 0x88f], [0x897, 0x897], [0xc5c, 0xc5c], [0xcdc, 0xcdc], [0xcf3, 0xcf3],
    [0xece, 0xece], [0x1acf, 0x1add], [0x1ae0, 0x1aeb], [0x1b4e, 0x1b4f], [0x1b7f, 0x1b7f],
    [0x1c89, 0x1c8a], [0x20c1, 0x20c1], [0x2427, 0x2429], [0x2b96, 0x2b96], [0x2ffc, 0x2fff],
    [0x31e4, 0x31e5], [0x31ef, 0x31ef], [0xa7cb, 0xa7cf], [0xa7d2, 0xa7d2], [0xa7d4, 0xa7d4],
    [0xa7da, 0xa7dc], [0xa7f1, 0xa7f1], [0xfbc3, 0xfbd2], [0xfd90, 0xfd91], [0xfdc8, 0xfdce],
    [0x105c0, 0x105f3], [0x10940, 0x10959], [0x10d40, 0x10d65], [0x10d69, 0x10d85], [0x10d8e, 0x10d8f],
    [0x10ec2, 0x10ec7], [0x10ed0, 0x10ed8], [0x10efa, 0x10eff], [0x1123f, 0x11241], [0x11380, 0x11389],
    [0x1138b, 0x1138b], [0x1138e, 0x1138e], [0x11390, 0x113b5], [0x113b7, 0x113c0], [0x113c2, 0x113c2],
    [0x113c5, 0x113c5], [0x113c7, 0x113ca], [0x113cc, 0x113d5], [0x113d7, 0x113d8], [0x113e1, 0x113e2],
    [0x116d0, 0x116e3], [0x1171e, 0x1171e], [0x11b00, 0x11b09], [0x11b60, 0x11b67], [0x11bc0, 0x11be1],
    [0x11bf0, 0x11bf9], [0x11db0, 0x11ddb], [0x11de0, 0x11de9], [0x11f00, 0x11f10], [0x11f12, 0x11f3a],
    [0x11f3e, 0x11f5a], [0x1342f, 0x1342f], [0x13439, 0x13455], [0x13460, 0x143fa], [0x16100, 0x16139],
    [0x16d40, 0x16d79], [0x16ea0, 0x16eb8], [0x16ebb, 0x16ed3], [0x16ff2, 0x16ff6], [0x187f8, 0x187ff],
    [0x18cff, 0x18cff], [0x18d09, 0x18d1e], [0x18d80, 0x18df2], [0x1b132, 0x1b132], [0x1b155, 0x1b155],
    [0x1cc00, 0x1ccfc], [0x1cd00, 0x1ceb3], [0x1ceba, 0x1ced0], [0x1cee0, 0x1cef0], [0x1d2c0, 0x1d2d3],
    [0x1df25, 0x1df2a], [0x1e030, 0x1e06d], [0x1e08f, 0x1e08f], [0x1e4d0, 0x1e4f9], [0x1e5d0, 0x1e5fa],
    [0x1e5ff, 0x1e5ff], [0x1e6c0, 0x1e6de], [0x1e6e0, 0x1e6f5], [0x1e6fe, 0x1e6ff], [0x1f6d8, 0x1f6d8],
    [0x1f6dc, 0x1f6dc], [0x1f774, 0x1f77f], [0x1f7d9, 0x1f7d9], [0x1f8b2, 0x1f8bb], [0x1f8c0, 0x1f8c1],
    [0x1f8d0, 0x1f8d8], [0x1fa54, 0x1fa57], [0x1fa75, 0x1fa77], [0x1fa87, 0x1fa8a], [0x1fa8e, 0x1fa8f],
    [0x1faad, 0x1faaf], [0x1fabb, 0x1fabf], [0x1fac6, 0x1fac6], [0x1fac8, 0x1fac8], [0x1facd, 0x1facf],
    [0x1fada, 0x1fadc], [0x1fadf, 0x1fadf], [0x1fae8, 0x1faea], [0x1faef, 0x1faef], [0x1faf7, 0x1faf8],
    [0x1fbcb, 0x1fbef], [0x1fbfa, 0x1fbfa], [0x2b739, 0x2b73f], [0x2cea2, 0x2cead], [0x2ebf0, 0x2ee5d],
    [0x31350, 0x33479],
];

function skewed(cp) {
    let lo = 0, hi = UNICODE_VERSION_SKEW.length - 1;
    while (lo <= hi) {
        const mid = (lo + hi) >> 1, [a, b] = UNICODE_VERSION_SKEW[mid];
        if (cp < a) hi = mid - 1;
        else if (cp > b) lo = mid + 1;
        else return true;
    }
    return false;
}

// xorshift32: the same strings on every machine and every run
function rng(seed) {
    let s = seed >>> 0 || 1;
    const next = () => {
        s ^= s << 13; s >>>= 0;
        s ^= s >>> 17;
        s ^= s << 5; s >>>= 0;
        return s;
    };
    const r = {
        u32: next,
        int: (n) => next() % n,                      // 0 .. n-1
        range: (a, b) => a + (next() % (b - a + 1)), // a .. b
        pick: (arr) => arr[next() % arr.length],
        chance: (p) => next() / 4294967296 < p,
    };
    return r;
}

const cp = (c) => String.fromCodePoint(c);

const WORDS = ('the of and to in is was that for it with as his on be at by had are but from or have an they ' +
    'which one you were her all she there would their we him been has when who will more no if out so said what ' +
    'up its about into than them can only other new some could time these two may then do first any my now such ' +
    'like our over man me even most made after also did many before must through back years where much your way ' +
    'well down should because each just those people how too little state good very make world still own see men ' +
    'work long get here between both life being under never day same another know while last might us great old ' +
    'year off come since against go came right used take three tokenizer Transformer GPU kernel latency HTTP JSON ' +
    'naïve café résumé coöperate Zürich façade São Paulo Ångström').split(' ');
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
    "'rE", "'vE", "'lL", "’s", "’ll", "'x", "''", "'", "'ſ", "'ſt"];
const PUNCT = ['.', ',', '!', '?', ';', ':', '...', ' - ', ' — ', '(', ')', '"', '«', '»', '“', '”', '&', '%', '#',
    '@', '*', '/', '\\', '[', ']', '{', '}', '<', '>', '=', '+', '~', '`', '^', '|', '$', '€', '£', '¥'];
const SPECIAL = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|object_ref_start|>', '<|object_ref_end|>',
    '<|box_start|>', '<|box_end|>', '<|quad_start|>', '<|quad_end|>', '<|vision_start|>', '<|vision_end|>',
    '<|vision_pad|>', '<|image_pad|>', '<|video_pad|>', '<tool_call>', '</tool_call>', '<|fim_prefix|>',
    '<|fim_middle|>', '<|fim_suffix|>', '<|fim_pad|>', '<|repo_name|>', '<|file_sep|>', '<tool_response>',
    '</tool_response>', '<think>', '</think>'];
const SPACES = [' ', ' ', ' ', '  ', '\t', '\n', '\n', '\n\n', '\r\n', '\r', '\u000b', '\u000c', '\u00a0', '\u3000',
    '\u2028', '\u2029', '\u0085', '\ufeff', '\u180e', '\u200b', '\u2003', '\u202f', '\u205f', '\u1680'];
const EMOJI_BASES = [[0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f680, 0x1f6c5], [0x1f900, 0x1f9ff], [0x2600, 0x26ff],
    [0x2700, 0x27bf]];
const ZWJ = '\u200d', VS16 = '\ufe0f';
const ZWJ_SEQS = ['👨‍👩‍👧‍👦', '👩🏽‍💻', '🏳️‍🌈', '🏴‍☠️', '👁️‍🗨️', '🧑🏿‍🤝‍🧑🏻', '❤️‍🔥', '🐻‍❄️', '👨‍⚕️', '🤦🏼‍♂️',
    '1️⃣', '#️⃣', '🇯🇵', '🇺🇸🇫🇷', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', '👍🏻', '☺︎', '✌️'];
const MARK_RANGES = [[0x300, 0x36f], [0x483, 0x489], [0x591, 0x5bd], [0x610, 0x61a], [0x64b, 0x65f], [0x900, 0x903],
    [0x93a, 0x94f], [0x1ab0, 0x1abe], [0x1dc0, 0x1dff], [0x20d0, 0x20f0], [0xfe20, 0xfe2f], [0x302a, 0x302f],
    [0x3099, 0x309a]];
const SCRIPT_WORDS = ['Tiếng Việt', 'नमस्ते दुनिया', 'مَرْحَبًا بِالْعَالَم', 'שָׁלוֹם עוֹלָם', 'สวัสดีชาวโลก', 'Привет мир',
    'Γειά σου Κόσμε', 'ការប្រើប្រាស់', '한국어', 'க்ஷ ஸ்ரீ', 'ಕನ್ನಡ', 'ﬁ ﬂ Ω Å K', 'ǅ ǈ ǋ', 'Å Å ḱ ḱ'];
const DIGITS = ['0123456789', '٠١٢٣٤٥٦٧٨٩', '۰۱۲۳۴۵۶۷۸۹', '०१२३४५६७८९', '০১২৩৪৫৬৭৮৯', '０１２３４５６７８９',
    '²³¹⁰⁴', '½¼¾⅓', 'ⅠⅡⅢⅣⅫ', '①②③⑳', '𝟎𝟏𝟐𝟗', '〇一二三'];
const CJK_RANGES = [[0x4e00, 0x9fa5], [0x3041, 0x3096], [0x30a1, 0x30fa], [0xac00, 0xd7a3], [0x3400, 0x4db5],
    [0x20000, 0x2a6d6], [0xff01, 0xff5e], [0x3000, 0x303f]];
const CJK_TEXT = ['你好，世界！', '我爱自然语言处理。', '東京は日本の首都です。', 'こんにちは、世界', 'カタカナとひらがな',
    '안녕하세요 세계', '한국어 텍스트 처리', '中文和English混合', '「引用」と『二重引用』', '（全角括弧）', '１２３４５６',
    '机器学习模型的推理速度', 'ｶﾀｶﾅ半角', '漢字かな交じり文', '繁體中文與簡體中文'];
const CODE = [
    'int main(int argc, char **argv) {\n    printf("hello %d\\n", argc);\n    return 0;\n}\n',
    'def f(x):\n    """Docstring."""\n    if x > 0:\n        return x ** 2\n    return -x\n',
    'const add = (a, b) => a + b;\nconsole.log(`sum=${add(1, 2)}`);\n',
    'fn main() {\n\tlet v: Vec<u32> = (0..10).map(|x| x * x).collect();\n\tprintln!("{:?}", v);\n}\n',
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}',
    '<div class="x"><p>Hello &amp; welcome</p></div>\n',
    'for i in $(seq 1 10); do echo "$i" >> out.txt; done\n',
    'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;\n',
    '#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n',
    '    x += 1  # comment\n\t\ty = x // 2\n',
    'if (a != b && c <= d || !e) { return; }\n',
    'import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\n',
    '/* block comment */\n// line comment\nstruct s { int a; char *b; };\n',
    'matrix[i][j] = matrix[i-1][j-1] + 1;\n',
    '$ git commit -m "fix: handle \\r\\n"\n',
];

function randWord(r) {
    let w = r.pick(WORDS);
    if (r.chance(0.15)) w = w[0].toUpperCase() + w.slice(1);
    if (r.chance(0.03)) w = w.toUpperCase();
    return w;
}

function english(r) {
    const n = r.range(1, 25);
    let s = r.chance(0.2) ? ' ' : '';
    for (let i = 0; i < n; i++) {
        s += randWord(r);
        if (r.chance(0.15)) s += r.pick(CONTRACTIONS.slice(0, 17));
        if (r.chance(0.15)) s += r.pick(PUNCT);
        if (i + 1 < n) s += r.chance(0.9) ? ' ' : r.pick(['  ', '\n', '\t']);
    }
    return s;
}

function contractions(r) {
    let s = '';
    const n = r.range(1, 8);
    for (let i = 0; i < n; i++) {
        const c = r.pick(CONTRACTIONS);
        switch (r.int(5)) {
            case 0: s += randWord(r) + c; break;
            case 1: s += c + randWord(r); break;
            case 2: s += ' ' + c; break;
            case 3: s += c + c; break;
            default: s += randWord(r) + c + ' ';
        }
    }
    return s;
}

function fromRange(r, ranges) {
    for (;;) {
        const [a, b] = r.pick(ranges), c = r.range(a, b);
        if (!skewed(c)) return c;
    }
}

function cjk(r) {
    if (r.chance(0.35)) {
        let s = r.pick(CJK_TEXT);
        if (r.chance(0.5)) s += (r.chance(0.5) ? ' ' : '') + r.pick(CJK_TEXT);
        if (r.chance(0.3)) s = randWord(r) + s;
        return s;
    }
    let s = '';
    const n = r.range(1, 30);
    for (let i = 0; i < n; i++) {
        s += cp(fromRange(r, CJK_RANGES.slice(0, r.chance(0.9) ? 4 : CJK_RANGES.length)));
        if (r.chance(0.05)) s += r.pick([' ', '，', '。', '、', '！', '\n', ' abc ', '123']);
    }
    if (r.chance(0.15)) s = s.normalize('NFD'); // Hangul syllables come apart into jamo; NFC puts them back
    return s;
}

function emoji(r) {
    let s = '';
    const n = r.range(1, 12);
    for (let i = 0; i < n; i++) {
        switch (r.int(6)) {
            case 0: s += r.pick(ZWJ_SEQS); break;
            case 1: s += cp(fromRange(r, EMOJI_BASES)) + ZWJ + cp(fromRange(r, EMOJI_BASES)); break;
            case 2: s += cp(fromRange(r, EMOJI_BASES)) + cp(r.range(0x1f3fb, 0x1f3ff)); break;
            case 3: s += cp(fromRange(r, EMOJI_BASES)) + VS16; break;
            case 4: s += cp(r.range(0x1f1e6, 0x1f1ff)) + cp(r.range(0x1f1e6, 0x1f1ff)); break;
            default: s += cp(fromRange(r, EMOJI_BASES));
        }
        if (r.chance(0.2)) s += r.pick([' ', '  ', '\n', randWord(r), ' ' + randWord(r) + ' ', '!', ZWJ]);
    }
    return s;
}

function combining(r) {
    const k = r.int(6);
    if (k === 0) return r.pick(SCRIPT_WORDS) + (r.chance(0.5) ? ' ' + r.pick(SCRIPT_WORDS) : '');
    if (k === 1) return english(r).normalize('NFD');
    if (k === 2) { // '<', '=', '>' with U+0338 compose to ≮ ≠ ≯
        return r.pick(['<', '=', '>', 'a<', 'x =', '>>']) + '\u0338' + (r.chance(0.5) ? randWord(r) : '');
    }
    let s = r.chance(0.1) ? cp(fromRange(r, MARK_RANGES)) : ''; // a mark with nothing to attach to
    const n = r.range(1, 10);
    for (let i = 0; i < n; i++) {
        s += r.pick(['a', 'e', 'o', 'n', 'A', 'Z', 'ß', 'ı', '1', '7', ' ', '.', 'क', 'ب', 'ש', '中', '😀', '\n', '_']);
        const m = r.range(0, 4);
        for (let j = 0; j < m; j++) s += cp(fromRange(r, MARK_RANGES));
    }
    return s;
}

function digits(r) {
    const k = r.int(5);
    if (k === 0) {
        let s = '';
        const n = r.range(1, 40);
        for (let i = 0; i < n; i++) s += String(r.int(10));
        return s;
    }
    if (k === 1) {
        return r.pick(['', '$', '€', 'v', ' ', 'x']) + r.range(0, 99999) + r.pick(['', '.', ',', '.5', ',000', '%', 'px']) +
            r.pick(['', ' ', '-']) + r.range(0, 999999999);
    }
    if (k === 2) {
        const set = Array.from(r.pick(DIGITS));
        let s = '';
        const n = r.range(1, 20);
        for (let i = 0; i < n; i++) s += r.pick(set);
        return s;
    }
    if (k === 3) {
        return `${r.range(1, 28)}/${r.range(1, 12)}/${r.range(1900, 2099)} ${r.range(0, 23)}:${r.range(10, 59)}` +
            ` +1-${r.range(200, 999)}-${r.range(100, 999)}-${r.range(1000, 9999)} ${r.range(0, 255)}.${r.range(0, 255)}.0.1`;
    }
    return randWord(r) + r.range(0, 10000) + randWord(r) + ' ' + (r.u32() / 1000).toFixed(r.int(8)) + 'e-' + r.int(40);
}

function whitespace(r) {
    let s = '';
    const n = r.range(1, 20);
    for (let i = 0; i < n; i++) {
        const m = r.range(1, 6);
        for (let j = 0; j < m; j++) s += r.pick(SPACES);
        if (r.chance(0.7)) s += r.chance(0.8) ? randWord(r) : r.pick(PUNCT);
    }
    if (r.chance(0.1)) s += ' '.repeat(r.range(10, 120));
    if (r.chance(0.1)) s = '\n'.repeat(r.range(2, 30)) + s;
    return s;
}

function code(r) {
    let s = r.pick(CODE);
    if (r.chance(0.5)) s += r.pick(CODE);
    if (r.chance(0.3)) s = s.replace(/ {4}/g, '\t');
    if (r.chance(0.3)) s = s.replace(/\n/g, '\r\n');
    if (r.chance(0.3)) s = '  '.repeat(r.range(1, 6)) + s;
    if (r.chance(0.2)) s = s.replace(/x/g, randWord(r));
    return s;
}

function special(r) {
    const k = r.int(4);
    if (k === 0) {
        const role = r.pick(['system', 'user', 'assistant', 'tool']);
        return `<|im_start|>${role}\n${english(r)}<|im_end|>\n<|im_start|>assistant\n` +
            (r.chance(0.5) ? `<think>\n${english(r)}\n</think>\n\n` : '') + (r.chance(0.5) ? english(r) : '');
    }
    let s = '';
    const n = r.range(1, 8);
    for (let i = 0; i < n; i++) {
        const tok = r.pick(SPECIAL);
        switch (r.int(7)) {
            case 0: s += tok; break;
            case 1: s += tok.slice(0, r.range(1, tok.length - 1)); break; // an unfinished token is text
            case 2: s += '<' + tok; break;
            case 3: s += tok + tok; break;
            case 4: s += ' ' + tok + ' '; break;
            case 5: s += tok + r.pick(['\u0301', '\u0338', '\n', '😀', '中']); break;
            default: s += randWord(r) + tok + randWord(r);
        }
        if (r.chance(0.3)) s += english(r);
    }
    return s;
}

function randomUnicode(r) {
    let s = '';
    const n = r.range(1, 40), mode = r.int(4);
    for (let i = 0; i < n; i++) {
        let c;
        for (;;) {
            if (mode === 0) c = r.int(0x110000);
            else if (mode === 1) c = r.int(0x10000);
            else if (mode === 2) c = r.chance(0.5) ? r.int(0x80) : r.int(0x800);
            else c = r.chance(0.7) ? r.range(0x20, 0x7e) : r.int(0x30000);
            if ((c < 0xd800 || c > 0xdfff) && !skewed(c)) break; // surrogates cannot be in text
        }
        s += cp(c);
    }
    if (r.chance(0.1)) s += r.pick(['\u0000', '\uffff', '\ufffe', '\u{10ffff}', '\ufffd']);
    return s;
}

function hasSkew(text) {
    for (const ch of text) if (skewed(ch.codePointAt(0))) return true;
    return false;
}

function randomBytes(r) {
    for (;;) { // what the bytes decode to must avoid UNICODE_VERSION_SKEW too
        const b = randomByteString(r);
        if (!hasSkew(b.toString('utf8'))) return b;
    }
}

function randomByteString(r) {
    const n = r.range(1, 64), out = [];
    const mode = r.int(3);
    for (let i = 0; i < n; i++) {
        if (mode === 0) out.push(r.int(256));
        else if (mode === 1) out.push(r.chance(0.5) ? r.range(0x20, 0x7e) : r.int(256));
        else { // near-UTF-8: lead bytes with too few, too many or wrong continuation bytes
            const lead = r.pick([0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff, 0x80, 0xbf]);
            out.push(lead);
            const m = r.int(4);
            for (let j = 0; j < m; j++) out.push(r.chance(0.8) ? r.range(0x80, 0xbf) : r.int(256));
            if (r.chance(0.3)) out.push(0);
        }
    }
    return Buffer.from(out);
}

const CLASSES = [
    ['english', 150, english], ['contractions', 100, contractions], ['cjk', 200, cjk], ['emoji', 200, emoji],
    ['combining', 200, combining], ['digits', 150, digits], ['whitespace', 200, whitespace], ['code', 200, code],
    ['special', 200, special], ['unicode', 300, randomUnicode], ['bytes', 300, randomBytes],
];

function generate(seed = 20240601) {
    const r = rng(seed), cases = [];
    for (const [cls, n, fn] of CLASSES) {
        for (let i = 0; i < n; i++) {
            const v = fn(r);
            cases.push(Buffer.isBuffer(v) ? {cls, bytes: v} : {cls, text: v});
        }
    }
    const textFns = CLASSES.filter(([cls]) => cls !== 'bytes').map(([, , fn]) => fn);
    for (let i = 0; i < 150; i++) { // mixtures: where one class meets another
        let s = '';
        const n = r.range(2, 6);
        for (let j = 0; j < n; j++) s += r.pick(textFns)(r);
        cases.push({cls: 'mixed', text: s});
    }
    for (let i = 0; i < 20; i++) { // long strings and long runs of one kind
        const k = i % 5;
        let s;
        if (k === 0) s = 'a'.repeat(r.range(1000, 6000));
        else if (k === 1) s = ' '.repeat(r.range(1000, 5000)) + 'x' + '\n'.repeat(r.range(100, 2000));
        else if (k === 2) s = '1234567890'.repeat(r.range(100, 500));
        else if (k === 3) s = '😀'.repeat(r.range(100, 600)) + 'é'.normalize('NFD').repeat(r.range(100, 600));
        else {
            s = '';
            while (s.length < 8000) s += r.pick(textFns)(r);
        }
        cases.push({cls: 'long', text: s});
    }
    return cases;
}

// Mixed text of about n tokens (Qwen3 averages about 2.6 bytes a token on it), for timing.
function benchText(n) {
    const r = rng(7);
    const fns = [english, english, english, code, cjk, digits, whitespace, emoji, combining];
    let s = '';
    while (Buffer.byteLength(s) < 2.6 * n) s += r.pick(fns)(r) + (r.chance(0.3) ? '\n\n' : ' ');
    return s;
}

module.exports = {generate, benchText};

if (require.main === module) {
    const i = process.argv.indexOf('--bench-text');
    if (i > 0) process.stdout.write(benchText(Number(process.argv[i + 1] || 100000)));
    else for (const c of generate()) console.log(JSON.stringify({cls: c.cls, hex: (c.bytes || Buffer.from(c.text)).toString('hex')}));
}
