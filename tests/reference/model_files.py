"""model_files.py - an independent numpy reader of GGUF files and Hugging Face
safetensors directories, written from the format descriptions (GGUF v3 as
ggml's gguf.cpp and gguf-py define it, safetensors as its spec defines it) and
from the llama.cpp converter's conventions for Qwen3 / Qwen3.5 (docs/model.md
§2), not from deltaserve's C code, so that the two can check each other.

    m = open_model(path)         # a .gguf file, or a directory with config.json
    m.format                     # "gguf" or "safetensors"
    m.config                     # dict, field names as in ds_model_config (see CONFIG_FIELDS)
    m.tensors                    # canonical name (GGUF's) -> float32 array, numpy order
                                 # (the reverse of ggml's ne: a Linear weight is [out, in])
    m.v_heads_tiled              # True: GGUF order (V head j uses K head j % Hk);
                                 # False: HF order (V head h uses K head h // (Hv/Hk))
    m.raw                        # GGUFFile, or {hf name: SafeTensor}

Canonical form is what llama.cpp's converter writes, except that the V-head
order stays as the file has it: RMSNorm weights are multipliers (Qwen3.5's
zero-centred "1 + w" folded in; the Gated DeltaNet norm stays plain),
ssm_a = -exp(A_log), the conv weight is [channels, kernel], MoE experts are
[n_expert, out, in] stacks (fused gate_up split, per-expert tensors stacked).

    to_tiled(config, tensors)    # grouped -> tiled V heads, as the converter does
    hf_to_gguf(config, hf)       # the converter: HF tensors -> GGUF tensors (tiled)
    read_gguf(path), read_safetensors(path), read_hf_dir(path)
                                 # the file-level readers
    quantize_q8_0(x)             # ggml's reference Q8_0 quantiser (bytes)
    write_gguf(path, kv, tensors)
                                 # a GGUF v3 file from metadata and (name, type, array) tensors
"""

import json
import math
import os
import struct

import numpy as np

import quants

# --------------------------------------------------------------------------------------------
# GGUF

GGUF_MAGIC = b"GGUF"
# metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"]
_SCALAR = {U8: "<u1", I8: "<i1", U16: "<u2", I16: "<i2", U32: "<u4", I32: "<i4", F32: "<f4", BOOL: "<u1",
           U64: "<u8", I64: "<i8", F64: "<f8"}

# ggml type id -> (name in quants.py, elements per block, bytes per block)
GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 30: ("bf16", 1, 2), 8: ("q8_0", 32, 34), 2: ("q4_0", 32, 18),
    12: ("q4_k", 256, 144), 13: ("q5_k", 256, 176), 14: ("q6_k", 256, 210),
    3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 10: ("q2_k", 256, 84), 11: ("q3_k", 256, 110),
    16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 22: ("iq2_s", 256, 82), 18: ("iq3_xxs", 256, 98),
    21: ("iq3_s", 256, 110), 19: ("iq1_s", 256, 50), 29: ("iq1_m", 256, 56), 20: ("iq4_nl", 32, 18),
    23: ("iq4_xs", 256, 136), 39: ("mxfp4", 32, 17), 40: ("nvfp4", 64, 36), 34: ("tq1_0", 256, 54),
    35: ("tq2_0", 256, 66),
}
GGML_ID = {v[0]: k for k, v in GGML_TYPES.items()}
MAX_NAME = 64  # GGML_MAX_NAME, terminator included


class GGUFValue:
    """A metadata value: type (a GGUF type id), elem_type (for arrays) and value
    (int, float, bool, str, or a list of them)."""

    def __init__(self, type_, value, elem_type=None):
        self.type, self.value, self.elem_type = type_, value, elem_type

    def __repr__(self):
        t = TYPE_NAMES[self.type] + (f"[{TYPE_NAMES[self.elem_type]}]" if self.type == ARRAY else "")
        return f"GGUFValue({t}, {self.value!r:.60})"


