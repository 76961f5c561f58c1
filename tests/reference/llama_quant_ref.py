"""llama_quant_ref.py - the tensor types llama.cpp's llama-quantize gives each
tensor of a model at each file type, written in Python from llama.cpp's
src/llama-quant.cpp (tensor_allows_quantization, tensor_get_category,
llama_tensor_get_type_impl, tensor_type_fallback, llama_ftype_get_default_type)
and not from deltaserve's C code, so that the two can check each other.
No importance matrix: the choices llama-quantize makes without one.

    FTYPES                        # name -> (LLAMA_FTYPE number, default ggml type name)
    plan(g, ftype, overrides=())  # g: a model_files.GGUFFile (names, shapes, metadata);
                                  # overrides: [(regex, type name)], the first match wins
                                  # -> {tensor name: ggml type name}
"""

import re

# llama-quantize's file types: LLAMA_FTYPE_* number, default tensor type
FTYPES = {
    "F32": (0, "f32"), "F16": (1, "f16"), "BF16": (32, "bf16"), "Q8_0": (7, "q8_0"),
    "Q4_0": (2, "q4_0"), "Q4_1": (3, "q4_1"), "Q5_0": (8, "q5_0"), "Q5_1": (9, "q5_1"),
    "Q2_K": (10, "q2_k"), "Q2_K_S": (21, "q2_k"), "Q3_K_S": (11, "q3_k"), "Q3_K_M": (12, "q3_k"),
    "Q3_K_L": (13, "q3_k"), "Q4_K_S": (14, "q4_k"), "Q4_K_M": (15, "q4_k"), "Q5_K_S": (16, "q5_k"),
    "Q5_K_M": (17, "q5_k"), "Q6_K": (18, "q6_k"), "IQ2_XXS": (19, "iq2_xxs"), "IQ2_XS": (20, "iq2_xs"),
    "IQ2_S": (28, "iq2_xs"), "IQ2_M": (29, "iq2_s"), "IQ3_XXS": (23, "iq3_xxs"), "IQ3_XS": (22, "iq3_s"),
    "IQ3_S": (26, "iq3_s"), "IQ3_M": (27, "iq3_s"), "IQ1_S": (24, "iq1_s"), "IQ1_M": (31, "iq1_m"),
    "IQ4_NL": (25, "iq4_nl"), "IQ4_XS": (30, "iq4_xs"), "TQ1_0": (36, "tq1_0"), "TQ2_0": (37, "tq2_0"),
    "MXFP4_MOE": (38, "mxfp4"),
}

BLOCK = {"f32": 1, "f16": 1, "bf16": 1, "q8_0": 32, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q5_1": 32,
         "iq4_nl": 32, "mxfp4": 32, "nvfp4": 64}  # every other type: 256
FALLBACK = {**{t: "iq4_nl" for t in ("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq4_xs")},
            **{t: "q4_0" for t in ("q2_k", "q3_k", "tq1_0", "tq2_0")},
            "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}

IQ2_LIKE = {"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"}


def block(t):
    return BLOCK.get(t, 256)


def allows_quantization(name, ne):
    dims = max([i + 1 for i, n in enumerate(ne) if n > 1] or [1])  # ggml_n_dims
    return (dims >= 2 and name.endswith("weight") and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name and "ssm_conv1d" not in name)


def category(name):
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"), ("attn_v.weight", "attn_v"),
                     ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"),
                     ("attn_output.weight", "attn_output"), ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"),
                     ("ffn_down", "ffn_down")):
        if key in name:
            return cat
    return "other"


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def layer_of(name):
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


