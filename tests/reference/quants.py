"""quants.py - an independent numpy decoder for deltaserve's row formats.

Written from the GGUF/ggml block definitions, not from the C code, so that
the two can check each other. Every product is taken in float32 in the order
ggml's dequantize_row_* takes it (e.g. (d * scale) * q, then minus dmin * min),
which makes the results bit-identical to the C reference, not merely close.

    dequantize(name, raw_bytes) -> 1-D float32 array
"""

import numpy as np

# name -> (elements per block, bytes per block)
FORMATS = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_k": (256, 144),
    "q5_k": (256, 176),
    "q6_k": (256, 210),
}
TYPE_NAMES = list(FORMATS)

F32 = np.float32


def _blocks(raw, block_bytes):
    data = np.frombuffer(raw, dtype=np.uint8)
    if data.size % block_bytes:
        raise ValueError(f"{data.size} bytes is not a whole number of {block_bytes}-byte blocks")
    return data.reshape(-1, block_bytes)


def _f16_column(blocks, offset):
    """The little-endian fp16 at byte offset of every block, as an (nb, 1) float32 column."""
    pair = np.ascontiguousarray(blocks[:, offset:offset + 2])
    return pair.view("<f2").astype(F32)


def _k_scales_mins(packed):
    """Unpacks the 12-byte field of q4_K/q5_K into (nb, 8) 6-bit scales and mins.

    Sub-blocks 0..3 keep their codes in the low 6 bits of bytes 0..3 (scales)
    and 4..7 (mins). Sub-blocks 4..7 keep their low 4 bits in bytes 8..11
    (scale in the low nibble, min in the high) and their top 2 bits in the top
    bits of bytes 0..3 (scales) and 4..7 (mins)."""
    p = packed.astype(np.int32)
    first, second, low = p[:, 0:4], p[:, 4:8], p[:, 8:12]
    scales = np.concatenate([first & 63, (low & 15) | ((first >> 6) << 4)], axis=1)
    mins = np.concatenate([second & 63, (low >> 4) | ((second >> 6) << 4)], axis=1)
    return scales, mins


def _k_low_nibbles(qs):
    """(nb, 128) bytes -> (nb, 8, 32) 4-bit codes: each 64-element group uses
    32 bytes, low nibbles for its first sub-block, high for its second."""
    q = qs.astype(np.int32).reshape(-1, 4, 1, 32)
    return np.concatenate([q & 15, q >> 4], axis=2).reshape(-1, 8, 32)


def _affine_k(codes, d, dmin, scales, mins):
    step = d * scales.astype(F32)        # (nb, 8)
    shift = dmin * mins.astype(F32)      # (nb, 8)
    return (step[:, :, None] * codes.astype(F32) - shift[:, :, None]).reshape(-1)


def _dequant_q8_0(b):
    d = _f16_column(b, 0)
    q = np.ascontiguousarray(b[:, 2:34]).view(np.int8).astype(F32)
    return (q * d).reshape(-1)


def _dequant_q4_0(b):
    d = _f16_column(b, 0)
    qs = b[:, 2:18].astype(np.int32)
    q = np.concatenate([(qs & 15) - 8, (qs >> 4) - 8], axis=1).astype(F32)
    return (q * d).reshape(-1)


def _dequant_q4_k(b):
    d, dmin = _f16_column(b, 0), _f16_column(b, 2)
    scales, mins = _k_scales_mins(b[:, 4:16])
    return _affine_k(_k_low_nibbles(b[:, 16:144]), d, dmin, scales, mins)


def _dequant_q5_k(b):
    d, dmin = _f16_column(b, 0), _f16_column(b, 2)
    scales, mins = _k_scales_mins(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int32)                      # (nb, 32)
    # bit s of qh[l] is the fifth bit of element l of sub-block s
    fifth = (qh[:, None, :] >> np.arange(8)[None, :, None]) & 1
    codes = _k_low_nibbles(b[:, 48:176]) + 16 * fifth
    return _affine_k(codes, d, dmin, scales, mins)


def _dequant_q6_k(b):
    ql = b[:, 0:128].astype(np.int32).reshape(-1, 2, 64)   # per 128-element half
    qh = b[:, 128:192].astype(np.int32).reshape(-1, 2, 32)
    scales = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(F32)
    d = _f16_column(b, 208)
    # within a half, run k of 32 elements: low 4 bits from ql[0:32] (k=0, 2)
    # or ql[32:64] (k=1, 3), low nibble for k<2 and high for k>=2; top 2 bits
    # at bits 2k of qh
    runs = [
        (ql[:, :, 0:32] & 15) | (((qh >> 0) & 3) << 4),
        (ql[:, :, 32:64] & 15) | (((qh >> 2) & 3) << 4),
        (ql[:, :, 0:32] >> 4) | (((qh >> 4) & 3) << 4),
        (ql[:, :, 32:64] >> 4) | (((qh >> 6) & 3) << 4),
    ]
    q = (np.stack(runs, axis=2).reshape(-1, 256) - 32).astype(F32)
    per_element_scale = scales[:, np.arange(256) // 16]    # sub-blocks of 16
    return ((d * per_element_scale) * q).reshape(-1)


def dequantize(name, raw):
    """Decodes a byte string of whole blocks of format name into float32."""
    name = name.lower()
    if name == "f32":
        return np.frombuffer(raw, dtype="<f4").astype(F32)
    if name == "f16":
        return np.frombuffer(raw, dtype="<f2").astype(F32)
    if name == "bf16":
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        return (halves << 16).view(F32)
    decoders = {
        "q8_0": _dequant_q8_0,
        "q4_0": _dequant_q4_0,
        "q4_k": _dequant_q4_k,
        "q5_k": _dequant_q5_k,
        "q6_k": _dequant_q6_k,
    }
    if name not in decoders:
        raise ValueError(f"unknown format {name!r}")
    out = decoders[name](_blocks(raw, FORMATS[name][1]))
    assert out.dtype == F32, out.dtype  # a silent float64 promotion would break bit-exactness
    return out
