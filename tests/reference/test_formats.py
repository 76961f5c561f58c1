"""test_formats.py - checks make-model's GGUF files against llama.cpp's
conventions, independently of deltaserve's C code.

For the shapes tiny, tiny-moe and tiny-qwen3, `$DS_BIN make-model` writes the
same weights as a Hugging Face directory (F32) and as GGUF (F32, Q8_0, Q4_K_M).
model_files.py reads them with numpy and applies the llama.cpp converter's
conventions to the HF tensors (norm + 1 except linear_attn.norm, ssm_a =
-exp(A_log), conv1d squeeze, grouped -> tiled V heads in in_proj_qkv's V rows,
in_proj_z, in_proj_a/b, A_log, dt_bias, conv1d's V channels and out_proj's
columns, gate_up split); the result must equal the GGUF tensors: exactly for
F32 (ssm_a within 1 ulp, since exp may round either way), within the Q8_0
error bound for Q8_0. Also checked, from llama.cpp's loader and converter:
the metadata keys it requires, with their GGUF types (u32 vs i32, f32, ...)
and values; the tensor set with every shape and n_dims; tensor types (the
converter's forced-F32 set, llama-quantize's Q4_K_M mix); and the data
layout (offsets in order, each padded to the alignment).

Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
Uses $DS_BIN (default build/deltaserve) and $DS_TMP (default a new temp dir).
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_files as mf  # noqa: E402

FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "q4_k_m": 15, "bf16": 32}  # llama_ftype
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Results:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, fn, *args):
        try:
            problem = fn(*args)
        except Exception as exc:  # a crash in one check must not hide the others
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            self.failed += 1
            lines = problem if isinstance(problem, list) else [problem]
            print(f"FAIL {name}: {lines[0]}")
            for more in lines[1:8]:
                print(f"     {name}: {more}")
        else:
            self.passed += 1
            print(f"ok {name}")
        sys.stdout.flush()


def make_model(binary, out, shape, dtype, fmt, extra=()):
    cmd = [binary, "make-model", "--shape", shape, "--dtype", dtype, "--format", fmt, "--seed", "3", "--out", out]
    cmd += list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")


# ---------------------------------------------------------------------------------------------
# what llama.cpp expects, from the config alone

def expected_tensors(c):
    """GGUF name -> ne (ggml order) per llama.cpp's qwen3 / qwen35 / qwen35moe loaders."""
    E, V, L = c["n_embd"], c["n_vocab"], c["n_layer"]
    q35 = c["arch"] != "qwen3"
    Dh, Dq, Dkv = c["head_dim"], c["head_dim"] * c["n_head"], c["head_dim"] * c["n_head_kv"]
    t = {"token_embd.weight": (E, V), "output_norm.weight": (E,)}
    if not c["tied_embeddings"]:
        t["output.weight"] = (E, V)

    def ffn(b):
        if c["arch"] == "qwen35moe":
            X, Fe, Fs = c["n_expert"], c["n_ff_exp"], c["n_ff_shexp"]
            t.update({f"{b}.ffn_gate_inp.weight": (E, X), f"{b}.ffn_gate_exps.weight": (E, Fe, X),
                      f"{b}.ffn_up_exps.weight": (E, Fe, X), f"{b}.ffn_down_exps.weight": (Fe, E, X),
                      f"{b}.ffn_gate_inp_shexp.weight": (E, 1), f"{b}.ffn_gate_shexp.weight": (E, Fs),
                      f"{b}.ffn_up_shexp.weight": (E, Fs), f"{b}.ffn_down_shexp.weight": (Fs, E)})
        else:
            F = c["n_ff"]
            t.update({f"{b}.ffn_gate.weight": (E, F), f"{b}.ffn_up.weight": (E, F), f"{b}.ffn_down.weight": (F, E)})

    def attention(b):
        t.update({f"{b}.attn_q.weight": (E, 2 * Dq if q35 else Dq), f"{b}.attn_k.weight": (E, Dkv),
                  f"{b}.attn_v.weight": (E, Dkv), f"{b}.attn_output.weight": (Dq, E),
                  f"{b}.attn_q_norm.weight": (Dh,), f"{b}.attn_k_norm.weight": (Dh,)})

    for i in range(L + c["n_mtp"]):
        b = f"blk.{i}"
        t[f"{b}.attn_norm.weight"] = (E,)
        t[f"{b}.{'post_attention_norm' if q35 else 'ffn_norm'}.weight"] = (E,)
        if i >= L or c["layer_full"][i]:
            attention(b)
        else:
            Ds, Hk, Hv, Kc = c["lin_k_dim"], c["lin_k_heads"], c["lin_v_heads"], c["conv_kernel"]
            kd, vd = Ds * Hk, c["lin_v_dim"] * Hv
            t.update({f"{b}.attn_qkv.weight": (E, 2 * kd + vd), f"{b}.attn_gate.weight": (E, vd),
                      f"{b}.ssm_conv1d.weight": (Kc, 2 * kd + vd), f"{b}.ssm_dt.bias": (Hv,), f"{b}.ssm_a": (Hv,),
                      f"{b}.ssm_beta.weight": (E, Hv), f"{b}.ssm_alpha.weight": (E, Hv),
                      f"{b}.ssm_norm.weight": (c["lin_v_dim"],), f"{b}.ssm_out.weight": (vd, E)})
        ffn(b)
        if i >= L:
            t.update({f"{b}.nextn.eh_proj.weight": (2 * E, E), f"{b}.nextn.enorm.weight": (E,),
                      f"{b}.nextn.hnorm.weight": (E,), f"{b}.nextn.shared_head_norm.weight": (E,)})
    return t