class GGUFTensor:
    def __init__(self, name, ne, ggml_type, offset):
        self.name, self.ne, self.ggml_type, self.offset = name, tuple(ne), ggml_type, offset
        tname, be, bb = GGML_TYPES[ggml_type]
        if ne[0] % be:
            raise ValueError(f"tensor {name}: row of {ne[0]} is not a multiple of the {tname} block")
        rows = 1
        for n in ne[1:]:
            rows *= n
        self.type_name = tname
        self.nbytes = ne[0] // be * bb * rows
        self.data = None  # bytes, set by read_gguf

    @property
    def n_dims(self):
        return len(self.ne)

    def array(self):
        """The tensor as float32 in numpy order (ne reversed)."""
        return quants.dequantize(self.type_name, self.data).reshape(tuple(reversed(self.ne)))


class GGUFFile:
    def __init__(self):
        self.version = 0
        self.kv = {}        # key -> GGUFValue, in file order
        self.tensors = {}   # name -> GGUFTensor, in file order
        self.alignment = 32
        self.data_offset = 0
        self.size = 0


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"truncated at byte {self.pos}: {what} needs {n} bytes")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, t, what):
        fmt = _SCALAR[t]
        v = np.frombuffer(self.take(np.dtype(fmt).itemsize, what), dtype=fmt)[0]
        if t == BOOL:
            if v > 1:
                raise ValueError(f"{what}: bool value {v}")
            return bool(v)
        return float(v) if t in (F32, F64) else int(v)

    def string(self, what):
        n = self.scalar(U64, what)
        return bytes(self.take(n, what)).decode("utf-8", errors="surrogateescape")

    def array(self, t, n, what):
        if t == STRING:
            return [self.string(what) for _ in range(n)]
        fmt = _SCALAR[t]
        vals = np.frombuffer(self.take(n * np.dtype(fmt).itemsize, what), dtype=fmt)
        if t == BOOL:
            return [bool(v) for v in vals]
        return [float(v) for v in vals] if t in (F32, F64) else [int(v) for v in vals]


def read_gguf(path):
    """Parses and validates a GGUF v2/v3 file (raises ValueError when it is bad)."""
    with open(path, "rb") as f:
        buf = memoryview(f.read())
    g = GGUFFile()
    g.size = len(buf)
    r = _Reader(buf)
    if bytes(r.take(4, "magic")) != GGUF_MAGIC:
        raise ValueError("not a GGUF file")
    g.version = r.scalar(U32, "version")
    if g.version not in (2, 3):
        raise ValueError(f"GGUF version {g.version}")
    n_tensors = r.scalar(U64, "tensor count")
    n_kv = r.scalar(U64, "kv count")
    for _ in range(n_kv):
        key = r.string("key")
        if not key or key in g.kv:
            raise ValueError(f"empty or duplicate key {key!r}")
        t = r.scalar(U32, f"type of {key}")
        if t == ARRAY:
            et = r.scalar(U32, f"element type of {key}")
            if et >= 13 or et == ARRAY:
                raise ValueError(f"key {key}: array of type {et}")
            n = r.scalar(U64, f"length of {key}")
            g.kv[key] = GGUFValue(ARRAY, r.array(et, n, key), et)
        elif t == STRING:
            g.kv[key] = GGUFValue(STRING, r.string(key))
        elif t in _SCALAR:
            g.kv[key] = GGUFValue(t, r.scalar(t, key))
        else:
            raise ValueError(f"key {key}: value type {t}")
    if "general.alignment" in g.kv:
        a = g.kv["general.alignment"]
        if a.type != U32 or a.value == 0 or a.value & (a.value - 1):
            raise ValueError("general.alignment is not a u32 power of two")
        g.alignment = a.value
    for _ in range(n_tensors):
        name = r.string("tensor name")
        if not name or len(name.encode()) >= MAX_NAME or name in g.tensors:
            raise ValueError(f"bad or duplicate tensor name {name!r}")
        n_dims = r.scalar(U32, f"n_dims of {name}")
        if not 1 <= n_dims <= 4:
            raise ValueError(f"tensor {name}: {n_dims} dims")
        ne = [r.scalar(U64, f"dim of {name}") for _ in range(n_dims)]
        if any(n == 0 for n in ne):
            raise ValueError(f"tensor {name}: zero dimension")
        gt = r.scalar(U32, f"type of {name}")
        if gt not in GGML_TYPES:
            raise ValueError(f"tensor {name}: ggml type {gt}")
        off = r.scalar(U64, f"offset of {name}")
        t = GGUFTensor(name, ne, gt, off)
        g.tensors[name] = t
    g.data_offset = (r.pos + g.alignment - 1) // g.alignment * g.alignment
    if any(bytes(buf[r.pos:g.data_offset])):
        raise ValueError("header padding is not zero")
    for t in g.tensors.values():
        if t.offset % g.alignment:
            raise ValueError(f"tensor {t.name}: offset {t.offset} not aligned")
        start = g.data_offset + t.offset
        if start + t.nbytes > g.size:
            raise ValueError(f"tensor {t.name}: data past the end of the file")
        t.data = bytes(buf[start:start + t.nbytes])
    return g


