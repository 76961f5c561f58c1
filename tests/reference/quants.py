"""quants.py - an independent numpy decoder for deltaserve's row formats.

Written from the GGUF/ggml block definitions, not from the C code, so that
the two can check each other. Every product is taken in float32 in the order
ggml's dequantize_row_* takes it (e.g. (d * scale) * q, then minus dmin * min),
which makes the results bit-identical to the C reference, not merely close.

    dequantize(name, raw_bytes) -> 1-D float32 array
"""

import numpy as np

import quants_grid  # the grid (iq) types have their own decoder

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
    "q4_1": (32, 20),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
    "q2_k": (256, 84),
    "q3_k": (256, 110),
    "iq4_nl": (32, 18),
    "iq4_xs": (256, 136),
    "mxfp4": (32, 17),
    "nvfp4": (64, 36),
    "tq1_0": (256, 54),
    "tq2_0": (256, 66),
}
TYPE_NAMES = list(FORMATS)
# the types that tests/unit/test_quant_lowbit.c dumps (the rest: test_quant.c)
LOWBIT_TYPE_NAMES = ["q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs", "mxfp4", "nvfp4", "tq1_0", "tq2_0"]


F32 = np.float32

# ggml's non-linear 4-bit codebook (iq4_nl, iq4_xs)
IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=F32)
# the E2M1 (fp4) values doubled, by 4-bit code: bit 3 is the sign
FP4_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=F32)


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


def _nibbles(qs):
    """(nb, 16*k) bytes -> (nb, k, 32) codes: per 16 bytes, the low nibbles are
    the first 16 elements and the high nibbles the next 16."""
    q = qs.astype(np.int32).reshape(qs.shape[0], -1, 16)
    return np.concatenate([q & 15, q >> 4], axis=2)


def _fifth_bits(qh):
    """(nb, 4) bytes -> (nb, 32): bit j of the little-endian 32-bit qh."""
    word = np.ascontiguousarray(qh).view("<u4").astype(np.int64)   # (nb, 1)
    return ((word >> np.arange(32)[None, :]) & 1).astype(np.int32)


def _dequant_q4_1(b):
    d, m = _f16_column(b, 0), _f16_column(b, 2)
    q = _nibbles(b[:, 4:20]).reshape(-1, 32).astype(F32)
    return (q * d + m).reshape(-1)


def _dequant_q5_0(b):
    d = _f16_column(b, 0)
    q = _nibbles(b[:, 6:22]).reshape(-1, 32) | (_fifth_bits(b[:, 2:6]) << 4)
    return ((q - 16).astype(F32) * d).reshape(-1)


def _dequant_q5_1(b):
    d, m = _f16_column(b, 0), _f16_column(b, 2)
    q = _nibbles(b[:, 8:24]).reshape(-1, 32) | (_fifth_bits(b[:, 4:8]) << 4)
    return (q.astype(F32) * d + m).reshape(-1)


def _two_bit_codes(qs):
    """(nb, 64) bytes -> (nb, 256) 2-bit codes of q2_K/q3_K/tq2_0: each half of
    128 elements uses 32 bytes; bits 2r..2r+1 of byte l are element 32r + l."""
    q = qs.astype(np.int32).reshape(-1, 2, 1, 32)
    shifts = (2 * np.arange(4)).reshape(1, 1, 4, 1)
    return ((q >> shifts) & 3).reshape(-1, 256)


def _dequant_q2_k(b):
    scales = b[:, 0:16].astype(np.int32)
    d, dmin = _f16_column(b, 80), _f16_column(b, 82)
    step = d * (scales & 15).astype(F32)          # (nb, 16) per sub-block of 16
    shift = dmin * (scales >> 4).astype(F32)
    q = _two_bit_codes(b[:, 16:80]).reshape(-1, 16, 16).astype(F32)
    return (step[:, :, None] * q - shift[:, :, None]).reshape(-1)


