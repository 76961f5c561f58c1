"""test_image_prep.py - the C image decoding and preprocessing (src/image)
against an independent implementation of the Hugging Face Qwen2-VL / Qwen3-VL
image processor's steps in NumPy and PIL (Debian's python3-pil):

  - smart_resize (its code, with Python's round-half-to-even) for about 2000
    sizes and two configurations (Qwen3.5: patch 16, merge 2, 65536 ..
    16777216 pixels; Qwen2-VL: patch 14, 3136 .. 12845056), including the
    aspect ratios past 200 it refuses: same sizes, same token counts;
  - preprocessing of random and smooth pictures of many sizes and aspect
    ratios (up, down, one side only, unchanged): PIL's Image.resize with
    BICUBIC on the uint8 picture, rescale 1/255 in float64 stored as float32,
    (x - mean) / std in float32, then the processor's reshape and transpose
    into merge-group order with the frame repeated; the C patches must agree
    to 1e-6 (a uint8 step of the resize would be 2/255);
  - decoding: pictures PIL writes in many variants (JPEG baseline,
    progressive, 4:2:0 and 4:4:4, grey, CMYK, EXIF orientations 1..8; PNG
    RGB, RGBA, L, LA, P, P with transparency, 1-bit, 16-bit, interlaced; WebP
    lossless, lossy, lossy with alpha; GIF, GIF with transparency, interlaced,
    its frame on a larger logical screen or poking out of it) decode to
    exactly the pixels of PIL + ImageOps.exif_transpose + convert_to_rgb.

The C side is driven through the helper modes of build/tests/test_image
(--sizes, --prep, --decode). Prints "ok"/"FAIL" per case and
"RESULT passed=N failed=M".
"""

import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image, ImageOps

BUILD = os.environ.get("DS_BUILD", "build")
HELPER = os.path.join(BUILD, "tests", "test_image")
TOL = 1e-6
passed = failed = 0


def report(name, err):
    global passed, failed
    if err:
        failed += 1
        print(f"FAIL {name}: {err}")
    else:
        passed += 1
        print(f"ok {name}")


