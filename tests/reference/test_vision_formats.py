"""test_vision_formats.py - checks make-model's vision towers against
llama.cpp's conventions, independently of deltaserve's C code.

`$DS_BIN make-model --shape tiny` writes the same tower as an mmproj GGUF
(--mmproj, F32 and F16) and into a Hugging Face directory (--format
safetensors --vision, F32), with and without DeepStack. model_files.py reads
both with numpy, and the mapping below, written from llama.cpp's converter
(conversion/qwen3vl.py: Qwen3VLVisionModel, MmprojModel; gguf-py's tensor
map for MMPROJ), turns the HF tensors into the GGUF ones: the Conv3D patch
embedding [D, 3, 2, P, P] split along the frame axis into
v.patch_embd.weight and .weight.1, merger.linear_fc1/2 -> mm.0/mm.2,
merger.norm -> v.post_ln, deepstack_merger_list.K -> v.deepstack.<block>,
blocks.N.* -> v.blk.N.*. The result must equal the GGUF tensors exactly in
F32. Also checked, from clip.cpp's loader: the keys it reads with their
GGUF types and values (projector type qwen3vl_merger, projection_dim = the
text model's width, is_deepstack_layers one bool per block), and the types
the converter gives each tensor (1-D and the position embedding F32, the
patch embedding F16 only in an F16 file).

Prints "ok NAME" / "FAIL NAME: ..." lines and "RESULT passed=N failed=M".
Uses $DS_BIN (default build/deltaserve) and $DS_TMP (default a new temp dir).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_files as mf  # noqa: E402
from test_formats import Results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCK = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "attn_qkv", "attn.proj": "attn_out",
         "mlp.linear_fc1": "ffn_up", "mlp.linear_fc2": "ffn_down"}
MERGER = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}


def convert(vision_config, hf):
    """The converter's mapping: {hf name: array} -> {gguf name: array} (numpy order)."""
    out = {}
    ds_idx = vision_config.get("deepstack_visual_indexes", [])
    for name, t in hf.items():
        if not name.startswith("model.visual."):
            continue
        body, a = name[len("model.visual."):], t.array()
        if body == "patch_embed.proj.weight":
            out["v.patch_embd.weight"] = a[:, :, 0]
            out["v.patch_embd.weight.1"] = a[:, :, 1]
        elif body == "patch_embed.proj.bias":
            out["v.patch_embd.bias"] = a
        elif body == "pos_embed.weight":
            out["v.position_embd.weight"] = a
        elif body.startswith("merger."):
            rest = body[len("merger."):]
            part, suffix = rest.rsplit(".", 1)
            out[{"norm": "v.post_ln", "linear_fc1": "mm.0", "linear_fc2": "mm.2"}[part] + "." + suffix] = a
        elif body.startswith("deepstack_merger_list."):
            _, k, part, suffix = body.split(".")
            out[f"v.deepstack.{ds_idx[int(k)]}.{MERGER[part]}.{suffix}"] = a
        elif body.startswith("blocks."):
            _, n, rest = body.split(".", 2)
            part, suffix = rest.rsplit(".", 1)
            out[f"v.blk.{n}.{BLOCK[part]}.{suffix}"] = a
        else:
            raise ValueError(f"unexpected tensor {name}")
    return out


def make(binary, args):
    p = subprocess.run([binary, "make-model", "--shape", "tiny", "--seed", "9", "--no-mtp"] + args,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"make-model {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")


def check_values(gguf_path, hf_dir):
    g = mf.read_gguf(gguf_path)
    config, hf = mf.read_hf_dir(hf_dir)
    want = convert(config["vision_config"], hf)
    problems = []
    if set(want) != set(g.tensors):
        problems.append(f"tensor sets differ: only GGUF {sorted(set(g.tensors) - set(want))[:4]}, "
                        f"only HF {sorted(set(want) - set(g.tensors))[:4]}")
    for name in sorted(set(want) & set(g.tensors)):
        a = g.tensors[name].array()
        if a.shape != want[name].shape or not np.array_equal(a, want[name]):
            problems.append(f"{name}: GGUF {a.shape} differs from the converted HF {want[name].shape}")
    return problems