def _q3_k_scale_codes(packed):
    """(nb, 12) bytes -> (nb, 16) 6-bit codes: low 4 bits in the low (j < 8)
    or high (j >= 8) nibble of byte j % 8, top 2 bits at bits 2*(j//4) of
    byte 8 + j % 4."""
    p = packed.astype(np.int32)
    j = np.arange(16)
    low = np.where(j < 8, p[:, j % 8] & 15, p[:, j % 8] >> 4)
    high = (p[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    return low | (high << 4)


def _dequant_q3_k(b):
    hmask = b[:, 0:32].astype(np.int32)
    low = _two_bit_codes(b[:, 32:96])
    codes = _q3_k_scale_codes(b[:, 96:108])
    d = _f16_column(b, 108)
    e = np.arange(256)
    high = (hmask[:, e % 32] >> (e // 32)) & 1        # set: the code is not lowered by 4
    q = (low - 4 * (1 - high)).astype(F32).reshape(-1, 16, 16)
    step = d * (codes - 32).astype(F32)
    return (step[:, :, None] * q).reshape(-1)


def _dequant_iq4_nl(b):
    d = _f16_column(b, 0)
    q = _nibbles(b[:, 2:18]).reshape(-1, 32)
    return (d * IQ4_VALUES[q]).reshape(-1)


def _dequant_iq4_xs(b):
    d = _f16_column(b, 0)
    scales_h = np.ascontiguousarray(b[:, 2:4]).view("<u2").astype(np.int32)   # (nb, 1)
    scales_l = b[:, 4:8].astype(np.int32)
    j = np.arange(8)
    codes = ((scales_l[:, j // 2] >> (4 * (j % 2))) & 15) | (((scales_h >> (2 * j)) & 3) << 4)
    step = d * (codes - 32).astype(F32)                                      # (nb, 8)
    q = _nibbles(b[:, 8:136])                                                # (nb, 8, 32)
    return (step[:, :, None] * IQ4_VALUES[q]).reshape(-1)


def _e8m0_half(e):
    """E8M0 exponent e -> 2^(e - 128) in float32 (subnormal for e < 2)."""
    return np.ldexp(np.float64(1.0), e.astype(np.int32) - 128).astype(F32)


def _ue4m3_half(x):
    """UE4M3 byte -> half its value in float32: 4 exponent bits (bias 7) and 3
    mantissa bits, the top bit ignored; exponent 0 is subnormal (man * 2^-9);
    0x00 and 0x7F (NaN) read as zero, 0xFF does not."""
    x = x.astype(np.int32)
    exp, man = (x >> 3) & 15, x & 7
    value = np.where(exp == 0, np.ldexp(man.astype(np.float64), -9),
                     np.ldexp(1.0 + man / 8.0, exp - 7))
    value = np.where((x == 0) | (x == 0x7F), 0.0, value)
    return (value * 0.5).astype(F32)


def _dequant_mxfp4(b):
    d = _e8m0_half(b[:, 0:1])
    q = _nibbles(b[:, 1:17]).reshape(-1, 32)
    return (FP4_DOUBLED[q] * d).reshape(-1)


def _dequant_nvfp4(b):
    d = _ue4m3_half(b[:, 0:4])                        # (nb, 4), one per 16 elements
    # sub-block s uses bytes 8s..8s+7: low nibbles its first 8 elements, high its last 8
    qs = b[:, 4:36].astype(np.int32).reshape(-1, 4, 8)
    q = np.concatenate([qs & 15, qs >> 4], axis=2)
    return (FP4_DOUBLED[q] * d[:, :, None]).reshape(-1)


def _trits(byte, count):
    """Bytes holding base-3 fractions of 256 -> their first count trits (most
    significant first), as (..., count): trit n is the top trit of byte * 3^n
    (mod 256), read as floor(3 * that / 256)."""
    out = []
    for n in range(count):
        shifted = (byte.astype(np.int32) * 3 ** n) & 255
        out.append((shifted * 3) >> 8)
    return np.stack(out, axis=-1)


def _dequant_tq1_0(b):
    d = _f16_column(b, 52)
    # qs[0:32]: trit n of byte m is element 32n + m; qs[32:48]: element
    # 160 + 16n + m; qh[0:4] (4 trits each): element 240 + 4n + m
    first = _trits(b[:, 0:32], 5).transpose(0, 2, 1).reshape(-1, 160)
    second = _trits(b[:, 32:48], 5).transpose(0, 2, 1).reshape(-1, 80)
    third = _trits(b[:, 48:52], 4).transpose(0, 2, 1).reshape(-1, 16)
    t = np.concatenate([first, second, third], axis=1)
    return ((t - 1).astype(F32) * d).reshape(-1)


def _dequant_tq2_0(b):
    d = _f16_column(b, 64)
    return ((_two_bit_codes(b[:, 0:64]) - 1).astype(F32) * d).reshape(-1)


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
        "q4_1": _dequant_q4_1,
        "q5_0": _dequant_q5_0,
        "q5_1": _dequant_q5_1,
        "q2_k": _dequant_q2_k,
        "q3_k": _dequant_q3_k,
        "iq4_nl": _dequant_iq4_nl,
        "iq4_xs": _dequant_iq4_xs,
        "mxfp4": _dequant_mxfp4,
        "nvfp4": _dequant_nvfp4,
        "tq1_0": _dequant_tq1_0,
        "tq2_0": _dequant_tq2_0,
    }
    if name not in decoders:
        if name in quants_grid.FORMATS:
            return quants_grid.dequantize(name, raw)
        raise ValueError(f"unknown format {name!r}")
    out = decoders[name](_blocks(raw, FORMATS[name][1]))
    assert out.dtype == F32, out.dtype  # a silent float64 promotion would break bit-exactness
    return out