def smart_resize(height, width, factor, min_pixels, max_pixels):
    """transformers' qwen2_vl smart_resize (returns None where it raises)"""
    if max(height, width) / min(height, width) > 200:
        return None
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def check_sizes(patch, merge, min_px, max_px):
    rng = random.Random(patch * 1000 + merge)
    f = patch * merge
    sizes = [(1, 1), (1, 200), (200, 1), (1, 201), (201, 1), (3, 601), (f, f), (f // 2, 3 * f // 2),
             (5 * f // 2, 7 * f // 2), (448, 448), (1024, 1024), (8000, 6000), (16384, 1024), (4096, 4097)]
    sizes += [(rng.randint(1, 5000), rng.randint(1, 5000)) for _ in range(1500)]
    sizes += [(rng.randint(1, 64), rng.randint(1, 12000)) for _ in range(300)]
    sizes += [(k * f // 2, (k + 1) * f // 2) for k in range(1, 200)]  # halves: round half to even
    inp = "".join(f"{w} {h}\n" for w, h in sizes)
    p = subprocess.run([HELPER, "--sizes", str(patch), str(merge), str(min_px), str(max_px)], input=inp,
                       capture_output=True, text=True)
    if p.returncode != 0:
        return f"exit {p.returncode}: {p.stderr.strip()}"
    lines = p.stdout.splitlines()
    if len(lines) != len(sizes):
        return f"{len(lines)} answers for {len(sizes)} sizes"
    bad = []
    refused = 0
    for (w, h), line in zip(sizes, lines):
        want = smart_resize(h, w, f, min_px, max_px)
        if want is None:
            refused += 1
            if not line.startswith("error") or "aspect" not in line:
                bad.append(f"{w}x{h}: '{line}', the processor refuses it")
            continue
        wh, ww = want
        tokens = (wh // f) * (ww // f)
        if line != f"{ww} {wh} {tokens}":
            bad.append(f"{w}x{h}: '{line}', want '{ww} {wh} {tokens}'")
    if refused == 0:
        return "no size was refused: the aspect check is untested"
    return "; ".join(bad[:5]) + (f" (+{len(bad) - 5})" if len(bad) > 5 else "") if bad else None


def reference_patches(img, patch, merge, temporal, min_px, max_px, mean, std):
    """the processor's _preprocess for one image: resize, rescale, normalize, patches"""
    f = patch * merge
    h, w = smart_resize(img.height, img.width, f, min_px, max_px)
    arr = np.asarray(img.resize((w, h), resample=Image.BICUBIC))  # HWC uint8, PIL's resample as transformers' resize
    x = (arr.astype(np.float64) * (1 / 255)).astype(np.float32)
    m = np.array([mean] * 3, dtype=np.float32)
    s = np.array([std] * 3, dtype=np.float32)
    x = (x - m) / s
    x = x.transpose(2, 0, 1)[None]  # [1, C, H, W]
    x = np.concatenate([x] + [x[-1:]] * (temporal - 1), axis=0)  # the frame repeated to fill the temporal patch
    gh, gw = h // patch, w // patch
    x = x.reshape(1, temporal, 3, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return (1, gh, gw), x.reshape(gh * gw, 3 * temporal * patch * patch)


def run_prep(tmp, img, patch, merge, temporal, min_px, max_px, mean, std):
    src, out = os.path.join(tmp, "in.ppm"), os.path.join(tmp, "out.bin")
    img.save(src)
    p = subprocess.run([HELPER, "--prep", src, out, str(patch), str(merge), str(temporal), str(min_px), str(max_px),
                        str(mean), str(std)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"--prep exited {p.returncode}: {p.stderr.strip()}")
    raw = open(out, "rb").read()
    gt, gh, gw, dim = np.frombuffer(raw[:16], dtype="<i4")
    return (int(gt), int(gh), int(gw)), np.frombuffer(raw[16:], dtype="<f4").reshape(gh * gw, dim)


def picture(rng, w, h, kind):
    if kind == "noise":
        a = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    else:  # smooth gradients with an edge, the kind where rounding between passes shows
        yy, xx = np.mgrid[0:h, 0:w]
        a = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)),
                      np.where((xx + yy) % 17 < 8, 30, 220)], axis=-1).astype(np.uint8)
    return Image.fromarray(a, "RGB")


def check_prep(tmp):
    rng = np.random.default_rng(7)
    # (w, h, patch, merge, min, max): up, down, one side only, unchanged, thin
    configs = [
        (448, 448, 16, 2, 65536, 16777216), (64, 64, 16, 2, 65536, 16777216), (300, 200, 16, 2, 65536, 16777216),
        (1000, 700, 16, 2, 65536, 1048576), (2048, 512, 16, 2, 65536, 262144), (512, 300, 16, 2, 1024, 16777216),
        (300, 512, 16, 2, 1024, 16777216), (33, 700, 16, 2, 65536, 16777216), (1500, 20, 16, 2, 65536, 16777216),
        (97, 131, 16, 2, 4096, 65536), (640, 480, 14, 2, 3136, 12845056), (777, 333, 14, 2, 3136, 200000),
        (5, 5, 16, 2, 65536, 16777216), (1, 150, 16, 2, 65536, 16777216), (3001, 2999, 16, 2, 65536, 1000000),
    ]
    for w, h, patch, merge, mn, mx in configs:
        for kind in ("noise", "smooth"):
            img = picture(rng, w, h, kind)
            name = f"prep_{w}x{h}_p{patch}_{kind}"
            try:
                grid, got = run_prep(tmp, img, patch, merge, 2, mn, mx, 0.5, 0.5)
            except RuntimeError as ex:
                report(name, str(ex))
                continue
            want_grid, want = reference_patches(img, patch, merge, 2, mn, mx, 0.5, 0.5)
            if grid != want_grid or got.shape != want.shape:
                report(name, f"grid {grid} shape {got.shape}, want {want_grid} {want.shape}")
                continue
            err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
            exact = float(np.mean(got == want))
            report(name, None if err <= TOL else f"max |C - ref| = {err:.3g} (> {TOL}), {exact:.4f} exactly equal")
    # other normalisation constants (CLIP's): taken from the config, not fixed
    img = picture(rng, 200, 120, "noise")
    grid, got = run_prep(tmp, img, 14, 2, 2, 3136, 12845056, 0.48145466, 0.26862954)
    _, want = reference_patches(img, 14, 2, 2, 3136, 12845056, 0.48145466, 0.26862954)
    err = float(np.max(np.abs(got.astype(np.float64) - want))) / float(np.max(np.abs(want)))
    report("prep_clip_mean_std", None if err <= TOL else f"max rel error {err:.3g}")


def convert_to_rgb(im):
    """transformers.image_transforms.convert_to_rgb"""
    if im.mode == "RGB":
        return im
    rgba = im.convert("RGBA")
    bg = Image.new("RGBA", rgba.size, (255, 255, 255))
    return Image.alpha_composite(bg, rgba).convert("RGB")


def decode_variants(tmp):
    rng = np.random.default_rng(3)
    w, h = 45, 29
    yy, xx = np.mgrid[0:h, 0:w]
    base = Image.fromarray(np.stack([xx * 5, yy * 8, (xx * yy) % 256], -1).astype(np.uint8), "RGB")
    noise = Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8), "RGB")
    alpha = Image.fromarray(rng.integers(0, 256, size=(h, w), dtype=np.uint8), "L")
    rgba = base.copy()
    rgba.putalpha(alpha)
    v = []
    v.append(("baseline.jpg", base, dict(quality=90)))
    v.append(("noise444.jpg", noise, dict(quality=95, subsampling=0)))
    v.append(("noise420.jpg", noise, dict(quality=75, subsampling=2)))
    v.append(("progressive.jpg", noise, dict(quality=85, progressive=True)))
    v.append(("gray.jpg", base.convert("L"), dict(quality=90)))
    v.append(("cmyk.jpg", base.convert("CMYK"), dict(quality=90)))
    for o in range(1, 9):
        ex = Image.Exif()
        ex[0x0112] = o
        v.append((f"orient{o}.jpg", base, dict(quality=90, exif=ex.tobytes())))
    v.append(("rgb.png", noise, {}))
    v.append(("rgba.png", rgba, {}))
    v.append(("l.png", base.convert("L"), {}))
    v.append(("la.png", rgba.convert("LA"), {}))
    v.append(("p.png", noise.quantize(200), {}))
    pt = base.quantize(64)
    v.append(("p_trns.png", pt, dict(transparency=5)))
    v.append(("one_bit.png", base.convert("1"), {}))
    v.append(("interlaced.png", noise, dict(interlace=1)))
    v.append(("lossless.webp", noise, dict(lossless=True)))
    v.append(("lossless_alpha.webp", rgba, dict(lossless=True)))
    v.append(("lossy.webp", base, dict(quality=80)))
    v.append(("lossy_alpha.webp", rgba, dict(quality=80)))
    v.append(("p.gif", noise.quantize(256), {}))
    v.append(("p_trns.gif", pt, dict(transparency=5)))
    v.append(("interlaced.gif", noise.quantize(100), dict(interlace=True)))
    v.append(("rgb16.png", None, {}))
    out = []
    # the first frame placed on a larger logical screen, and poking out of a smaller one (PIL grows the picture)
    small = noise.crop((0, 0, 10, 8))
    for name, im, kw, screen, at in [
        ("framed.gif", small.quantize(50), {}, (14, 12), (3, 2)),
        ("framed_trns.gif", small.quantize(50), dict(transparency=0), (14, 12), (3, 2)),
        ("framed_out.gif", small.quantize(50), {}, (8, 6), (1, 1)),
    ]:
        path = os.path.join(tmp, name)
        im.save(path, **kw)
        place_gif_frame(path, screen, at)
        out.append((name, path))
    for name, im, kw in v:
        path = os.path.join(tmp, name)
        if name == "rgb16.png":  # 16-bit RGB: PIL keeps the high byte
            a16 = (rng.integers(0, 65536, size=(h, w, 3))).astype(">u2")
            write_png16(path, a16)
        else:
            im.save(path, **kw)
        out.append((name, path))
    return out


def place_gif_frame(path, screen, at):
    """rewrites a one-frame GIF's logical screen size and its frame's position"""
    import struct
    b = bytearray(open(path, "rb").read())
    b[6:10] = struct.pack("<HH", *screen)
    i = 13 + (3 << ((b[10] & 7) + 1) if b[10] & 0x80 else 0)
    while b[i] == 0x21:  # extensions: introducer, label, sub-blocks, terminator
        i += 2
        while b[i]:
            i += b[i] + 1
        i += 1
    assert b[i] == 0x2C
    b[i + 1:i + 5] = struct.pack("<HH", *at)
    open(path, "wb").write(bytes(b))


def write_png16(path, a):
    import struct
    import zlib
    h, w, _ = a.shape
    raw = b"".join(b"\0" + a[y].tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open(path, "wb").write(png)


def check_decode(tmp):
    for name, path in decode_variants(tmp):
        out = os.path.join(tmp, "dec.bin")
        p = subprocess.run([HELPER, "--decode", path, out], capture_output=True, text=True)
        if p.returncode != 0:
            report(f"decode_{name}", f"refused: {p.stderr.strip()}")
            continue
        raw = open(out, "rb").read()
        w, h = np.frombuffer(raw[:8], dtype="<u4")
        got = np.frombuffer(raw[8:], dtype=np.uint8).reshape(h, w, 3)
        with Image.open(path) as im:
            ref = np.asarray(convert_to_rgb(ImageOps.exif_transpose(im)))
        if got.shape != ref.shape:
            report(f"decode_{name}", f"{got.shape[1]}x{got.shape[0]}, PIL {ref.shape[1]}x{ref.shape[0]}")
            continue
        d = np.abs(got.astype(int) - ref.astype(int))
        report(f"decode_{name}", None if d.max() == 0 else
               f"{int((d > 0).sum())} of {d.size} values differ from PIL, by up to {int(d.max())}")


def main():
    if not os.path.exists(HELPER):
        print(f"FAIL setup: {HELPER} is not built")
        print("RESULT passed=0 failed=1")
        return 1
    report("sizes_qwen35", check_sizes(16, 2, 65536, 16777216))
    report("sizes_qwen2vl", check_sizes(14, 2, 3136, 12845056))
    with tempfile.TemporaryDirectory(dir=os.environ.get("DS_TMP")) as tmp:
        check_prep(tmp)
        check_decode(tmp)
    print(f"RESULT passed={passed} failed={failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