def layer_of(name):
    return int(name.split(".")[1]) if name.startswith("blk.") else -1


def converter_type(name, ne, dtype):
    """The ggml type convert_hf_to_gguf.py writes (prepare_tensors)."""
    forced = (len(ne) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight")
              or any(k in name for k in ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")))
    if forced or dtype == "f32":
        return "f32"
    if dtype == "q8_0":
        return "q8_0" if ne[0] % 32 == 0 else "f16"
    return dtype


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


BLOCK = {"q4_k": 256, "q5_k": 256, "q6_k": 256, "q8_0": 32, "q4_0": 32, "q5_0": 32, "q5_1": 32, "f16": 1, "f32": 1}
FALLBACK = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}


def q4_k_m_type(name, ne, c):
    """llama-quantize's Q4_K_M choice (llama_tensor_get_type) for a converter F32 file."""
    n_dims = len(ne)
    while n_dims > 1 and ne[n_dims - 1] == 1:
        n_dims -= 1
    if (n_dims < 2 or not name.endswith("weight") or "_norm.weight" in name or "ffn_gate_inp.weight" in name
            or "ssm_conv1d" in name):
        return "f32"
    n_all = c["n_layer"] + c["n_mtp"]
    eight = c["n_expert"] == 8  # llama.cpp's special case for 8-expert models
    i = layer_of(name)
    tied = c["tied_embeddings"]
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        t = "q6_k" if ne[0] % 256 == 0 else "q8_0"
    elif name == "token_embd.weight":
        t = "q4_k"
    elif "attn_qkv.weight" in name or "attn_v.weight" in name:
        t = "q8_0" if eight else "q6_k" if use_more_bits(i, n_all) else "q4_k"
    elif "attn_k.weight" in name:
        t = "q8_0" if eight else "q4_k"
    elif "attn_output.weight" in name:
        t = "q5_k" if eight else "q4_k"
    elif "ffn_down" in name:
        t = "q6_k" if use_more_bits(i, n_all) else "q4_k"
    else:
        t = "q4_k"
    if ne[0] % BLOCK[t]:
        t = FALLBACK.get(t, t)
        if ne[0] % BLOCK.get(t, 32):
            t = "f16"
    return t


# ---------------------------------------------------------------------------------------------
# checks

def check_metadata(g, hf_cfg, c, dtype):
    """The keys llama.cpp reads for this arch, with exactly the GGUF types it requires."""
    A = c["arch"]
    t = mf.text_config(hf_cfg)
    errors = []
    kv = g.kv

    def want(key, type_, value=None, required=True, elem=None, length=None):
        if key not in kv:
            if required:
                errors.append(f"{key} is missing")
            return
        v = kv[key]
        if v.type != type_:
            errors.append(f"{key} is {mf.TYPE_NAMES[v.type]}, llama.cpp needs {mf.TYPE_NAMES[type_]}")
            return
        if type_ == mf.ARRAY:
            if v.elem_type not in elem:
                errors.append(f"{key} is an array of {mf.TYPE_NAMES[v.elem_type]}")
            if length is not None and len(v.value) != length:
                errors.append(f"{key} has {len(v.value)} elements, expected {length}")
        if value is not None:
            got = v.value
            if isinstance(value, float):
                ok = np.float32(got) == np.float32(value)
            else:
                ok = got == value
            if not ok:
                errors.append(f"{key} = {str(got)[:80]}, expected {str(value)[:80]}")

    U32, F32, STR, BOOL, ARR = mf.U32, mf.F32, mf.STRING, mf.BOOL, mf.ARRAY
    want("general.architecture", STR, A)
    want("general.alignment", U32, required=False)
    want("general.file_type", U32, FILE_TYPE[dtype])
    want("general.quantization_version", U32, 2)
    want("general.name", STR, required=False)
    n_mtp = t.get("mtp_num_hidden_layers", 0) if A != "qwen3" else 0
    want(f"{A}.block_count", U32, t["num_hidden_layers"] + n_mtp)
    want(f"{A}.context_length", U32, t["max_position_embeddings"])
    want(f"{A}.embedding_length", U32, t["hidden_size"])
    want(f"{A}.attention.head_count", U32, t["num_attention_heads"])
    want(f"{A}.attention.head_count_kv", U32, t["num_key_value_heads"])
    want(f"{A}.attention.key_length", U32, t["head_dim"])
    want(f"{A}.attention.value_length", U32, t["head_dim"])
    want(f"{A}.attention.layer_norm_rms_epsilon", F32, float(t["rms_norm_eps"]))
    rope = t.get("rope_parameters") or {}
    want(f"{A}.rope.freq_base", F32, float(rope.get("rope_theta", t.get("rope_theta", 10000.0))), required=False)
    if A == "qwen35moe":
        want(f"{A}.expert_count", U32, t["num_experts"])
        want(f"{A}.expert_used_count", U32, t["num_experts_per_tok"])
        want(f"{A}.expert_feed_forward_length", U32, t["moe_intermediate_size"])
        want(f"{A}.expert_shared_feed_forward_length", U32, t["shared_expert_intermediate_size"])
    else:
        want(f"{A}.feed_forward_length", U32, t["intermediate_size"])
    if A != "qwen3":
        sections = list(rope.get("mrope_section", [11, 11, 10])) + [0]
        want(f"{A}.rope.dimension_sections", ARR, sections, elem=(mf.I32, mf.U32), length=4)
        want(f"{A}.rope.dimension_count", U32, int(t["head_dim"] * rope.get("partial_rotary_factor", 0.25)))
        want(f"{A}.ssm.conv_kernel", U32, t["linear_conv_kernel_dim"])
        want(f"{A}.ssm.state_size", U32, t["linear_key_head_dim"])
        want(f"{A}.ssm.group_count", U32, t["linear_num_key_heads"])
        want(f"{A}.ssm.time_step_rank", U32, t["linear_num_value_heads"])
        want(f"{A}.ssm.inner_size", U32, t["linear_value_head_dim"] * t["linear_num_value_heads"])
        want(f"{A}.full_attention_interval", U32, t.get("full_attention_interval", 4), required=False)
        if n_mtp:
            want(f"{A}.nextn_predict_layers", U32, n_mtp)
        # llama.cpp sizes the V heads of GDN tensors with ssm.state_size: Dk must equal Dv
        if t["linear_key_head_dim"] != t["linear_value_head_dim"]:
            errors.append("linear_key_head_dim != linear_value_head_dim: llama.cpp cannot load it")
    n_vocab = g.tensors["token_embd.weight"].ne[1]
    want("tokenizer.ggml.model", STR, "gpt2")
    want("tokenizer.ggml.pre", STR)
    if "tokenizer.ggml.pre" in kv and kv["tokenizer.ggml.pre"].value not in ("qwen2", "qwen35"):
        errors.append(f"tokenizer.ggml.pre is {kv['tokenizer.ggml.pre'].value!r}")
    want("tokenizer.ggml.tokens", ARR, elem=(STR,), length=n_vocab)
    want("tokenizer.ggml.token_type", ARR, elem=(mf.I32,), length=n_vocab)
    want("tokenizer.ggml.merges", ARR, elem=(STR,))
    for k in ("eos", "bos", "padding", "eot", "unknown"):
        key = f"tokenizer.ggml.{k}_token_id"
        want(key, U32, required=k == "eos")
        if key in kv and kv[key].type == U32 and not kv[key].value < n_vocab:
            errors.append(f"{key} = {kv[key].value} is outside the vocabulary")
    want("tokenizer.ggml.add_bos_token", BOOL, required=False)
    want("tokenizer.chat_template", STR, required=False)
    # every key of the architecture's namespace has a type llama.cpp accepts
    for key, v in kv.items():
        if key.startswith(A + ".") and v.type not in (U32, F32, BOOL, STR, ARR):
            errors.append(f"{key} has type {mf.TYPE_NAMES[v.type]}")
    return errors


def check_tensor_set(g, c, conv):
    """Names, ne and n_dims: llama.cpp's expectations, and what the converter writes."""
    errors = []
    want = expected_tensors(c)
    names = list(g.tensors)
    if sorted(names) != sorted(want):
        missing = sorted(set(want) - set(names))
        extra = sorted(set(names) - set(want))
        errors.append(f"tensor set differs: missing {missing[:5]}, extra {extra[:5]}")
    if sorted(conv) != sorted(want):
        errors.append(f"the converter would write {len(conv)} tensors, llama.cpp expects {len(want)}: "
                      f"{sorted(set(conv) ^ set(want))[:5]}")
    for name, t in g.tensors.items():
        if name in want and t.ne != want[name]:
            errors.append(f"{name}: ne {t.ne}, llama.cpp expects {want[name]}")
        if name in conv and t.ne != tuple(reversed(conv[name].shape)):
            errors.append(f"{name}: ne {t.ne}, the converter writes {tuple(reversed(conv[name].shape))} "
                          f"({len(conv[name].shape)} dims)")
    return errors


def check_types(g, c, dtype):
    errors = []
    for name, t in g.tensors.items():
        want = q4_k_m_type(name, t.ne, c) if dtype == "q4_k_m" else converter_type(name, t.ne, dtype)
        if t.type_name != want:
            errors.append(f"{name} {t.ne}: {t.type_name}, llama.cpp's rules give {want}")
    return errors


def check_layout(g):
    """Offsets follow each other in tensor-info order, each tensor padded to the alignment."""
    errors = []
    off = 0
    for name, t in g.tensors.items():
        if t.offset != off:
            errors.append(f"{name}: offset {t.offset}, expected {off}")
        off = mf.padded(t.offset + t.nbytes, g.alignment)
    if g.data_offset + off != g.size:
        errors.append(f"file is {g.size} bytes, the layout ends at {g.data_offset + off}")
    return errors


def check_values(g, conv, dtype, info):
    """The GGUF tensors equal the converter's output: exactly (F32; ssm_a within
    1 ulp), or within the Q8_0 bound."""
    errors = []
    q8_blocks = q8_same = 0
    for name, t in g.tensors.items():
        if name not in conv:
            continue
        want = conv[name]
        got = t.array()
        if got.shape != want.shape:
            errors.append(f"{name}: shape {got.shape} vs {want.shape}")
            continue
        if t.type_name == "f32":
            if name.endswith(".ssm_a"):
                d = int(mf.ulp_distance(got, want).max())
                if d > 1:
                    errors.append(f"{name}: {d} ulp from -exp(A_log)")
            elif not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                bad = np.flatnonzero(got.ravel() != want.ravel())
                i = bad[0] if bad.size else 0
                errors.append(f"{name}: {bad.size} of {got.size} values differ; first at {i}: "
                              f"gguf {got.ravel()[i]!r}, converter {want.ravel()[i]!r}")
        elif t.type_name == "q8_0":
            x = want.ravel()
            err = np.abs(got.ravel().astype(np.float64) - x.astype(np.float64))
            bound = mf.q8_0_error_bound(x)
            if np.any(err > bound):
                i = int(np.argmax(err - bound))
                errors.append(f"{name}: error {err[i]:.3g} at {i} exceeds the Q8_0 bound {bound[i]:.3g}")
            ref = np.frombuffer(mf.quantize_q8_0(x), dtype=np.uint8).reshape(-1, 34)
            mine = np.frombuffer(t.data, dtype=np.uint8).reshape(-1, 34)
            q8_blocks += ref.shape[0]
            q8_same += int(np.sum(np.all(ref == mine, axis=1)))
        else:
            errors.append(f"{name}: unexpected type {t.type_name} for a {dtype} file")
    if q8_blocks:
        info.append(f"{q8_same} of {q8_blocks} Q8_0 blocks are byte-identical to ggml's reference quantiser")
    return errors


def check_v_head_order(c, hf_canon, gguf_canon):
    """With Hk != Hv the grouped (HF) and tiled (GGUF) orders differ, and to_tiled maps one to the other."""
    if c["arch"] == "qwen3":
        return None
    errors = []
    order = mf.tiled_order(c["lin_k_heads"], c["lin_v_heads"])
    hk, r = c["lin_k_heads"], c["lin_v_heads"] // c["lin_k_heads"]
    for j, h in enumerate(order):  # the K head each format pairs a V head with is the same
        if j % hk != h // r:
            errors.append(f"V head {j}: tiled K head {j % hk}, grouped source {h} has K head {h // r}")
    tiled = mf.to_tiled(c, hf_canon)
    n = 0
    for name in gguf_canon:
        if layer_of(name) < 0 or layer_of(name) >= c["n_layer"] or c["layer_full"][layer_of(name)]:
            continue
        if name.split(".", 2)[2] in ("attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight",
                                     "ssm_a", "ssm_dt.bias", "ssm_conv1d.weight", "ssm_out.weight"):
            n += 1
            if np.array_equal(hf_canon[name], gguf_canon[name]):
                errors.append(f"{name}: same in grouped and tiled order")
            if name.endswith("ssm_a"):
                if int(mf.ulp_distance(tiled[name], gguf_canon[name]).max()) > 1:
                    errors.append(f"{name}: to_tiled(HF) != GGUF")
            elif not np.array_equal(tiled[name], gguf_canon[name]):
                errors.append(f"{name}: to_tiled(HF) != GGUF")
    if n != 8 * sum(1 for f in c["layer_full"] if not f):
        errors.append(f"{n} V-head tensors checked")
    return errors


def check_open_model(gguf_path, hf_path):
    """open_model gives the same config for both formats, and the flag for the V-head order."""
    a, b = mf.open_model(gguf_path), mf.open_model(hf_path)
    errors = []
    for k in mf.CONFIG_FIELDS:
        if k == "n_vocab":
            continue  # the HF config states the vocabulary, GGUF the embedding rows; checked below
        va, vb = a.config[k], b.config[k]
        if isinstance(va, float) or isinstance(vb, float):
            same = np.float32(va) == np.float32(vb)
        else:
            same = va == vb
        if not same:
            errors.append(f"config {k}: gguf {va}, safetensors {vb}")
    if a.config["n_vocab"] != b.raw["model.language_model.embed_tokens.weight" if "model.language_model.embed_tokens.weight" in b.raw else "model.embed_tokens.weight"].shape[0]:
        errors.append("n_vocab differs from the HF embedding rows")
    if a.v_heads_tiled != (a.config["arch"] != "qwen3") or b.v_heads_tiled:
        errors.append("v_heads_tiled")
    if sorted(a.tensors) != sorted(b.tensors):
        errors.append(f"tensor names differ: {sorted(set(a.tensors) ^ set(b.tensors))[:5]}")
    return errors


def main():
    binary = os.environ.get("DS_BIN") or os.path.join(ROOT, "build", "deltaserve")
    base = os.environ.get("DS_TMP") or None
    tmp = tempfile.mkdtemp(prefix="formats.", dir=base)
    res = Results()
    try:
        for shape in ("tiny", "tiny-moe", "tiny-qwen3"):
            hf = os.path.join(tmp, f"{shape}-hf")
            ggufs = {d: os.path.join(tmp, f"{shape}-{d}.gguf") for d in ("f32", "q8_0", "q4_k_m")}
            try:
                make_model(binary, hf, shape, "f32", "safetensors", ["--split-experts"] if shape == "tiny-moe" else [])
                for d, p in ggufs.items():
                    make_model(binary, p, shape, d, "gguf")
            except Exception as exc:
                res.check(f"{shape} make-model", lambda e=exc: str(e))
                continue
            hf_cfg, st = mf.read_hf_dir(hf)
            c = mf.config_from_hf(hf_cfg)
            hf_arrays = {n: t.array() for n, t in st.items()}
            conv = mf.hf_to_gguf(c, hf_arrays)
            for d, p in ggufs.items():
                g = mf.read_gguf(p)
                gc = mf.config_from_gguf(g)
                c_vocab = dict(c, n_vocab=gc["n_vocab"])
                res.check(f"{shape} {d} metadata", check_metadata, g, hf_cfg, c, d)
                res.check(f"{shape} {d} tensor set and shapes", check_tensor_set, g, c_vocab, conv)
                res.check(f"{shape} {d} tensor types", check_types, g, c_vocab, d)
                res.check(f"{shape} {d} data layout", check_layout, g)
                if d != "q4_k_m":
                    info = []
                    res.check(f"{shape} {d} values = converter(HF)", check_values, g, conv, d, info)
                    for line in info:
                        print(f"# {shape} {d}: {line}")
            g32 = mf.open_model(ggufs["f32"])
            h32 = mf.open_model(hf)
            res.check(f"{shape} V-head order", check_v_head_order, c, h32.tensors, g32.tensors)
            res.check(f"{shape} open_model configs", check_open_model, ggufs["f32"], hf)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"RESULT passed={res.passed} failed={res.failed}")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
