"""test_mrope.py - the text model's side of images against the independent NumPy reference
(qwen35_ref.py): prompts of text and image-embedding rows (random embeddings standing in for the
vision tower's output, with and without DeepStack parts), placed by M-RoPE positions.

For each case the prompt is token ids in the chat template's layout (<|vision_start|>, one
<|image_pad|> per merged patch, <|vision_end|>; here any three ids, the models being random);
the reference computes the positions from those ids with its own get_rope_index (Hugging Face's
algorithm) and runs token by token in float64; `deltaserve logits --images ... --embd ...` runs
the prompt in one call with positions from ds_mrope_positions. Checked: the positions are equal,
the logits (and the MTP head's, whose input at an image token is that token's image embedding)
agree to 1e-4 of the largest logit, F32 weights. Controls show that the comparison can fail: the
reference with 1-D positions, or without the DeepStack parts, is far from the C output.

Prints "ok"/"FAIL" per case and "RESULT passed=N failed=M".
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_files  # noqa: E402
import qwen35_ref  # noqa: E402

BIN = os.environ.get("DS_BIN", "build/deltaserve")
TOL = 1e-4
VS, PAD, VE = 901, 902, 903  # vision_start, image_pad, vision_end
MERGE = 2

# name, shape, format, pieces (an int: that many text tokens; a tuple: an image's (t, h, w) in patches), DeepStack parts
CASES = [
    ("one image", "tiny", "gguf", [7, (1, 4, 6), 5], 0),
    ("image, text, image", "tiny", "safetensors", [5, (1, 6, 4), 6, (1, 2, 10), 4], 0),
    ("image, text, image with DeepStack", "tiny", "gguf", [3, (1, 4, 4), 2, (1, 8, 2), 3], 2),
    ("two images back to back, DeepStack, MoE", "tiny-moe", "gguf", [4, (1, 4, 4), (1, 2, 4), 6], 3),
    ("a prompt longer than one slice of 128", "tiny-moe", "gguf", [30, (1, 20, 16), 20, (1, 2, 2), 9], 1),
    ("an image right after the first token, and a 1-token image", "tiny", "gguf", [(1, 6, 6), 3, (1, 2, 2)], 2),
]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")


def build_prompt(pieces, rng):
    """Token ids, the image grids (patches), and for the C side the spans FIRST:T:H:W (merged grid)."""
    ids, grids, spans = [], [], []
    for p in pieces:
        if isinstance(p, int):
            ids += [int(t) for t in rng.integers(0, 900, p)]
        else:
            t, h, w = p
            ids.append(VS)
            spans.append((len(ids), t, h // MERGE, w // MERGE))
            ids += [PAD] * (t * (h // MERGE) * (w // MERGE))
            ids.append(VE)
            grids.append(p)
    return ids, grids, spans


def rel(c, r):
    return float(np.max(np.abs(c - r)) / np.max(np.abs(r)))


def check(name, shape, fmt, pieces, n_ds, tmp, models):
    key = (shape, fmt)
    if key not in models:
        path = os.path.join(tmp, f"{shape}" + (".gguf" if fmt == "gguf" else "-hf"))
        run([BIN, "make-model", "--shape", shape, "--dtype", "f32", "--format", fmt, "--scale", "3", "--seed", "4",
             "--out", path])
        models[key] = (path, model_files.open_model(path))
    path, m = models[key]
    cfg = dict(m.config)
    cfg["attn_output_gate"] = cfg["arch"] != "qwen3"
    cfg["v_heads_tiled"] = m.v_heads_tiled
    if sum(cfg["mrope_sections"]) != cfg["rope_dim"] // 2 or not cfg["mrope_interleaved"]:
        return False, f"{name}: the model's M-RoPE sections {cfg['mrope_sections']} do not cover the rotated pairs"
    rng = np.random.default_rng(len(name))
    ids, grids, spans = build_prompt(pieces, rng)
    n, H, V = len(ids), cfg["n_embd"], cfg["n_vocab"]
    pos, delta = qwen35_ref.get_rope_index(ids, grids, PAD, VS, MERGE)
    n_img = sum(t * h * w for _, t, h, w in spans)
    # the scale of a token embedding, so that an image row weighs like a text row
    scale = float(np.std(m.tensors["token_embd.weight"]))
    rows = (rng.standard_normal((n_img, H * (1 + n_ds))) * scale).astype("<f4")
    embd, deep, r = [None] * n, [None] * n, 0
    for first, t, h, w in spans:
        for j in range(t * h * w):
            embd[first + j] = rows[r, :H]
            deep[first + j] = [rows[r, H * (1 + k):H * (2 + k)].astype(np.float64) for k in range(n_ds)]
            r += 1
    files = {x: os.path.join(tmp, x) for x in ("embd.f32", "logits.f32", "mtp.f32", "pos.i32")}
    rows.tofile(files["embd.f32"])
    cmd = [BIN, "logits", "-m", path, "--tokens", ",".join(map(str, ids)), "--out", files["logits.f32"],
           "--images", ",".join(f"{f}:{t}:{h}:{w}" for f, t, h, w in spans), "--embd", files["embd.f32"],
           "--deepstack", str(n_ds), "--positions", files["pos.i32"]]
    if cfg["n_mtp"]:
        cmd += ["--mtp", files["mtp.f32"]]
    run(cmd)
    c_pos = np.fromfile(files["pos.i32"], dtype="<i4").reshape(n, 3).T
    if not np.array_equal(c_pos, pos):
        bad = int(np.argmax(np.any(c_pos != pos, axis=0)))
        return False, f"{name}: M-RoPE position of token {bad} is {c_pos[:, bad]}, get_rope_index gives {pos[:, bad]}"
    c_logits = np.fromfile(files["logits.f32"], dtype="<f4").reshape(n, V)
    ref = qwen35_ref.Reference(cfg, m.tensors)
    r_logits, r_hidden = ref.run(ids, embd, pos, deep)
    d = rel(c_logits, r_logits)
    msg = f"{name} ({shape} {fmt}, {n} tokens, grids {grids}, {n_ds} DeepStack, delta {delta}): " \
          f"max|d|/max|logit| = {d:.2e}"
    ok = d <= TOL
    if cfg["n_mtp"]:
        c_mtp = np.fromfile(files["mtp.f32"], dtype="<f4").reshape(n - 1, V)
        r_mtp = np.array([ref.mtp(ids[t + 1], r_hidden[t], tuple(pos[:, t]), embd[t + 1])[0] for t in range(n - 1)])
        d_mtp = rel(c_mtp, r_mtp)
        msg += f"; MTP head {d_mtp:.2e}"
        ok = ok and d_mtp <= TOL
    # controls: what the comparison would see if positions or DeepStack parts were ignored
    flat = qwen35_ref.Reference(cfg, m.tensors).run(ids, embd, None, deep)[0]
    d_flat = rel(c_logits, flat)
    msg += f"; against 1-D positions {d_flat:.2e}"
    ok = ok and d_flat > 10 * TOL
    if n_ds:
        no_ds = qwen35_ref.Reference(cfg, m.tensors).run(ids, embd, pos, None)[0]
        d_no = rel(c_logits, no_ds)
        msg += f", without DeepStack {d_no:.2e}"
        ok = ok and d_no > 10 * TOL
    return ok, msg


def main():
    passed = failed = 0
    models = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("DS_TMP")) as tmp:
        for name, shape, fmt, pieces, n_ds in CASES:
            try:
                ok, msg = check(name, shape, fmt, pieces, n_ds, tmp, models)
            except Exception as exc:  # one broken case must not hide the others
                ok, msg = False, f"{name}: {type(exc).__name__}: {exc}"
            print(("ok " if ok else "FAIL ") + msg, flush=True)
            passed += ok
            failed += not ok
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
