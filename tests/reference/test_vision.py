"""test_vision.py - deltaserve's vision tower against the independent NumPy reference
(vision_ref.py), reading the same mmproj GGUF files.

Towers: random ones written here in llama.cpp's mmproj layout (a head size that is not a multiple
of the vector width; with and without DeepStack mergers), and the tower `make-model --mmproj` writes
(the real Qwen3.5 shapes, two blocks). Images: random patch values on several grids (square,
wide, tall, odd merged sizes, smaller and larger than the position grid), through
`deltaserve vision` with DS_VISION_DUMP for the residual stream after the patch embedding and
after every block. Each is compared as max|C - ref| / max|ref|: <= 1e-4 with F32 weights; the
F16, BF16 and Q8_0 towers (whose activations the kernels round to BF16 or 8 bits) to 3e-2.
Then the cut-and-batch property: all images as jobs of one call, advanced a few multiply-adds at
a time, and on one thread, give the same bytes as each image alone.

Prints "ok"/"FAIL" per check and "RESULT passed=N failed=M".
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_files  # noqa: E402
import vision_ref  # noqa: E402

BIN = os.environ.get("DS_BIN", "build/deltaserve")
GRIDS = [(8, 8), (4, 4), (12, 16), (14, 6), (2, 2), (10, 30)]  # in patches; the test towers' grid is 8x8
TOL = {"f32": 1e-4, "f16": 3e-2, "bf16": 3e-2, "q8_0": 3e-2}
P = 16

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def run(args, env=None, what=""):
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{what or args[1]}: exit {r.returncode}: {r.stderr.strip()[-800:]}")
    return r


def write_tower(path, E, dtype, D=96, heads=4, F=160, L=3, side=8, deepstack=(), seed=1):
    """A random tower in the mmproj layout of llama.cpp's converter (projector type qwen3vl_merger)."""
    rng = np.random.default_rng(seed)
    U32, F32, BOOL, STRING, ARRAY = model_files.U32, model_files.F32, model_files.BOOL, model_files.STRING, model_files.ARRAY
    kv = [("general.architecture", STRING, "clip"), ("clip.projector_type", STRING, "qwen3vl_merger"),
          ("clip.has_vision_encoder", BOOL, True), ("clip.use_gelu", BOOL, True),
          ("clip.vision.block_count", U32, L), ("clip.vision.embedding_length", U32, D),
          ("clip.vision.attention.head_count", U32, heads), ("clip.vision.feed_forward_length", U32, F),
          ("clip.vision.patch_size", U32, P), ("clip.vision.projection_dim", U32, E),
          ("clip.vision.image_size", U32, P * side), ("clip.vision.spatial_merge_size", U32, 2),
          ("clip.vision.attention.layer_norm_epsilon", F32, 1e-6),
          ("clip.vision.image_mean", ARRAY, [0.5, 0.5, 0.5], F32), ("clip.vision.image_std", ARRAY, [0.5, 0.5, 0.5], F32),
          ("clip.vision.is_deepstack_layers", ARRAY, [l in deepstack for l in range(L)], BOOL)]
    ts = []

    def put(name, shape, scale, vec=False):
        a = rng.standard_normal(shape) * scale
        if vec and name.endswith("weight"):
            a = 1.0 + a
        t = "f32" if vec or name == "v.position_embd.weight" else dtype
        if t == "q8_0" and shape[-1] % 32:
            t = "f16"
        ts.append((name, t, a))

    put("v.patch_embd.weight", (D, 3, P, P), 0.02)
    put("v.patch_embd.weight.1", (D, 3, P, P), 0.02)
    put("v.patch_embd.bias", (D,), 0.1, True)
    put("v.position_embd.weight", (side * side, D), 0.5)
    for l in range(L):
        p = f"v.blk.{l}."
        put(p + "ln1.weight", (D,), 0.1, True)
        put(p + "ln1.bias", (D,), 0.1, True)
        put(p + "ln2.weight", (D,), 0.1, True)
        put(p + "ln2.bias", (D,), 0.1, True)
        put(p + "attn_qkv.weight", (3 * D, D), 0.15)
        put(p + "attn_qkv.bias", (3 * D,), 0.1, True)
        put(p + "attn_out.weight", (D, D), 0.1)
        put(p + "attn_out.bias", (D,), 0.1, True)
        put(p + "ffn_up.weight", (F, D), 0.1)
        put(p + "ffn_up.bias", (F,), 0.1, True)
        put(p + "ffn_down.weight", (D, F), 0.1)
        put(p + "ffn_down.bias", (D,), 0.1, True)
    put("v.post_ln.weight", (D,), 0.1, True)
    put("v.post_ln.bias", (D,), 0.1, True)
    put("mm.0.weight", (4 * D, 4 * D), 0.05)
    put("mm.0.bias", (4 * D,), 0.1, True)
    put("mm.2.weight", (E, 4 * D), 0.05)
    put("mm.2.bias", (E,), 0.1, True)
    for l in deepstack:
        p = f"v.deepstack.{l}."
        put(p + "norm.weight", (4 * D,), 0.1, True)
        put(p + "norm.bias", (4 * D,), 0.1, True)
        put(p + "fc1.weight", (4 * D, 4 * D), 0.05)
        put(p + "fc1.bias", (4 * D,), 0.1, True)
        put(p + "fc2.weight", (E, 4 * D), 0.05)
        put(p + "fc2.bias", (E,), 0.1, True)
    model_files.write_gguf(path, kv, ts)


