"""test_parity.py - deltaserve's forward pass against the independent NumPy
reference (qwen35_ref.py), on real-shaped test models read from the same files
by an independent reader (model_files.py).

For each case: a 200-token prompt through `deltaserve logits` (the whole
prompt in one ragged batch: chunked DeltaNet prefill) and through the NumPy
reference (token by token, float64), compared as max|C - ref| / max|ref| over
every position's logits. The reference uses the same dequantised weights and,
for quantised matrices, rounds their input activations as the C kernels do
(AsKernels). Tolerances: 1e-4 with F32 weights, 2e-2 with BF16 and Q8_0, 5e-2
at the 95th-percentile position with the mixes of the other llama-quantize file
types, whose 8-bit activations still differ where float32 and float64 round a
value on either side of a step (see deviation).
The MTP head is compared the same way over (h_t, x_{t+1}) for every position.
Weight scale 3 makes the logits peaked (a spread of about 20), so that a wrong
layer cannot hide in noise.

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
TOL = {"f32": 1e-4, "bf16": 2e-2, "q8_0": 2e-2}  # every other file type: 5e-2 (see AsKernels)
CASES = [  # shape, format, dtype (a llama-quantize file type: its mix of tensor types)
    ("tiny", "gguf", "f32"), ("tiny", "safetensors", "f32"), ("tiny", "gguf", "bf16"), ("tiny", "gguf", "q8_0"),
    ("tiny-moe", "gguf", "f32"), ("tiny-moe", "safetensors", "f32"), ("tiny-moe", "gguf", "q8_0"),
    ("tiny-qwen3", "gguf", "f32"), ("tiny-qwen3", "gguf", "bf16"),
    # tiny's ssm_out rows (128) take the fallbacks of 256-block types: q4_0, q5_0, q5_1, q8_0, iq4_nl
    ("tiny", "gguf", "Q4_0"), ("tiny", "gguf", "Q6_K"), ("tiny-moe", "gguf", "Q4_K_M"),
    ("tiny", "gguf", "Q4_1"), ("tiny", "gguf", "Q5_0"), ("tiny", "gguf", "Q5_1"), ("tiny", "gguf", "Q5_K_M"),
    ("tiny", "gguf", "Q2_K"), ("tiny", "gguf", "Q3_K_M"), ("tiny", "gguf", "IQ4_NL"), ("tiny", "gguf", "IQ4_XS"),
    ("tiny", "gguf", "IQ3_XXS"), ("tiny", "gguf", "IQ3_S"), ("tiny", "gguf", "IQ2_XXS"), ("tiny", "gguf", "IQ2_XS"),
    ("tiny", "gguf", "IQ2_S"), ("tiny", "gguf", "IQ1_S"), ("tiny", "gguf", "IQ1_M"), ("tiny", "gguf", "TQ1_0"),
    ("tiny", "gguf", "TQ2_0"), ("tiny-moe", "gguf", "MXFP4_MOE"),
    # YaRN (factor 4 over the shape's 4096 positions): its frequencies and attention factor, from
    # llama.cpp's rope.scaling.* keys and from rope_parameters; the plain-RoPE reference must miss
    ("tiny", "gguf", "f32", "--yarn", "4"), ("tiny", "safetensors", "f32", "--yarn", "4"),
]
N_TOKENS = 200


FLOAT_TYPES = ("f32", "f16", "bf16")


def rounded_activations(x, residual):
    """x as the C kernels feed it to a quantised matrix (src/kernels/kern.h, NUMERICS): per 32
    elements, in float32, v = x / d clamped to +-127 with d = amax / 127, q = rint(v); and for Q8_0
    weights (but the output head's) the residual on a 128 times finer grid as well, x ~ (d / 128) (128 q + r)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    d = np.max(np.abs(x), axis=1, keepdims=True) / np.float32(127)
    inv = np.zeros_like(d)
    np.divide(np.float32(1), d, out=inv, where=d != 0)
    v = np.clip(x * inv, -127, 127)
    q = np.rint(v)
    if residual:
        r = np.rint((v - q) * np.float32(128))
        return ((128 * q + r) * (d / 128)).astype(np.float64).reshape(-1)
    return (q * d).astype(np.float64).reshape(-1)


class AsKernels:
    """A quantised weight matrix (or expert stack) that rounds the activations it is applied to
    as the C kernels do, so that the reference differs from them only in float64 against float32
    arithmetic (which alone the tolerance is for: without this, the 8-bit activations of the
    low-bit types move tiny's logits by up to a third of their size, and no tolerance would tell
    a rounding from a wrong kernel). A row taken by index (an embedding lookup) stays exact."""

    def __init__(self, w, residual):
        self.w, self.residual = w, residual

    def __getitem__(self, i):
        sub = self.w[i]
        return AsKernels(sub, self.residual) if sub.ndim == 2 else sub

    def __matmul__(self, x):
        return self.w @ rounded_activations(x, self.residual)


def deviation(c, r, dtype):
    """max|c - r| / max|r| over every position (F32, BF16, Q8_0), or at the 95th-percentile
    position for the other file types: with 8-bit activations a few positions of 200 can take
    another expert, or land on the other side of a rounding step where the model is sensitive
    (tiny-moe's Q4_K_M MTP head: one position at 0.68 while the 99th percentile is 0.05), which
    says nothing about the kernels; a wrong kernel moves every position."""
    per_pos = np.max(np.abs(c - r), axis=1) / np.max(np.abs(r))
    return float(per_pos.max() if dtype.lower() in TOL else np.percentile(per_pos, 95))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")


def prompt(vocab):
    rng = np.random.default_rng(2024)
    return [int(t) for t in rng.integers(0, min(vocab, 1000), N_TOKENS)]


def check(shape, fmt, dtype, tmp, *extra):
    path = os.path.join(tmp, f"{shape}-{dtype}" + "".join(extra) + (".gguf" if fmt == "gguf" else "-hf"))
    run([BIN, "make-model", "--shape", shape, "--dtype", dtype, "--format", fmt, "--scale", "3", "--seed", "4",
         "--out", path, *extra])
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
    if fmt == "gguf":
        # the output head reads its activations at 8 bits alone, every other Q8_0 matrix with the residual
        head = "output.weight" if "output.weight" in m.raw.tensors else "token_embd.weight"
        for name, t in m.raw.tensors.items():
            if t.type_name not in FLOAT_TYPES and name in ref.t:
                ref.t[name] = AsKernels(ref.t[name], t.type_name == "q8_0" and name != head)
    r_logits, r_hidden = ref.run(toks)
    rel = deviation(c_logits, r_logits, dtype)
    spread = float(np.mean(r_logits.max(axis=1) - r_logits.min(axis=1)))
    argmax_same = float(np.mean(c_logits.argmax(axis=1) == r_logits.argmax(axis=1)))
    tol = TOL.get(dtype.lower(), 5e-2)
    types = sorted({t.type_name for t in m.raw.tensors.values()}) if fmt == "gguf" else []
    what = "max|d|/max|logit|" if dtype.lower() in TOL else "95th-percentile position's max|d|/max|logit|"
    msg = f"{shape} {fmt} {dtype} {'+'.join(types)}: {what} = {rel:.2e} (tolerance {tol:g}, worst " \
          f"{deviation(c_logits, r_logits, 'f32'):.2e}), " \
          f"mean logit spread {spread:.1f}, same argmax at {100 * argmax_same:.1f}% of positions"
    ok = rel <= tol and spread > 8
    if cfg.get("yarn"):  # the test would pass without YaRN applied only if YaRN changed nothing here
        plain = qwen35_ref.Reference(dict(cfg, yarn=None), m.tensors).run(toks)[0]
        rel_plain = deviation(c_logits, plain, dtype)
        msg += f"; against plain RoPE {rel_plain:.2e}"
        ok = ok and rel_plain > 10 * tol
    if cfg["n_mtp"]:
        c_mtp = np.fromfile(mtp, dtype="<f4").reshape(N_TOKENS - 1, V)
        r_mtp = np.array([ref.mtp(toks[t + 1], r_hidden[t], t)[0] for t in range(N_TOKENS - 1)])
        rel_mtp = deviation(c_mtp, r_mtp, dtype)
        msg += f"; MTP head {rel_mtp:.2e}"
        ok = ok and rel_mtp <= tol
    return ok, msg


def main():
    passed = failed = 0
    with tempfile.TemporaryDirectory(dir=os.environ.get("DS_TMP")) as tmp:
        for shape, fmt, dtype, *extra in CASES:
            if os.environ.get("DS_PARITY_ONLY") and os.environ["DS_PARITY_ONLY"] not in " ".join([shape, fmt, dtype, *extra]):
                continue
            try:
                ok, msg = check(shape, fmt, dtype, tmp, *extra)
            except Exception as exc:  # one broken case must not hide the others
                ok, msg = False, f"{shape} {fmt} {dtype} {' '.join(extra)}: {type(exc).__name__}: {exc}"
            print(("ok " if ok else "FAIL ") + msg, flush=True)
            passed += ok
            failed += not ok
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
