"""test_parity.py - deltaserve's forward pass against the independent NumPy
reference (qwen35_ref.py), on real-shaped test models read from the same files
by an independent reader (model_files.py).

For each case: a 200-token prompt through `deltaserve logits` (the whole
prompt in one ragged batch: chunked DeltaNet prefill) and through the NumPy
reference (token by token, float64), compared as max|C - ref| / max|ref| over
every position's logits. Tolerances: 1e-4 with F32 weights, 2e-2 with BF16 and
Q8_0 weights (the reference uses the same dequantised weights; the C kernels
also round activations). The MTP head is compared the same way over (h_t,
x_{t+1}) for every position. Weight scale 3 makes the logits peaked (a spread
of about 20), so that a wrong layer cannot hide in noise.

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
TOL = {"f32": 1e-4, "bf16": 2e-2, "q8_0": 2e-2}
CASES = [  # shape, format, dtype
    ("tiny", "gguf", "f32"), ("tiny", "safetensors", "f32"), ("tiny", "gguf", "bf16"), ("tiny", "gguf", "q8_0"),
    ("tiny-moe", "gguf", "f32"), ("tiny-moe", "safetensors", "f32"), ("tiny-moe", "gguf", "q8_0"),
    ("tiny-qwen3", "gguf", "f32"), ("tiny-qwen3", "gguf", "bf16"),
]
N_TOKENS = 200


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")


def prompt(vocab):
    rng = np.random.default_rng(2024)
    return [int(t) for t in rng.integers(0, min(vocab, 1000), N_TOKENS)]


def check(shape, fmt, dtype, tmp):
    path = os.path.join(tmp, f"{shape}-{dtype}" + (".gguf" if fmt == "gguf" else "-hf"))
    run([BIN, "make-model", "--shape", shape, "--dtype", dtype, "--format", fmt, "--scale", "3", "--seed", "4",
         "--out", path])
    m = model_files.open_model(path)
    cfg = dict(m.config)
    cfg["attn_output_gate"] = cfg["arch"] != "qwen3"
    cfg["v_heads_tiled"] = m.v_heads_tiled
    toks = prompt(cfg["n_vocab"])
    out, hid, mtp = (os.path.join(tmp, x) for x in ("logits.f32", "hidden.f32", "mtp.f32"))
    cmd = [BIN, "logits", "-m", path, "--tokens", ",".join(map(str, toks)), "--out", out, "--hidden", hid]
    if cfg["n_mtp"]:
        cmd += ["--mtp", mtp]
    run(cmd)
    V, H = cfg["n_vocab"], cfg["n_embd"]
    c_logits = np.fromfile(out, dtype="<f4").reshape(N_TOKENS, V)
    ref = qwen35_ref.Reference(cfg, m.tensors)
    r_logits, r_hidden = ref.run(toks)
    rel = float(np.max(np.abs(c_logits - r_logits)) / np.max(np.abs(r_logits)))
    spread = float(np.mean(r_logits.max(axis=1) - r_logits.min(axis=1)))
    argmax_same = float(np.mean(c_logits.argmax(axis=1) == r_logits.argmax(axis=1)))
    msg = f"{shape} {fmt} {dtype}: max|d|/max|logit| = {rel:.2e} (tolerance {TOL[dtype]:g}), " \
          f"mean logit spread {spread:.1f}, same argmax at {100 * argmax_same:.1f}% of positions"
    ok = rel <= TOL[dtype] and spread > 8
    if cfg["n_mtp"]:
        c_mtp = np.fromfile(mtp, dtype="<f4").reshape(N_TOKENS - 1, V)
        r_mtp = np.array([ref.mtp(toks[t + 1], r_hidden[t], t)[0] for t in range(N_TOKENS - 1)])
        rel_mtp = float(np.max(np.abs(c_mtp - r_mtp)) / np.max(np.abs(r_mtp)))
        msg += f"; MTP head {rel_mtp:.2e}"
        ok = ok and rel_mtp <= TOL[dtype]
    return ok, msg


def main():
    passed = failed = 0
    with tempfile.TemporaryDirectory(dir=os.environ.get("DS_TMP")) as tmp:
        for shape, fmt, dtype in CASES:
            try:
                ok, msg = check(shape, fmt, dtype, tmp)
            except Exception as exc:  # one broken case must not hide the others
                ok, msg = False, f"{shape} {fmt} {dtype}: {type(exc).__name__}: {exc}"
            print(("ok " if ok else "FAIL ") + msg, flush=True)
            passed += ok
            failed += not ok
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
