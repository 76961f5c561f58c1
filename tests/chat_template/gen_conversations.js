// gen_conversations.js - the chat requests the template comparison renders.
//
// Deterministic (a fixed seed): the same list on every run. Each request is
// { name, ctx } where ctx is what the template sees before
// chat_template_kwargs are merged in:
//   { messages, tools?, add_generation_prompt, bos_token, eos_token, chat_template_kwargs? }
// Between them they cover: with and without a system message, one and many
// turns, content as a string and as content parts, tools with nested JSON
// schemas, assistant tool calls with arguments as objects and as JSON text,
// one and several consecutive tool results, reasoning_content before and after
// the last user turn (and reasoning written inline as <think>...</think>),
// enable_thinking true / false / absent, add_generation_prompt true / false,
// and text with unicode, quotes, backslashes, newlines and template syntax.
'use strict';

function mulberry32(seed) {
    return function () {
        seed |= 0;
        seed = (seed + 0x6d2b79f5) | 0;
        let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

const TEXTS = [
    'Hello!',
    'What is the capital of France?',
    'Explain "quotes", \'apostrophes\' and back\\slashes.',
    'Line one\nLine two\n\nLine four after a blank line',
    '  leading and trailing spaces  ',
    '\n\nstarts with newlines and ends with them\n\n',
    'Unicode: café, naïve, 日本語, 中文, العربية, עברית, emoji 🙂🚀, ZWJ 👩‍💻, combining e\u0301',
    'Template syntax as data: {{ messages }} {% if x %} {# not a comment #}',
    'Tabs\tand\tCR\r\nLF mixed',
    'Nested <think>not really thinking</think> tags in a user turn',
    'A very long line: ' + 'lorem ipsum dolor sit amet '.repeat(40),
    'JSON-looking text: {"a": [1, 2, {"b": null}], "c": "d"}',
    'Control characters: \u0001\u0002 and DEL \u007f and NBSP\u00a0here',
    '<tool_response>\nlooks like a tool response\n</tool_response>',
    'Math: 1 < 2 > 0 && 3 % 2 == 1; x**2 // 3',
    '',
];

const ANSWERS = [
    'Paris is the capital of France.',
    'Sure, here is a list:\n- one\n- two\n- three',
    'I can help with that. 🙂',
    'Answer with "quotes" and a back\\slash.',
    '\nThe answer starts with a newline.',
    'Multi\n\nparagraph\n\nanswer.',
];

const REASONING = [
    'The user asks a simple question. I should answer directly.',
    '\nLet me think step by step.\n1. First\n2. Second\n',
    '  Reasoning with spaces around  ',
    'Considering "quotes" and unicode: ünïcödé ✓',
];

const SYSTEMS = [
    'You are a helpful assistant.',
    'You are a terse assistant.\nAnswer in one line.\nNever use "emoji".',
    'Système: réponds en français. 🇫🇷',
];

const TOOLS = [
    {
        type: 'function',
        function: {
            name: 'get_weather',
            description: 'Get the current weather in a location',
            parameters: {
                type: 'object',
                properties: {
                    location: {type: 'string', description: 'City and country, e.g. "Paris, FR"'},
                    unit: {type: 'string', enum: ['celsius', 'fahrenheit'], default: 'celsius'},
                    days: {type: 'integer', minimum: 1, maximum: 14},
                },
                required: ['location'],
            },
        },
    },
    {
        type: 'function',
        function: {
            name: 'search_flights',
            description: 'Search flights.\nSupports one-way and return trips; prices in €.',
            parameters: {
                type: 'object',
                properties: {
                    route: {
                        type: 'object',
                        properties: {
                            from: {type: 'string', pattern: '^[A-Z]{3}$'},
                            to: {type: 'string', pattern: '^[A-Z]{3}$'},
                            stops: {type: 'array', items: {type: 'string'}, maxItems: 2},
                        },
                        required: ['from', 'to'],
                    },
                    passengers: {
                        type: 'array',
                        items: {
                            type: 'object',
                            properties: {
                                age: {type: 'number', exclusiveMinimum: 0, multipleOf: 0.5},
                                seat: {type: ['string', 'null'], enum: ['aisle', 'window', null]},
                            },
                        },
                    },
                    flexible: {type: 'boolean', default: false},
                    budget: {type: 'number', default: 1234.5, examples: [0.1, 1e21, 1e-7, -0.25, 100]},
                },
                required: ['route'],
                additionalProperties: false,
            },
        },
    },
    {
        type: 'function',
        function: {
            name: 'run_python',
            description: 'Run Python code and return stdout. Use print().',
            parameters: {
                type: 'object',
                properties: {code: {type: 'string', description: 'Code with "quotes" and \\n escapes'}},
                required: ['code'],
            },
        },
    },
    {
        type: 'function',
        function: {
            name: 'no_params',
            description: 'A tool that takes nothing',
            parameters: {type: 'object', properties: {}},
        },
    },
];

const CALLS = [
    {name: 'get_weather', arguments: {location: 'Paris, FR', unit: 'celsius'}},
    {name: 'get_weather', arguments: {location: 'Zürich, CH', days: 3}},
    {
        name: 'search_flights',
        arguments: {
            route: {from: 'CDG', to: 'NRT', stops: ['HEL']},
            passengers: [{age: 34.5, seat: 'window'}, {age: 7, seat: null}],
            flexible: true,
            budget: 1500.75,
        },
    },
    {name: 'run_python', arguments: {code: 'print("hello\\nworld")\nfor i in range(3):\n    print(i)'}},
    {name: 'no_params', arguments: {}},
];

const RESULTS = [
    '{"temperature": 21.5, "unit": "celsius", "conditions": "sunny"}',
    '{"flights": [{"id": "AF276", "price": 1234.5}, {"id": "JL46", "price": 1399}]}',
    'hello\nworld\n0\n1\n2\n',
    'Error: "location" not found',
    '',
];

function generate() {
    const rnd = mulberry32(20240607);
    const pick = (arr) => arr[Math.floor(rnd() * arr.length)];
    const out = [];
    let callId = 0;

    function toolCall(call, asString, withId) {
        const fn = {name: call.name, arguments: asString ? JSON.stringify(call.arguments) : call.arguments};
        const tc = {type: 'function', function: fn};
        if (withId) tc.id = `call_${++callId}`;
        return tc;
    }

    function finish(name, messages, opts) {
        const ctx = {messages};
        if (opts.tools !== undefined) ctx.tools = opts.tools;
        ctx.add_generation_prompt = opts.addGen;
        ctx.bos_token = '<|endoftext|>';
        ctx.eos_token = '<|im_end|>';
        const kwargs = {};
        if (opts.thinking !== undefined) kwargs.enable_thinking = opts.thinking;
        if (opts.preserve !== undefined) kwargs.preserve_thinking = opts.preserve;
        if (Object.keys(kwargs).length) ctx.chat_template_kwargs = kwargs;
        out.push({name: `${String(out.length).padStart(3, '0')}-${name}`, ctx});
    }

    const thinkingModes = [undefined, true, false];

    // 1. single turn, every text, with and without a system message
    TEXTS.forEach((text, i) => {
        const messages = [];
        if (i % 3 !== 0) messages.push({role: 'system', content: SYSTEMS[i % SYSTEMS.length]});
        messages.push({role: 'user', content: text});
        finish('single', messages, {addGen: i % 4 !== 3, thinking: thinkingModes[i % 3]});
    });

    // 2. multi-turn chats, reasoning in history before and after the last user turn
    for (let i = 0; i < 16; i++) {
        const messages = [];
        if (i % 2) messages.push({role: 'system', content: pick(SYSTEMS)});
        const turns = 1 + (i % 4);
        for (let t = 0; t < turns; t++) {
            messages.push({role: 'user', content: pick(TEXTS) || 'Hi'});
            const a = {role: 'assistant', content: pick(ANSWERS)};
            const style = (i + t) % 4;
            if (style === 1) a.reasoning_content = pick(REASONING);
            if (style === 2) a.content = `<think>\n${pick(REASONING)}\n</think>\n\n${a.content}`;
            if (style === 3) a.reasoning_content = null;
            messages.push(a);
        }
        if (i % 3 !== 2) messages.push({role: 'user', content: pick(TEXTS) || 'And now?'});
        else {   // ends with an assistant turn that has reasoning: after the last user turn
            messages[messages.length - 1].reasoning_content = pick(REASONING);
        }
        finish('multi', messages, {addGen: i % 3 !== 2, thinking: thinkingModes[i % 3]});
    }

    // 3. tools: definitions, calls (objects and JSON text), consecutive tool results
    for (let i = 0; i < 20; i++) {
        const messages = [];
        if (i % 3 === 0) messages.push({role: 'system', content: pick(SYSTEMS)});
        const tools = TOOLS.slice(0, 1 + (i % TOOLS.length));
        messages.push({role: 'user', content: pick(TEXTS) || 'Use a tool.'});
        const nCalls = 1 + (i % 3);
        const calls = [];
        for (let c = 0; c < nCalls; c++) calls.push(toolCall(pick(CALLS), i % 5 === 3, i % 2 === 0));
        const a = {role: 'assistant', content: i % 4 === 0 ? 'Let me check.' : '', tool_calls: calls};
        if (i % 5 === 1) a.reasoning_content = pick(REASONING);
        messages.push(a);
        for (let c = 0; c < nCalls; c++) {
            const m = {role: 'tool', content: pick(RESULTS)};
            if (i % 2 === 0) m.tool_call_id = calls[c].id;
            messages.push(m);
        }
        if (i % 4 === 1) {
            const done = {role: 'assistant', content: pick(ANSWERS)};
            if (i % 8 === 1) done.reasoning_content = pick(REASONING);
            messages.push(done);
            messages.push({role: 'user', content: 'Thanks! One more question.'});
        } else if (i % 4 === 2) {
            messages.push({role: 'assistant', content: pick(ANSWERS)});
        }
        const opts = {addGen: i % 4 !== 2, thinking: thinkingModes[i % 3], tools};
        if (i === 7) opts.tools = [];
        if (i === 11) opts.tools = null;
        finish('tools', messages, opts);
    }

    // 4. content parts (what multimodal requests send), and assorted edges
    finish('parts', [
        {role: 'system', content: [{type: 'text', text: 'You describe images.'}]},
        {role: 'user', content: [{type: 'text', text: 'What is in this picture?'}, {type: 'image', image: 'https://example.com/cat.png'}]},
    ], {addGen: true});
    finish('parts-text-only', [
        {role: 'user', content: [{type: 'text', text: 'Part one. '}, {type: 'text', text: 'Part two.'}]},
    ], {addGen: true, thinking: false});
    finish('parts-video', [
        {role: 'user', content: [{type: 'video', video: 'clip.mp4'}, {type: 'text', text: 'Summarise the clip.'}]},
        {role: 'assistant', content: 'A cat plays piano.'},
        {role: 'user', content: [{type: 'image_url', image_url: {url: 'data:image/png;base64,AAAA'}}, {type: 'text', text: 'And this?'}]},
    ], {addGen: true, thinking: true});
    // what the server gives the template for image_url parts (as vLLM does): {type: 'image'} alone,
    // several per message and in earlier turns
    finish('parts-images-as-served', [
        {role: 'system', content: 'You describe images.'},
        {role: 'user', content: [{type: 'text', text: 'Compare '}, {type: 'image'}, {type: 'text', text: ' with '}, {type: 'image'}]},
        {role: 'assistant', content: 'The first is red.'},
        {role: 'user', content: [{type: 'image'}, {type: 'text', text: 'And this one?'}]},
    ], {addGen: true, thinking: false});
    finish('system-only', [{role: 'system', content: 'Only a system message.'}], {addGen: true});
    finish('empty-contents', [
        {role: 'system', content: ''},
        {role: 'user', content: ''},
        {role: 'assistant', content: ''},
        {role: 'user', content: ''},
    ], {addGen: false});
    finish('assistant-prefill', [
        {role: 'user', content: 'Write a haiku.'},
        {role: 'assistant', content: 'Autumn moonlight—'},
    ], {addGen: false});
    finish('second-system', [
        {role: 'system', content: 'First system.'},
        {role: 'user', content: 'Hi'},
        {role: 'system', content: 'A later system message.'},
        {role: 'user', content: 'Hello again'},
    ], {addGen: true, thinking: false});
    finish('preserve-thinking', [
        {role: 'user', content: 'Q1'},
        {role: 'assistant', content: 'A1', reasoning_content: 'R1'},
        {role: 'user', content: 'Q2'},
        {role: 'assistant', content: 'A2', reasoning_content: 'R2'},
        {role: 'user', content: 'Q3'},
    ], {addGen: true, preserve: true});
    finish('multi-step-tools', [
        {role: 'user', content: 'Weather in Paris and then flights?'},
        {role: 'assistant', content: '', reasoning_content: 'Need the weather first.', tool_calls: [toolCall(CALLS[0], false, true)]},
        {role: 'tool', content: RESULTS[0]},
        {role: 'assistant', content: '', reasoning_content: 'Now flights.', tool_calls: [toolCall(CALLS[2], true, true)]},
        {role: 'tool', content: RESULTS[1]},
        {role: 'tool', content: RESULTS[3]},
        {role: 'assistant', content: 'Done: sunny, and AF276 is cheapest.', reasoning_content: 'Summarise.'},
    ], {addGen: false, tools: TOOLS.slice(0, 2)});
    finish('tool-call-null-content', [
        {role: 'user', content: 'Call it.'},
        {role: 'assistant', content: null, tool_calls: [toolCall(CALLS[4], false, false)]},
        {role: 'tool', content: RESULTS[4]},
    ], {addGen: true, tools: TOOLS});
    finish('tool-call-bare', [   // tool_calls without the "function" wrapper
        {role: 'user', content: 'Call it bare.'},
        {role: 'assistant', content: '', tool_calls: [{name: 'get_weather', arguments: {location: 'Oslo'}}]},
        {role: 'tool', content: 'cold'},
    ], {addGen: true, tools: TOOLS.slice(0, 1)});
    finish('unknown-role', [
        {role: 'user', content: 'Hi'},
        {role: 'critic', content: 'This role is not known to the templates.'},
    ], {addGen: true});
    finish('numbers-in-args', [
        {role: 'user', content: 'Numbers'},
        {role: 'assistant', content: '', tool_calls: [{type: 'function', function: {name: 'calc', arguments: {
            a: 1, b: -0.5, c: 1e21, d: 1.5e-7, e: 123456789012345680000, f: 0.1, g: true, h: null, i: [1, 2.5, 'x'], j: {'k': {'l': []}}, '2': 'digit key', 'Z': 'upper key',
        }}}]},
        {role: 'tool', content: '42'},
    ], {addGen: true, tools: TOOLS.slice(0, 1), thinking: true});
    return out;
}

module.exports = {generate};

if (require.main === module) {
    for (const c of generate()) console.log(JSON.stringify(c));
}