def padded(n, alignment):
    return (n + alignment - 1) // alignment * alignment


def _gguf_value(t, v, elem=None):
    if t == STRING:
        b = v.encode()
        return struct.pack("<Q", len(b)) + b
    if t == ARRAY:
        return struct.pack("<IQ", elem, len(v)) + b"".join(_gguf_value(elem, x) for x in v)
    return np.array([v], dtype=_SCALAR[t]).tobytes()


def tensor_bytes(type_name, a):
    """a (float, numpy order) stored as one of f32, f16, bf16, q8_0."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if type_name == "f32":
        return a.tobytes()
    if type_name == "f16":
        return a.astype(np.float16).tobytes()
    if type_name == "bf16":
        u = a.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    if type_name == "q8_0":
        return quantize_q8_0(a)
    raise ValueError(f"cannot write {type_name}")


def write_gguf(path, kv, tensors, alignment=32):
    """kv: [(key, type, value[, elem type])]; tensors: [(name, type name, float array in numpy
    order)]: ggml's ne is the array's shape reversed."""
    ids = {v[0]: k for k, v in GGML_TYPES.items()}
    head = GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for item in kv:
        key = item[0].encode()
        head += struct.pack("<Q", len(key)) + key + struct.pack("<I", item[1]) + _gguf_value(*item[1:])
    blobs, off = [], 0
    for name, tname, a in tensors:
        data = tensor_bytes(tname, a)
        nb = name.encode()
        ne = list(reversed(a.shape))
        head += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", ids[tname], off)
        blobs.append(data + bytes(padded(len(data), alignment) - len(data)))
        off += len(blobs[-1])
    with open(path, "wb") as f:
        f.write(head + bytes(padded(len(head), alignment) - len(head)) + b"".join(blobs))


# --------------------------------------------------------------------------------------------
# safetensors

ST_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def e4m3_to_f64(u8):
    """float8 e4m3fn bytes -> float64: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa
    bits; exponent 0 is subnormal (m/8 * 2^-6); S.1111.111 is NaN; no infinities."""
    u = np.asarray(u8, dtype=np.uint8).astype(np.int64)
    e, m = (u >> 3) & 15, u & 7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * np.exp2(e - 7.0))
    mag = np.where((e == 15) & (m == 7), np.nan, mag)
    return np.where(u & 0x80, -mag, mag)


def fp8_dequant(w, scale, block=128):
    """An F8_E4M3 weight ([..., rows, cols] bytes) times its block scales ([..., ceil(rows/block),
    ceil(cols/block)]), in float64 (exact: 4 + 24 significant bits)."""
    rows, cols = w.shape[-2:]
    s = np.repeat(np.repeat(np.asarray(scale, dtype=np.float64), block, axis=-2), block, axis=-1)
    return e4m3_to_f64(w) * s[..., :rows, :cols]


def round_bf16(x):
    """float64 -> the nearest bfloat16 (8 significant bits, ties to even), as float64."""
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(x)
    return np.ldexp(np.round(m * 256.0), e - 8)


def q8_0_roundtrip(x):
    """x (float32, rows of a multiple of 32) through ggml's Q8_0 and back."""
    x = np.asarray(x, dtype=np.float32)
    blocks = np.frombuffer(quantize_q8_0(x), dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(x.shape)


class SafeTensor:
    def __init__(self, name, dtype, shape, raw):
        self.name, self.dtype, self.shape, self.raw = name, dtype, tuple(shape), raw

    def array(self):
        """float32 copy in the stored shape (F32, F16 and BF16 only)."""
        if self.dtype == "F32":
            a = np.frombuffer(self.raw, dtype="<f4")
        elif self.dtype == "F16":
            a = np.frombuffer(self.raw, dtype="<f2").astype(np.float32)
        elif self.dtype == "BF16":
            a = bf16_to_f32(np.frombuffer(self.raw, dtype="<u2"))
        elif self.dtype == "F8_E4M3":  # the stored float8 values, unscaled
            a = e4m3_to_f64(np.frombuffer(self.raw, dtype=np.uint8))
        else:
            raise ValueError(f"tensor {self.name}: dtype {self.dtype} is not a float type")
        return a.reshape(self.shape).astype(np.float32, copy=True)


def read_safetensors(path):
    """name -> SafeTensor for one .safetensors file (raises ValueError when bad)."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: truncated")
    (hlen,) = struct.unpack("<Q", buf[:8])
    if hlen > len(buf) - 8:
        raise ValueError(f"{path}: header length past the end")
    header = json.loads(buf[8:8 + hlen].decode("utf-8"))
    data = buf[8 + hlen:]
    out, spans = {}, []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (b, en) = e["dtype"], e["shape"], e["data_offsets"]
        n = 1
        for s in shape:
            n *= s
        if dt not in ST_DTYPES or en - b != n * ST_DTYPES[dt] or not 0 <= b <= en <= len(data):
            raise ValueError(f"{path}: tensor {name}: bad dtype, shape or offsets")
        out[name] = SafeTensor(name, dt, shape, data[b:en])
        if en > b:
            spans.append((b, en, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ValueError(f"{path}: tensors {n0} and {n1} overlap")
    return out


def read_hf_dir(path):
    """(config.json as a dict, {hf name: SafeTensor}) of a Hugging Face directory."""
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(path, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        for file in sorted(set(weight_map.values())):
            shard = read_safetensors(os.path.join(path, file))
            for name in shard:
                if name in tensors:
                    raise ValueError(f"{path}: tensor {name} in two shards")
            tensors.update(shard)
        for name, file in weight_map.items():
            if name not in tensors:
                raise ValueError(f"{path}: the index names {name} in {file}, which lacks it")
    else:
        tensors = read_safetensors(os.path.join(path, "model.safetensors"))
    return config, tensors


# --------------------------------------------------------------------------------------------
# configs

CONFIG_FIELDS = ["arch", "n_layer", "n_embd", "n_vocab", "n_ctx_train", "rms_eps", "n_head", "n_head_kv",
                 "head_dim", "rope_dim", "rope_theta", "n_ff", "n_expert", "n_expert_used", "n_ff_exp",
                 "n_ff_shexp", "lin_k_heads", "lin_v_heads", "lin_k_dim", "lin_v_dim", "conv_kernel",
                 "layer_full", "n_mtp", "tied_embeddings", "mrope_sections", "mrope_interleaved", "yarn"]


def _empty_config():
    c = {k: 0 for k in CONFIG_FIELDS}
    c["layer_full"] = []
    c["mrope_sections"] = [0, 0, 0]  # [T, H, W] rotated pairs per axis; zeros: 1-D RoPE
    c["mrope_interleaved"] = False
    c["yarn"] = None  # or {factor, original_max_position_embeddings, beta_fast, beta_slow, attention_factor, truncate}
    return c


def _yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_from_hf(rope, max_pos):
    """Hugging Face's YaRN fields with its defaults (_compute_yarn_parameters)."""
    f = float(rope["factor"])
    att = rope.get("attention_factor")
    if att is None:
        ms, ms_all = rope.get("mscale"), rope.get("mscale_all_dim")
        att = _yarn_mscale(f, ms) / _yarn_mscale(f, ms_all) if ms and ms_all else _yarn_mscale(f)
    return {"factor": f, "original_max_position_embeddings": rope.get("original_max_position_embeddings") or max_pos,
            "beta_fast": rope.get("beta_fast") or 32, "beta_slow": rope.get("beta_slow") or 1,
            "attention_factor": float(att), "truncate": rope.get("truncate", True)}


def config_from_gguf(g):
    kv = {k: v.value for k, v in g.kv.items()}
    a = kv["general.architecture"]
    c = _empty_config()
    c["arch"] = a
    block_count = kv[f"{a}.block_count"]
    c["n_mtp"] = kv.get(f"{a}.nextn_predict_layers", 0)
    c["n_layer"] = block_count - c["n_mtp"]
    c["n_embd"] = kv[f"{a}.embedding_length"]
    c["n_ctx_train"] = kv[f"{a}.context_length"]
    c["rms_eps"] = kv[f"{a}.attention.layer_norm_rms_epsilon"]
    c["n_head"] = kv[f"{a}.attention.head_count"]
    c["n_head_kv"] = kv.get(f"{a}.attention.head_count_kv", c["n_head"])
    c["head_dim"] = kv.get(f"{a}.attention.key_length", c["n_embd"] // c["n_head"])
    c["rope_dim"] = kv.get(f"{a}.rope.dimension_count", c["head_dim"])
    c["rope_theta"] = kv.get(f"{a}.rope.freq_base", 10000.0)
    if a != "qwen3" and f"{a}.rope.dimension_sections" in kv:  # llama.cpp rotates qwen35's interleaved
        c["mrope_sections"] = [int(x) for x in kv[f"{a}.rope.dimension_sections"][:3]]
        c["mrope_interleaved"] = True
    if kv.get(f"{a}.rope.scaling.type") == "yarn":  # llama.cpp's converter's keys for a "yarn" rope_scaling
        sk = f"{a}.rope.scaling."
        y = {"factor": kv[sk + "factor"], "original_max_position_embeddings": kv.get(sk + "original_context_length"),
             "beta_fast": kv.get(sk + "yarn_beta_fast"), "beta_slow": kv.get(sk + "yarn_beta_slow"),
             "attention_factor": kv.get(sk + "yarn_attn_factor")}
        c["yarn"] = yarn_from_hf({k: v for k, v in y.items() if v is not None}, c["n_ctx_train"])
        c["yarn"]["attention_factor"] *= kv.get(sk + "attn_factor", 1.0)
    c["n_ff"] = kv.get(f"{a}.feed_forward_length", 0)
    if a == "qwen35moe":
        c["n_expert"] = kv[f"{a}.expert_count"]
        c["n_expert_used"] = kv[f"{a}.expert_used_count"]
        c["n_ff_exp"] = kv[f"{a}.expert_feed_forward_length"]
        c["n_ff_shexp"] = kv[f"{a}.expert_shared_feed_forward_length"]
    if a == "qwen3":
        c["layer_full"] = [True] * c["n_layer"]
    else:
        c["conv_kernel"] = kv[f"{a}.ssm.conv_kernel"]
        c["lin_k_dim"] = kv[f"{a}.ssm.state_size"]
        c["lin_k_heads"] = kv[f"{a}.ssm.group_count"]
        c["lin_v_heads"] = kv[f"{a}.ssm.time_step_rank"]
        c["lin_v_dim"] = kv[f"{a}.ssm.inner_size"] // c["lin_v_heads"]
        interval = kv.get(f"{a}.full_attention_interval", 4)
        c["layer_full"] = [(i + 1) % interval == 0 for i in range(c["n_layer"])]
    c["n_vocab"] = g.tensors["token_embd.weight"].ne[1]
    c["tied_embeddings"] = "output.weight" not in g.tensors
    return c


def text_config(cfg):
    """config.json's fields: text_config's, then the top level's."""
    merged = dict(cfg)
    merged.update(cfg.get("text_config") or {})
    return merged


def config_from_hf(cfg):
    t = text_config(cfg)
    mt = t["model_type"]
    arch = {"qwen3": "qwen3", "qwen3_5": "qwen35", "qwen3_5_text": "qwen35", "qwen3_5_moe": "qwen35moe",
            "qwen3_5_moe_text": "qwen35moe"}[mt]
    c = _empty_config()
    c["arch"] = arch
    c["n_layer"] = t["num_hidden_layers"]
    c["n_embd"] = t["hidden_size"]
    c["n_vocab"] = t["vocab_size"]
    c["n_ctx_train"] = t.get("max_position_embeddings", 32768)
    c["rms_eps"] = float(np.float32(t.get("rms_norm_eps", 1e-6)))
    c["n_head"] = t["num_attention_heads"]
    c["n_head_kv"] = t.get("num_key_value_heads", c["n_head"])
    c["head_dim"] = t.get("head_dim", c["n_embd"] // c["n_head"])
    rope = t.get("rope_parameters") or {}
    theta = rope.get("rope_theta", t.get("rope_theta", 1e6 if arch == "qwen3" else 1e7))
    factor = rope.get("partial_rotary_factor", t.get("partial_rotary_factor", 1.0 if arch == "qwen3" else 0.25))
    c["rope_theta"] = float(np.float32(theta))
    c["rope_dim"] = int(round(c["head_dim"] * factor))
    mrope = rope if "mrope_section" in rope else (t.get("rope_scaling") or {})
    scaling = rope if rope.get("rope_type", rope.get("type")) else (t.get("rope_scaling") or {})
    if scaling.get("rope_type", scaling.get("type")) == "yarn":
        c["yarn"] = yarn_from_hf(scaling, c["n_ctx_train"])
    if arch != "qwen3" and mrope.get("mrope_section"):
        c["mrope_sections"] = [int(x) for x in mrope["mrope_section"]]
        c["mrope_interleaved"] = bool(mrope.get("mrope_interleaved", True))
    c["tied_embeddings"] = bool(t.get("tie_word_embeddings", False))
    if arch == "qwen35moe":
        c["n_expert"] = t["num_experts"]
        c["n_expert_used"] = t["num_experts_per_tok"]
        c["n_ff_exp"] = t["moe_intermediate_size"]
        c["n_ff_shexp"] = t["shared_expert_intermediate_size"]
    else:
        c["n_ff"] = t["intermediate_size"]
    if arch == "qwen3":
        c["layer_full"] = [True] * c["n_layer"]
    else:
        c["lin_k_heads"] = t["linear_num_key_heads"]
        c["lin_v_heads"] = t["linear_num_value_heads"]
        c["lin_k_dim"] = t["linear_key_head_dim"]
        c["lin_v_dim"] = t["linear_value_head_dim"]
        c["conv_kernel"] = t.get("linear_conv_kernel_dim", 4)
        c["n_mtp"] = t.get("mtp_num_hidden_layers", 0)
        if "layer_types" in t:
            c["layer_full"] = [x == "full_attention" for x in t["layer_types"]]
        else:
            interval = t.get("full_attention_interval", 4)
            c["layer_full"] = [(i + 1) % interval == 0 for i in range(c["n_layer"])]
    return c


# --------------------------------------------------------------------------------------------
# Hugging Face -> canonical (the converter's conventions)

# HF name after "layers.<i>." -> GGUF name after "blk.<i>." (None: the pre-FFN norm, named per arch)
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": None,
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
MTP_NAMES = {"fc.weight": "nextn.eh_proj.weight", "pre_fc_norm_embedding.weight": "nextn.enorm.weight",
             "pre_fc_norm_hidden.weight": "nextn.hnorm.weight", "norm.weight": "nextn.shared_head_norm.weight"}
MTP_RENAMED = {"mtp.fc.weight": "model.layers.L.eh_proj.weight",
               "mtp.pre_fc_norm_embedding.weight": "model.layers.L.enorm.weight",
               "mtp.pre_fc_norm_hidden.weight": "model.layers.L.hnorm.weight",
               "mtp.norm.weight": "model.layers.L.shared_head.norm.weight"}
SPLIT_EXPERT = {"gate_proj": "ffn_gate_exps.weight", "up_proj": "ffn_up_exps.weight", "down_proj": "ffn_down_exps.weight"}


def tiled_order(hk, hv):
    """Tiled V head j holds grouped head (j % Hk) * (Hv / Hk) + j // Hk (both pair it with K head j % Hk)."""
    r = hv // hk
    return np.array([(j % hk) * r + j // hk for j in range(hv)])


def _permute(a, axis, start, hk, hv, d):
    """Permutes Hv blocks of d along axis, beginning at index start (grouped -> tiled)."""
    a = np.moveaxis(a, axis, 0).copy()
    block = a[start:start + hv * d].reshape((hv, d) + a.shape[1:])
    a[start:start + hv * d] = block[tiled_order(hk, hv)].reshape((hv * d,) + a.shape[1:])
    return np.moveaxis(a, 0, axis)


def tile_tensor(c, name, a):
    """The V-head reordering the converter applies to one canonical GDN tensor (a copy)."""
    hk, hv, dv = c["lin_k_heads"], c["lin_v_heads"], c["lin_v_dim"]
    if hk == hv:
        return a
    kd = hk * c["lin_k_dim"]
    suffix = name.split(".", 2)[2]
    if suffix == "attn_qkv.weight":
        return _permute(a, 0, 2 * kd, hk, hv, dv)
    if suffix == "attn_gate.weight":
        return _permute(a, 0, 0, hk, hv, dv)
    if suffix in ("ssm_beta.weight", "ssm_alpha.weight", "ssm_a", "ssm_dt.bias"):
        return _permute(a, 0, 0, hk, hv, 1)
    if suffix == "ssm_conv1d.weight":
        return _permute(a, 0, 2 * kd, hk, hv, dv)
    if suffix == "ssm_out.weight":
        return _permute(a, 1, 0, hk, hv, dv)
    return a


def to_tiled(c, tensors):
    """Canonical tensors in HF (grouped) V-head order -> tiled order (new dict)."""
    out = dict(tensors)
    for name, a in tensors.items():
        parts = name.split(".")
        if parts[0] == "blk" and int(parts[1]) < c["n_layer"] and not c["layer_full"][int(parts[1])]:
            out[name] = tile_tensor(c, name, a)
    return out


def hf_to_canonical(c, hf, tile=False):
    """HF tensors {name: float32 array} -> canonical tensors (see the module doc);
    with tile=True also the converter's grouped -> tiled V-head order."""
    qwen35 = c["arch"] != "qwen3"
    L = c["n_layer"]
    out, experts = {}, {}

    def put(name, a, hf_name):
        # the converter renames the MTP tensors first (mtp.pre_fc_norm_embedding -> model.layers.L.enorm,
        # mtp.norm -> model.layers.L.shared_head.norm, ...), then adds 1 to every "*norm.weight"
        # but linear_attn.norm.weight
        renamed = MTP_RENAMED.get(hf_name, hf_name)
        if renamed.endswith("norm.weight") and not renamed.endswith("linear_attn.norm.weight") and qwen35:
            a = a + np.float32(1.0)  # zero-centred: the scale is 1 + w
        if hf_name.endswith(".A_log"):
            a = -np.exp(a.astype(np.float64)).astype(np.float32)
        if "conv1d" in hf_name:
            a = a.reshape(a.shape[0], a.shape[2])  # [C, 1, K] -> [C, K]
        if name in out:
            raise ValueError(f"{name} twice")
        out[name] = np.ascontiguousarray(a, dtype=np.float32)

    def layer(block, rest, a, hf_name):
        if rest == "mlp.experts.gate_up_proj":  # [E, 2I, H]: gate rows first, then up
            i = a.shape[1] // 2
            put(f"blk.{block}.ffn_gate_exps.weight", a[:, :i, :], hf_name)
            put(f"blk.{block}.ffn_up_exps.weight", a[:, i:, :], hf_name)
            return
        parts = rest.split(".")
        if len(parts) == 5 and parts[:2] == ["mlp", "experts"] and parts[3] in SPLIT_EXPERT:
            experts.setdefault((block, parts[3]), {})[int(parts[2])] = a
            return
        if rest not in LAYER_NAMES:
            return
        g = LAYER_NAMES[rest] or ("ffn_norm.weight" if not qwen35 else "post_attention_norm.weight")
        put(f"blk.{block}.{g}", a, hf_name)

    for hf_name, a in hf.items():
        if hf_name.startswith(("model.visual.", "visual.")):
            continue
        if hf_name == "lm_head.weight":
            if not c["tied_embeddings"]:
                put("output.weight", a, hf_name)
            continue
        if hf_name.startswith("mtp."):
            if not c["n_mtp"]:
                continue
            body = hf_name[4:]
            if body.startswith("layers.0."):
                layer(L, body[len("layers.0."):], a, hf_name)
            elif body in MTP_NAMES:
                put(f"blk.{L}.{MTP_NAMES[body]}", a, hf_name)
            continue
        for prefix in ("model.language_model.", "model."):
            if hf_name.startswith(prefix):
                body = hf_name[len(prefix):]
                break
        else:
            continue
        if body == "embed_tokens.weight":
            put("token_embd.weight", a, hf_name)
        elif body == "norm.weight":
            put("output_norm.weight", a, hf_name)
        elif body.startswith("layers."):
            i, rest = body[len("layers."):].split(".", 1)
            layer(int(i), rest, a, hf_name)
    for (block, proj), mats in experts.items():
        if sorted(mats) != list(range(c["n_expert"])):
            raise ValueError(f"layer {block}: experts of {proj} incomplete")
        out[f"blk.{block}.{SPLIT_EXPERT[proj]}"] = np.stack([mats[e] for e in range(c["n_expert"])])
    return to_tiled(c, out) if tile else out


def hf_to_gguf(c, hf):
    """What llama.cpp's converter makes of HF tensors: canonical, V heads tiled."""
    return hf_to_canonical(c, hf, tile=True)


# --------------------------------------------------------------------------------------------
# models

class Model:
    def __init__(self, fmt, config, tensors, v_heads_tiled, raw):
        self.format, self.config, self.tensors, self.v_heads_tiled, self.raw = fmt, config, tensors, v_heads_tiled, raw


def open_model(path, fp8_as=None):
    """A .gguf file or a Hugging Face directory as a Model (see the module doc). The float8
    weights of an FP8 checkpoint are dequantised exactly, or with fp8_as "bf16" / "q8_0" as
    deltaserve's loader converts them (fp8.h): the exact value rounded to BF16, or rounded to
    F32 and through Q8_0 (rows of a multiple of 32; others BF16)."""
    if os.path.isdir(path):
        cfg, st = read_hf_dir(path)
        c = config_from_hf(cfg)
        arrays = {n: t.array() for n, t in st.items()
                  if not n.startswith(("model.visual.", "visual.")) and t.dtype in ("F32", "F16", "BF16")
                  and not n.endswith("_scale_inv")}
        # an FP8 checkpoint (quantization_config.quant_method "fp8"): each float8 weight times the
        # block scale "<name>_scale_inv" of its 128x128 block
        for n, t in st.items():
            if t.dtype == "F8_E4M3" and not n.startswith(("model.visual.", "visual.")):
                raw = np.frombuffer(t.raw, dtype=np.uint8).reshape(t.shape)
                exact = fp8_dequant(raw, st[n + "_scale_inv"].array())
                if fp8_as == "q8_0" and t.shape[-1] % 32 == 0:
                    arrays[n] = q8_0_roundtrip(exact.astype(np.float32))
                elif fp8_as is not None:
                    arrays[n] = round_bf16(exact).astype(np.float32)
                else:
                    arrays[n] = exact.astype(np.float32)
        return Model("safetensors", c, hf_to_canonical(c, arrays), False, st)
    g = read_gguf(path)
    c = config_from_gguf(g)
    return Model("gguf", c, {n: t.array() for n, t in g.tensors.items()}, c["arch"] != "qwen3", g)


# --------------------------------------------------------------------------------------------
# quantisation (ggml's reference, for comparisons)

def quantize_q8_0(x):
    """ggml's quantize_row_q8_0_ref: per 32 values d = amax / 127, q = round(x / d)
    (half away from zero), d stored as fp16. Returns the block bytes."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.max(np.abs(x), axis=1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = x * inv[:, None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
    out = np.zeros((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def q8_0_error_bound(x):
    """Largest |x - dequant(quant(x))| a correct Q8_0 allows, per element of x:
    half a step, plus what rounding the scale to fp16 moves 127 steps."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, 32)
    d = np.max(np.abs(x), axis=1) / 127.0
    bound = 0.5 * d + 127.0 * (d * 2.0 ** -11 + 2.0 ** -25) + 1e-30
    return np.repeat(bound, 32)


def ulp_distance(a, b):
    """Elementwise distance in float32 units in the last place."""
    ia = np.asarray(a, dtype=np.float32).view(np.int32).astype(np.int64)
    ib = np.asarray(b, dtype=np.float32).view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


__all__ = ["open_model", "Model", "read_gguf", "read_safetensors", "read_hf_dir", "config_from_gguf",
           "config_from_hf", "text_config", "hf_to_canonical", "hf_to_gguf", "to_tiled", "tile_tensor",
           "tiled_order", "e4m3_to_f64", "fp8_dequant", "round_bf16", "q8_0_roundtrip", "quantize_q8_0", "q8_0_error_bound", "ulp_distance", "padded", "GGML_TYPES", "GGML_ID",
           "TYPE_NAMES", "CONFIG_FIELDS"]