def rel(c, r):
    return float(np.max(np.abs(c - r)) / max(np.max(np.abs(r)), 1e-30))


def compare(tmp, name, model, mmproj, dtype, grids):
    tower = vision_ref.Tower(model_files.read_gguf(mmproj))
    tol = TOL[dtype]
    D, E, nds, pd = tower.D, tower.E, len(tower.deepstack), 3 * 2 * tower.P * tower.P
    rng = np.random.default_rng(7)
    for gh, gw in grids:
        n = gh * gw
        patches = rng.uniform(-1.5, 1.5, (n, pd)).astype(np.float32)
        pfile, out, dump = (os.path.join(tmp, x) for x in ("patches.f32", "out.f32", "dump"))
        os.makedirs(dump, exist_ok=True)
        patches.tofile(pfile)
        env = dict(os.environ, DS_VISION_DUMP=dump)
        tag = f"{name} {gh}x{gw}"
        try:
            run([BIN, "vision", "-m", model, "--mmproj", mmproj, "--grid", f"{gh}x{gw}", "--patches", pfile,
                 "--out", out], env=env, what=tag)
        except RuntimeError as ex:
            check(tag, False, str(ex))
            continue
        ref = tower.forward(patches, 1, gh, gw)
        errs = {"embed": rel(np.fromfile(os.path.join(dump, "embed.f32"), np.float32).reshape(n, D), ref["embed"])}
        for l in range(tower.L):
            c = np.fromfile(os.path.join(dump, f"block_{l}.f32"), np.float32).reshape(n, D)
            errs[f"block {l}"] = rel(c, ref["blocks"][l])
        o = np.fromfile(out, np.float32).reshape(n // 4, E * (1 + nds))
        errs["merger"] = rel(o[:, :E], ref["merger"])
        for k in range(nds):
            errs[f"deepstack {k}"] = rel(o[:, E * (1 + k):E * (2 + k)], ref["deepstack"][k])
        worst = max(errs, key=errs.get)
        check(f"{tag} ({len(errs)} tensors, worst {worst} {errs[worst]:.2e})", errs[worst] <= tol,
              ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))


def cut_and_batch(tmp, name, model, mmproj, grids):
    """Every image alone and all of them batched, cut into small pieces, on 1 and 2 threads:
    the same bytes."""
    alone = []
    for gh, gw in grids:
        out = os.path.join(tmp, "alone.f32")
        run([BIN, "vision", "-m", model, "--mmproj", mmproj, "--grid", f"{gh}x{gw}", "--out", out, "-t", "2"])
        alone.append(open(out, "rb").read())
    # the default patches come from one generator across the images: regenerate them in order
    grid = ",".join(f"{gh}x{gw}" for gh, gw in grids)
    first = os.path.join(tmp, "first.f32")
    run([BIN, "vision", "-m", model, "--mmproj", mmproj, "--grid", grid, "--out", first, "-t", "2"])
    whole = open(first, "rb").read()
    check(f"{name}: the first image alone and in a batch", whole[:len(alone[0])] == alone[0])
    for budget, threads in (("1", "2"), ("3e6", "1"), ("2e7", "2")):
        out = os.path.join(tmp, "cut.f32")
        run([BIN, "vision", "-m", model, "--mmproj", mmproj, "--grid", grid, "--out", out, "--budget", budget,
             "-t", threads])
        check(f"{name}: {len(grids)} images batched, budget {budget}, {threads} threads: same bytes",
              open(out, "rb").read() == whole)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.gguf")
        run([BIN, "make-model", "--shape", "tiny", "--dtype", "f32", "--out", model, "--no-mtp"])
        E = model_files.read_gguf(model).kv["qwen35.embedding_length"].value
        towers = [("qwen3.5-like f32", "f32", ()), ("deepstack f32", "f32", (0, 2)),
                  ("f16", "f16", ()), ("bf16", "bf16", (1,)), ("q8_0", "q8_0", (1,))]
        for name, dtype, ds in towers:
            mmproj = os.path.join(tmp, "mmproj.gguf")
            write_tower(mmproj, E, dtype, deepstack=ds)
            compare(tmp, name, model, mmproj, dtype, GRIDS if dtype == "f32" else GRIDS[:3])
            if name == "deepstack f32":
                cut_and_batch(tmp, name, model, mmproj, [(8, 8), (14, 6), (4, 4)])
        # the tower make-model writes: the real Qwen3.5 shapes, two blocks
        real = os.path.join(tmp, "mmproj-real.gguf")
        r = subprocess.run([BIN, "make-model", "--shape", "tiny", "--dtype", "f32", "--out",
                            os.path.join(tmp, "model2.gguf"), "--no-mtp", "--mmproj", real, "--vision-layers", "2"],
                           capture_output=True, text=True)
        if r.returncode == 0 and os.path.exists(real):
            compare(tmp, "make-model tower", os.path.join(tmp, "model2.gguf"), real, "f32", [(8, 8), (52, 50)])
        else:
            check("make-model --mmproj", False, r.stderr.strip()[-400:])
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