def check_keys(gguf_path, text_path, deepstack):
    g, text = mf.read_gguf(gguf_path), mf.read_gguf(text_path)
    n_embd = text.kv["qwen35.embedding_length"].value
    depth = g.kv["clip.vision.block_count"].value
    want = {  # key: (GGUF type, value or None)
        "general.architecture": (mf.STRING, "clip"),
        "clip.projector_type": (mf.STRING, "qwen3vl_merger"),
        "clip.has_vision_encoder": (mf.BOOL, True),
        "clip.use_gelu": (mf.BOOL, True),
        "clip.vision.projection_dim": (mf.U32, n_embd),
        "clip.vision.embedding_length": (mf.U32, 64),
        "clip.vision.feed_forward_length": (mf.U32, 128),
        "clip.vision.attention.head_count": (mf.U32, 4),
        "clip.vision.patch_size": (mf.U32, 16),
        "clip.vision.image_size": (mf.U32, 128),  # sqrt(64 positions) x 16
        "clip.vision.spatial_merge_size": (mf.U32, 2),
        "clip.vision.attention.layer_norm_epsilon": (mf.F32, None),
        "clip.vision.image_mean": (mf.ARRAY, [0.5, 0.5, 0.5]),
        "clip.vision.image_std": (mf.ARRAY, [0.5, 0.5, 0.5]),
        "clip.vision.is_deepstack_layers": (mf.ARRAY, [i in deepstack for i in range(depth)]),
    }
    problems = []
    for key, (typ, val) in want.items():
        v = g.kv.get(key)
        if v is None:
            problems.append(f"{key} is missing")
        elif v.type != typ or (val is not None and v.value != val):
            problems.append(f"{key}: {v!r}, wanted type {typ} value {val!r}")
    v = g.kv.get("clip.vision.is_deepstack_layers")
    if v is not None and v.elem_type != mf.BOOL:
        problems.append("is_deepstack_layers is not an array of bools")
    return problems


def check_types(gguf_path, dtype):
    g = mf.read_gguf(gguf_path)
    problems = []
    for name, t in g.tensors.items():
        if len(t.ne) == 1 or name == "v.position_embd.weight":
            want = "f32"
        elif name.startswith("v.patch_embd.weight"):
            want = "f16" if dtype == "f16" else "f32"
        else:
            want = dtype
        if t.type_name != want:
            problems.append(f"{name}: {t.type_name}, the converter writes {want}")
    return problems


def main():
    binary = os.environ.get("DS_BIN") or os.path.join(ROOT, "build", "deltaserve")
    tmp = tempfile.mkdtemp(prefix="vformats.", dir=os.environ.get("DS_TMP") or None)
    res = Results()
    try:
        for label, ds in (("qwen3.5 style", []), ("deepstack 0,1", [0, 1])):
            extra = ["--deepstack", ",".join(map(str, ds))] if ds else []
            text, mm = os.path.join(tmp, "text.gguf"), os.path.join(tmp, "mmproj.gguf")
            mm16, hf = os.path.join(tmp, "mmproj-f16.gguf"), os.path.join(tmp, "hf")
            try:
                make(binary, ["--out", text, "--mmproj", mm] + extra)
                make(binary, ["--out", os.path.join(tmp, "text16.gguf"), "--dtype", "f16", "--mmproj", mm16] + extra)
                make(binary, ["--format", "safetensors", "--vision", "--out", hf] + extra)
            except Exception as exc:
                res.check(f"{label} make-model", lambda e=exc: str(e))
                continue
            res.check(f"{label}: HF tower through the converter's mapping = mmproj GGUF (F32, exact)",
                      check_values, mm, hf)
            res.check(f"{label}: the clip keys llama.cpp reads", check_keys, mm, text, ds)
            res.check(f"{label}: tensor types (F32 file)", check_types, mm, "f32")
            res.check(f"{label}: tensor types (F16 file)", check_types, mm16, "f16")
            with open(os.path.join(hf, "config.json")) as f:
                cfg = json.load(f)
            res.check(f"{label}: config.json", lambda c=cfg: None if (
                c["architectures"] == ["Qwen3_5ForConditionalGeneration"] and
                c["vision_config"]["deepstack_visual_indexes"] == ds and
                c["vision_config"]["out_hidden_size"] == c["text_config"]["hidden_size"]) else json.dumps(c)[:300])
            shutil.rmtree(hf)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"RESULT passed={res.passed} failed={res.failed}")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