class _State:
    def __init__(self, g, ftype):
        kv = {k: v.value for k, v in g.kv.items()}
        a = kv["general.architecture"]
        self.ftype = ftype
        self.n_expert = kv.get(f"{a}.expert_count", 0)
        n_head, n_head_kv = kv[f"{a}.attention.head_count"], kv.get(f"{a}.attention.head_count_kv")
        n_head_kv = n_head if n_head_kv is None else n_head_kv
        self.gqa = n_head // n_head_kv if n_head_kv else 0
        self.n_layer = kv[f"{a}.block_count"]  # the MTP block included
        self.tied = "output.weight" not in g.tensors
        self.n_attn_v = sum(1 for t in g.tensors.values()
                            if allows_quantization(t.name, t.ne) and category(t.name) == "attn_v")
        self.i_attn_v = self.i_down = self.i_gate = self.i_up = 0

    def ffn_layer(self, name, counter):
        return layer_of(name) if self.n_expert > 1 else counter

    def choose(self, name, ne, default):
        f, cat, new = self.ftype, category(name), default
        if cat == "output" or (self.tied and cat == "token_embd"):
            if f == "MXFP4_MOE" or ne[0] % block(new):
                return "q8_0"
            if f in ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"):
                return "q5_k"
            return new if new == "q8_0" else "q6_k"
        if f == "MXFP4_MOE":
            return "mxfp4" if len(ne) > 2 and ne[2] > 1 else "q8_0"
        if cat == "token_embd":
            return {"IQ2_XXS": "q2_k", "IQ2_XS": "q2_k", "IQ1_S": "q2_k", "IQ1_M": "q2_k", "IQ2_S": "iq3_s",
                    "IQ2_M": "iq3_s", "IQ3_XXS": "iq3_s", "TQ1_0": "q4_k", "TQ2_0": "q4_k"}.get(f, new)
        if f in IQ2_LIKE:
            sm = f in ("IQ2_S", "IQ2_M")
            if cat == "attn_v":
                self.i_attn_v += 1
                return "q4_k" if self.gqa >= 4 or self.n_expert >= 4 else "iq3_s" if sm else "q2_k"
            if cat == "attn_k" and self.n_expert == 8:
                return "q4_k"
            if cat == "ffn_down":
                i = self.i_down
                self.i_down += 1
                return ("iq3_s" if sm else "q2_k") if i < self.n_layer // 8 else new
            if cat == "attn_output":
                if self.n_expert == 8:
                    return "q5_k"
                return "iq2_xxs" if f in ("IQ1_S", "IQ1_M") else "iq3_s" if sm else new
            return new
        if cat == "attn_v":
            i = self.i_attn_v
            self.i_attn_v += 1
            g4 = self.gqa >= 4
            if f == "Q2_K":
                new = "q4_k" if g4 else "q3_k"
            elif f == "Q2_K_S" and g4:
                new = "q4_k"
            elif f == "IQ3_XXS":
                new = "q4_k" if g4 else "iq3_s"
            elif f in ("IQ3_XS", "IQ3_S") and g4:
                new = "q4_k"
            elif f == "IQ3_M":
                new = "q4_k"
            elif f == "Q3_K_M":
                new = "q5_k" if i < 2 else "q4_k"
            elif f == "Q3_K_L":
                new = "q5_k"
            elif f in ("IQ4_NL", "IQ4_XS") and g4:
                new = "q5_k"
            elif f in ("Q4_K_M", "Q5_K_M") and more_bits(i, self.n_attn_v):
                new = "q6_k"
            elif f == "Q4_K_S" and i < 4:
                new = "q5_k"
            return "q8_0" if self.n_expert == 8 else new
        if cat == "attn_k":
            if self.n_expert == 8:
                return "q8_0"
            return {"IQ3_XS": "iq3_xxs", "IQ3_XXS": "iq2_s"}.get(f, new)
        if cat == "attn_q":
            return {"IQ3_XS": "iq3_xxs", "IQ3_XXS": "iq2_s"}.get(f, new)
        if cat == "ffn_down":
            i, n = self.ffn_layer(name, self.i_down), self.n_layer
            self.i_down += 1
            if f == "Q2_K":
                return "q3_k"
            if f == "Q2_K_S":
                return "q4_k" if i < n // 8 else new
            if f == "IQ3_XXS":
                return "q4_k" if i < n // 8 else "q3_k"
            if f == "Q3_K_M":
                return "q5_k" if i < n // 16 else "q4_k"
            if f == "IQ3_M" and (i < n // 8 or (self.n_expert == 8 and more_bits(i, n))):
                return "q4_k"
            if f == "Q3_K_L":
                return "q5_k"
            if f == "Q4_K_M":
                return "q6_k" if more_bits(i, n) else new
            if i < n // 8 and f in ("IQ4_NL", "IQ4_XS"):
                return "q5_k"
            if f == "Q5_K_M" and more_bits(i, n):
                return "q6_k"
            if f == "Q4_K_S" and i < n // 8:
                return "q5_k"
            return new
        if cat == "attn_output":
            if self.n_expert == 8:
                return "q5_k" if f in ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S",
                                       "Q4_K_M", "IQ3_S", "IQ3_M", "IQ4_XS") else new
            return {"Q2_K": "q3_k", "IQ3_XXS": "iq3_s", "Q3_K_M": "q4_k", "Q3_K_L": "q5_k",
                    "IQ3_M": "q4_k"}.get(f, new)
        if cat in ("ffn_gate", "ffn_up"):
            counter = self.i_gate if cat == "ffn_gate" else self.i_up
            i, n = self.ffn_layer(name, counter), self.n_layer
            if cat == "ffn_gate":
                self.i_gate += 1
            else:
                self.i_up += 1
            return "iq3_xxs" if f == "IQ3_XS" and n // 8 <= i < 7 * n // 8 else new
        return new


def fallback(t, ncols):
    if ncols % block(t) == 0:
        return t
    if t not in FALLBACK:
        raise ValueError(f"no fallback for {t} with rows of {ncols}")
    r = FALLBACK[t]
    return r if ncols % block(r) == 0 else "f16"


def plan(g, ftype, overrides=()):
    """{tensor name: ggml type name} for file type ftype (a FTYPES key)."""
    default = FTYPES[ftype][1]
    st = _State(g, ftype)
    out = {}
    # llama.cpp visits the tensors by layer (none first), then by name
    for t in sorted(g.tensors.values(), key=lambda t: (layer_of(t.name), t.name)):
        if not allows_quantization(t.name, t.ne):
            out[t.name] = "f32"  # make-model writes these in F32, and llama-quantize keeps them
            continue
        forced = next((typ.lower() for rx, typ in overrides if re.search(rx, t.name, re.IGNORECASE)), None)
        if forced:
            new = forced
        elif default in ("f32", "f16", "bf16"):
            new = default
        else:
            new = st.choose(t.name, t.ne, default)
        out[t.name] = fallback(new, t.ne[0])
    return out
