#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets to fuzz/corpus/<target>/.

Small valid inputs (each well under 64 KiB): GGUF and safetensors files
crafted here, the config.json and model.safetensors.index.json of a tiny
model made by `deltaserve make-model` (DS_BIN, default build/deltaserve), a
few tokenizer strings, chat templates and streamed texts. Deterministic: run
it again after changing it, and commit what changed."""
import json, os, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    assert len(data) < 64 * 1024, (target, name, len(data))
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- GGUF ---
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
          U64: "<Q", I64: "<q", F64: "<d"}
# ggml type: (id, elements per block, bytes per block)
GT = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144),
      "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors, version=3, alignment=32):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    offset, blobs = 0, []
    for name, typ, ne in tensors:
        tid, blk, bsz = GT[typ]
        n = 1
        for x in ne:
            n *= x
        nbytes = n // blk * bsz
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", x) for x in ne)
        out += struct.pack("<IQ", tid, offset)
        blobs.append((offset, bytes((i * 7 + len(name)) & 0xFF for i in range(nbytes))))
        offset += (nbytes + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    data = bytearray(offset)
    for off, b in blobs:
        data[off:off + len(b)] = b
    return out + bytes(data)


KV_ALL = [
    ("general.architecture", STR, "qwen35"),
    ("general.name", STR, "seed"),
    ("general.alignment", U32, 32),
    ("qwen35.block_count", U32, 2),
    ("qwen35.context_length", U64, 4096),
    ("qwen35.embedding_length", I32, 64),
    ("qwen35.attention.layer_norm_rms_epsilon", F32, 1e-6),
    ("qwen35.rope.freq_base", F64, 1e7),
    ("x.u8", U8, 200), ("x.i8", I8, -3), ("x.u16", U16, 65535), ("x.i16", I16, -2), ("x.i64", I64, -1),
    ("x.bool", BOOL, 1),
    ("x.arr_i32", ARR, (I32, [1, -2, 3])),
    ("x.arr_u8", ARR, (U8, [0, 1, 255])),
    ("x.arr_f32", ARR, (F32, [0.5, -1.0])),
    ("x.arr_f64", ARR, (F64, [2.5])),
    ("x.arr_bool", ARR, (BOOL, [0, 1])),
    ("tokenizer.ggml.tokens", ARR, (STR, ["a", "b", "ab", "\u0120x", "<|im_end|>"])),
    ("tokenizer.ggml.token_type", ARR, (I32, [1, 1, 1, 1, 3])),
    ("x.empty", ARR, (U32, [])),
]
TENSORS = [("token_embd.weight", "F32", [4, 2]), ("a.f16", "F16", [8]), ("a.bf16", "BF16", [3, 1]),
           ("a.q8_0", "Q8_0", [32, 2]), ("a.q4_0", "Q4_0", [32]), ("a.q4_k", "Q4_K", [256]),
           ("a.q5_k", "Q5_K", [256]), ("a.q6_k", "Q6_K", [256, 1, 1, 1])]
put("fuzz_gguf", "all_types.gguf", gguf(KV_ALL, TENSORS))
put("fuzz_gguf", "align64.gguf", gguf([("general.alignment", U32, 64), ("k", STR, "v")], TENSORS[:4], alignment=64))
put("fuzz_gguf", "v2_empty.gguf", gguf([], [], version=2))
put("fuzz_gguf", "kv_only.gguf", gguf(KV_ALL[:8], []))

# --- safetensors ---


def safetensors(entries, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, elsize in entries:
        n = 1
        for x in shape:
            n *= x
        b = bytes((i * 13 + len(name)) & 0xFF for i in range(n * elsize))
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("fuzz_safetensors", "mixed.safetensors",
    safetensors([("model.embed_tokens.weight", "BF16", [8, 4], 2), ("model.norm.weight", "F32", [4], 4),
                 ("lm_head.weight", "F16", [8, 4], 2), ("ids", "I64", [3], 8), ("empty", "F32", [0, 4], 4),
                 ("experts", "BF16", [2, 3, 4], 2), ("scalar", "F32", [], 4)], {"format": "pt"}))
put("fuzz_safetensors", "one.safetensors", safetensors([("w", "F32", [2, 2], 4)]))
put("fuzz_safetensors", "none.safetensors", safetensors([], {}))

# --- Hugging Face config.json / index (first byte: 0 config, 1 index) ---
ds_bin = os.environ.get("DS_BIN", os.path.join(ROOT, "build", "deltaserve"))
with tempfile.TemporaryDirectory() as tmp:
    for shape, extra in (("tiny", []), ("tiny-moe", []), ("tiny-qwen3", ["--hf-flat"])):
        out = os.path.join(tmp, shape)
        subprocess.run([ds_bin, "make-model", "--shape", shape, "--layers", "1", "--dtype", "bf16", "--format",
                        "safetensors", "--out", out, "--shard-mb", "1"] + extra, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "config.json"), "rb") as f:
            put("fuzz_hf_config", "config_" + shape, b"\0" + f.read())
        idx = os.path.join(out, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx, "rb") as f:
                put("fuzz_hf_config", "index_" + shape, b"\1" + f.read())
# --- tokenizer (first byte: bit 0 allow_special) ---
TEXTS = ["Hello world! It's 2024.", "  leading spaces\n\nand\ttabs  ", "caf\u00e9 e\u0301 \u00c5 A\u030a \u1e9b\u0323",
         "\U0001F600\U0001F44D\U0001F3FD emoji", "\u4f60\u597d\uff0c\u4e16\u754c", "<|im_start|>user\nhi<|im_end|>\n",
         "<think>\nreason\n</think>\n\n<tool_call>{}</tool_call>", "123456789 3.14 ---!!!", "don't I'll we've"]
for i, t in enumerate(TEXTS):
    put("fuzz_tokenizer", "text%d" % i, bytes([i & 1]) + t.encode())
put("fuzz_tokenizer", "invalid_utf8", b"\1a\xff\xc3(\xe2\x82 \xf0\x9f\x98 \xed\xa0\x80z\x00nul")

# --- chat templates (first byte: mode) ---
TEMPLATES = [
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{%- set ns = namespace(c=0) -%}{%- for x in xs if x is number -%}{%- set ns.c = ns.c + x -%}{%- endfor -%}"
    "{{ ns.c }}|{{ s | trim | upper }}|{{ d | tojson }}|{{ xs | length }}|{{ 'a,b' .split(',') | join('-') }}",
    "{% macro f(a, b=2) %}{{ a }}-{{ b }}{{ caller() if caller is defined }}{% endmacro %}{{ f(1) }}{{ f(b=3, a=4) }}"
    "{% call f(5) %}c{% endcall %}{{ n if n > 2 else 'no' }}{{ s[1:3] }}{{ messages[-1]['content'] }}",
    "{%- for m in messages -%}{%- if m.tool_calls -%}{%- for c in m.tool_calls -%}{{ c.function.name }}"
    "{{ c.function.arguments | tojson }}{%- endfor -%}{%- endif -%}{{ loop.index0 }}{%- endfor -%}"
    "{{ raise_exception('x') if n < 0 }}{{ tools[0].function.parameters.properties.keys() | list }}",
]
for i, t in enumerate(TEMPLATES):
    put("fuzz_chat_template", "template%d" % i, b"\0" + t.encode())
put("fuzz_chat_template", "messages", b"\1You are helpful.\0Hi <think>\0<think>\nx\n</think>\n\nok\0result\0again")
put("fuzz_chat_template", "context", b"\2" + json.dumps({
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                 {"role": "assistant", "content": "a", "reasoning_content": "r",
                  "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "42"}, {"role": "user", "content": [{"type": "text", "text": "t"}]}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "add_generation_prompt": True, "enable_thinking": True}).encode())
put("fuzz_chat_template", "kwargs", b"\3" + json.dumps({"enable_thinking": False, "messages": [],
                                                         "add_generation_prompt": False}).encode())

# --- server streaming (settings byte, stop strings ended by NUL, text) ---
put("fuzz_server_stream", "stops", bytes([2 | (2 << 2)]) + b"END\0\n\nUser:\0Some text that ENDs here END more")
put("fuzz_server_stream", "think", bytes([(1 << 5) | (1 << 6) | (4 << 2)]) +
    b"reasoning here</think>\n\nThe answer.<tool_call>\n<function=get>\n<parameter=city>\nParis\n</parameter>\n"
    b"</function>\n</tool_call>")
put("fuzz_server_stream", "qwen3_call", bytes([1 | (1 << 6)]) +
    b"x\0<think>hm</think>ok <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}</tool_call> x<tool_call>bad")

# --- request bodies (settings byte: bit 0 completions, bit 1 render the chat template) ---
CHAT, COMPLETION, RENDER = 0, 1, 2
REQUESTS = [
    ("chat_min", CHAT | RENDER, {"model": "default", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}),
    ("chat_full", CHAT | RENDER, {
        "model": "default", "max_completion_tokens": 32, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 42, "n": 2,
        "stop": ["\n\n", "END"], "stream": True, "stream_options": {"include_usage": True}, "user": "u1",
        "logprobs": True, "top_logprobs": 3, "ignore_eos": False, "response_format": {"type": "text"},
        "logit_bias": {}, "parallel_tool_calls": True,
        "chat_template_kwargs": {"enable_thinking": False},
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
            {"role": "assistant", "content": "It is 21.", "reasoning_content": "easy"},
            {"role": "user", "content": "caf\u00e9 \ud83d\ude00"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ("chat_bad_role", CHAT, {"messages": [{"role": "wizard", "content": "x"}]}),
    ("chat_bad_types", CHAT, {"messages": [{"role": "user", "content": 5}], "temperature": "hot", "n": 1000}),
    ("completion_text", COMPLETION, {"model": "default", "prompt": "Once upon a time", "max_tokens": 8, "logprobs": 2,
                                     "echo": False, "suffix": "", "best_of": 1, "stop": "\n"}),
    ("completion_ids", COMPLETION, {"prompt": [1, 2, 3, 4000], "max_tokens": 4, "stream": True}),
    ("completion_list", COMPLETION, {"prompt": ["one prompt"], "max_tokens": 1}),
]
for name, settings, body in REQUESTS:
    put("fuzz_openai_request", name, bytes([settings]) + json.dumps(body).encode())
put("fuzz_openai_request", "not_json", bytes([CHAT]) + b'{"messages": [{"role": "user", "content": "x"}], ')
put("fuzz_openai_request", "invalid_utf8", bytes([CHAT | RENDER]) +
    b'{"messages": [{"role": "user", "content": "\xff\xfe caf\xe9 \xf0\x9f\x98"}], "model": "\xe2\x82"}')
put("fuzz_openai_request", "trailing", bytes([COMPLETION]) + b'{"prompt": "x"}  \n\t ')

# the Responses and Messages APIs (bits 2-3 of the settings byte): what Codex CLI and Claude Code send
RESPONSES, MESSAGES, COUNT = 4, 8, 12
put("fuzz_openai_request", "responses_codex", bytes([RESPONSES | RENDER]) + json.dumps({
    "model": "default", "stream": True, "store": False, "tool_choice": "auto", "parallel_tool_calls": True,
    "reasoning": {"summary": "auto", "effort": "low"}, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "k", "client_metadata": {"originator": "codex_exec"}, "max_output_tokens": 64,
    "input": [
        {"type": "message", "id": "msg_1", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "id": "msg_2", "role": "user", "content": [{"type": "input_text", "text": "ls"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "run it"}], "content": []},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\": \"ls\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a b"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]}],
    "tools": [{"type": "function", "name": "shell", "strict": False,
               "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
              {"type": "namespace", "name": "mcp", "tools": []}, {"type": "web_search", "external_web_access": False}],
    "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}}).encode())
put("fuzz_openai_request", "responses_string", bytes([RESPONSES]) + json.dumps({"input": "hi", "instructions": "be kind"}).encode())
with open(os.path.join(ROOT, "tests", "server", "claude_code_request.json"), "rb") as f:
    put("fuzz_openai_request", "messages_claude_code", bytes([MESSAGES | RENDER]) + f.read())
put("fuzz_openai_request", "messages_tools", bytes([MESSAGES | RENDER]) + json.dumps({
    "model": "default", "max_tokens": 16, "system": [{"type": "text", "text": "s"}], "stop_sequences": ["x"],
    "tool_choice": {"type": "tool", "name": "f"}, "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    "messages": [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""},
                                                   {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}]}]}).encode())
put("fuzz_openai_request", "messages_count", bytes([COUNT]) + json.dumps({"model": "default", "messages": [{"role": "user", "content": "q"}]}).encode())

# --- grammar (GBNF text, NUL, the bytes fed to the matcher) ---
GRAMMARS = [
    ("json_like", 'root ::= "{" ws (pair ("," ws pair)*)? "}"\npair ::= str ":" ws (str | [0-9]+)\n'
                  'str ::= "\\"" [^"\\\\]* "\\""\nws ::= [ \\n]{0,2}\n', b'{"ab": "cd", "e":12}'),
    ("utf8_class", 'root ::= [^a-z]{1,3} "!"\n', "\u00e9\u4e2d!".encode()),
    ("recursion", 'root ::= "(" root ")" | "x"\n', b"((x))"),
    ("alternation", 'root ::= ("a" | "ab" | "abc")+ "."\n', b"ababc."),
    ("bad", 'root ::= x\n', b""),
]
for name, g, text in GRAMMARS:
    put("fuzz_grammar", name, g.encode() + b"\0" + text)

# --- images (ds_image_decode): one small picture of each format and variant PIL writes ---
def image_seeds():
    import io
    from PIL import Image
    w, h = 24, 16
    base = Image.new("RGB", (w, h))
    base.putdata([(x * 10, y * 15, (x * y) % 256) for y in range(h) for x in range(w)])
    rgba = base.copy()
    rgba.putalpha(Image.linear_gradient("L").resize((w, h)))
    exif = Image.Exif()
    exif[0x0112] = 6
    frames = [base, base.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    seeds = [
        ("baseline.jpg", base, dict(format="JPEG", quality=80)),
        ("exif6.jpg", base, dict(format="JPEG", quality=80, exif=exif.tobytes())),
        ("progressive.jpg", base, dict(format="JPEG", quality=80, progressive=True)),
        ("cmyk.jpg", base.convert("CMYK"), dict(format="JPEG", quality=80)),
        ("rgba.png", rgba, dict(format="PNG")),
        ("palette_trns.png", base.quantize(16), dict(format="PNG", transparency=2)),
        ("interlaced.png", base, dict(format="PNG", interlace=1)),
        ("gray.png", base.convert("L"), dict(format="PNG")),
        ("lossless.webp", base, dict(format="WEBP", lossless=True)),
        ("lossy_alpha.webp", rgba, dict(format="WEBP", quality=70)),
        ("animated.webp", frames[0], dict(format="WEBP", save_all=True, append_images=frames[1:], lossless=True)),
        ("transparent.gif", base.quantize(32), dict(format="GIF", transparency=3)),
        ("interlaced.gif", base.quantize(32), dict(format="GIF", interlace=True)),
        ("animated.gif", frames[0].quantize(32), dict(format="GIF", save_all=True,
                                                      append_images=[f.quantize(32) for f in frames[1:]])),
    ]
    for name, im, kw in seeds:
        b = io.BytesIO()
        im.save(b, **kw)
        put("fuzz_image_decode", name, b.getvalue())


image_seeds()
