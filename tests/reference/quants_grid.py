"""quants_grid.py - an independent numpy decoder for the grid ("iq") weight types.

iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s and iq1_m, written from the
GGUF/ggml block definitions, not from the C code. As in quants.py, every
product is taken in float32 in the order ggml's dequantize_row_iq* takes it,
so the results are bit-identical to the C reference:

    iq2_*    (d * (0.5 + ls)) * 0.25, times the grid byte, negated by its sign bit
    iq3_xxs  (d * (0.5 + ls)) * 0.5,  likewise
    iq3_s    d * (1 + 2 ls), likewise
    iq1_*    (d * (2 ls + 1)) * (grid value + delta), delta = +-1/8

The codebooks are facts of the format; they are read from the C source
(src/kernels/grid_tables.c), each entry as 8 (iq2, iq1) or 4 (iq3) bytes in
little-endian order. The sign masks are derived from the format's rule (7
stored bits, the eighth making the count of negatives even), not read.

    dequantize(name, raw_bytes) -> 1-D float32 array
"""

import os
import re

import numpy as np

F32 = np.float32
QK_K = 256

# name -> (elements per block, bytes per block)
FORMATS = {
    "iq2_xxs": (QK_K, 66),
    "iq2_xs": (QK_K, 74),
    "iq2_s": (QK_K, 82),
    "iq3_xxs": (QK_K, 98),
    "iq3_s": (QK_K, 110),
    "iq1_s": (QK_K, 50),
    "iq1_m": (QK_K, 56),
}
TYPE_NAMES = list(FORMATS)

_TABLES_C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "kernels", "grid_tables.c")
_grids = None


def grids():
    """{table name: (entries, 8 or 4) uint8 or int8 array} from grid_tables.c."""
    global _grids
    if _grids is None:
        with open(_TABLES_C) as f:
            text = f.read()
        found = {}
        for ctype, name, size, body in re.findall(r"const (uint\d+_t) ds_grid_(\w+)\[(\d+)\] = \{(.*?)\};", text, re.S):
            values = [int(v, 0) for v in re.findall(r"0x[0-9a-fA-F]+|\d+", body)]
            if len(values) != int(size):
                raise ValueError(f"grid_tables.c: {name} has {len(values)} values, declared {size}")
            width = {"uint64_t": 8, "uint32_t": 4, "uint8_t": 1}[ctype]
            found[name] = np.array(values, dtype=f"<u{width}").view(np.uint8).reshape(len(values), width)
        found["iq1s"] = found["iq1s"].view(np.int8)
        _grids = found
    return _grids


def _blocks(raw, block_bytes):
    data = np.frombuffer(raw, dtype=np.uint8)
    if data.size % block_bytes:
        raise ValueError(f"{data.size} bytes is not a whole number of {block_bytes}-byte blocks")
    return data.reshape(-1, block_bytes)


def _u16(blocks, start, count):
    return np.ascontiguousarray(blocks[:, start:start + 2 * count]).view("<u2").astype(np.int64)


def _u32(blocks, start, count):
    return np.ascontiguousarray(blocks[:, start:start + 4 * count]).view("<u4").astype(np.int64)


def _f16(blocks, offset):
    """The fp16 at byte offset of every block as an (nb, 1) float32 column."""
    return np.ascontiguousarray(blocks[:, offset:offset + 2]).view("<f2").astype(F32)


def _bits8(masks):
    """(...,) sign masks -> (..., 8) booleans, element j negated when bit j is set."""
    return ((masks[..., None] >> np.arange(8)) & 1).astype(bool)


def _even_signs(seven):
    """7 stored sign bits -> the 8-bit mask: bit 7 set when the 7 have an odd count."""
    parity = np.zeros_like(seven)
    for b in range(7):
        parity ^= (seven >> b) & 1
    return seven | (parity << 7)


def _signed(db, values, masks):
    """db (nb, units, 1, 1) times grid values (nb, units, groups, 8), then signs."""
    y = db * values.astype(F32)
    return np.where(_bits8(masks), -y, y)


def _iq2_scale(d, ls):
    return d * (F32(0.5) + ls.astype(F32)) * F32(0.25)


def _dequant_iq2_xxs(b):
    d = _f16(b, 0)
    words = _u32(b, 2, 16).reshape(-1, 8, 2)                 # per 32: grid bytes, then signs+scale
    idx = (words[:, :, 0:1] >> (8 * np.arange(4))) & 255      # (nb, 8, 4)
    aux = words[:, :, 1:2]
    masks = _even_signs((aux >> (7 * np.arange(4))) & 127)
    db = _iq2_scale(d, aux[:, :, 0] >> 28)[:, :, None, None]
    return _signed(db, grids()["iq2xxs"][idx], masks).reshape(-1)


def _iq2_half_scales(d, scales):
    """Two 4-bit scales per 32 (low nibble: first 16) -> (nb, 8, 4) per-group db."""
    ls = np.stack([scales & 15, scales >> 4], axis=2)         # (nb, 8, 2)
    db = _iq2_scale(d[:, :, None], ls)                         # (nb, 8, 2)
    return np.repeat(db, 2, axis=2)


def _dequant_iq2_xs(b):
    d = _f16(b, 0)
    q = _u16(b, 2, 32).reshape(-1, 8, 4)
    db = _iq2_half_scales(d, b[:, 66:74].astype(np.int64))[:, :, :, None]
    return _signed(db, grids()["iq2xs"][q & 511], _even_signs(q >> 9)).reshape(-1)


def _dequant_iq2_s(b):
    d = _f16(b, 0)
    low = b[:, 2:34].astype(np.int64).reshape(-1, 8, 4)
    masks = b[:, 34:66].astype(np.int64).reshape(-1, 8, 4)
    qh = b[:, 66:74].astype(np.int64)[:, :, None]              # 2 high index bits per group
    idx = low | (((qh >> (2 * np.arange(4))) & 3) << 8)
    db = _iq2_half_scales(d, b[:, 74:82].astype(np.int64))[:, :, :, None]
    return _signed(db, grids()["iq2s"][idx], masks).reshape(-1)


def _dequant_iq3_xxs(b):
    d = _f16(b, 0)
    idx = b[:, 2:66].astype(np.int64).reshape(-1, 8, 4, 2)    # two 4-value entries per group
    aux = _u32(b, 66, 8)[:, :, None]
    masks = _even_signs((aux >> (7 * np.arange(4))) & 127)
    db = (d * (F32(0.5) + (aux[:, :, 0] >> 28).astype(F32)) * F32(0.5))[:, :, None, None]
    values = grids()["iq3xxs"][idx].reshape(-1, 8, 4, 8)
    return _signed(db, values, masks).reshape(-1)


def _dequant_iq3_s(b):
    d = _f16(b, 0)
    low = b[:, 2:66].astype(np.int64).reshape(-1, 8, 8)        # 8 entries per 32
    qh = b[:, 66:74].astype(np.int64)[:, :, None]              # bit k: 9th bit of entry k
    idx = (low | (((qh >> np.arange(8)) & 1) << 8)).reshape(-1, 8, 4, 2)
    masks = b[:, 74:106].astype(np.int64).reshape(-1, 8, 4)
    sc = b[:, 106:110].astype(np.int64)
    ls = np.stack([sc & 15, sc >> 4], axis=2).reshape(-1, 8)   # low nibble: even block of 32
    db = (d * (1 + 2 * ls).astype(F32))[:, :, None, None]
    values = grids()["iq3s"][idx].reshape(-1, 8, 4, 8)
    return _signed(db, values, masks).reshape(-1)


def _iq1_values(dl, idx, negative):
    """dl (nb, 8, 4) per group, idx (nb, 8, 4), negative (nb, 8, 4) -> floats."""
    delta = np.where(negative, F32(-0.125), F32(0.125)).astype(F32)
    shifted = grids()["iq1s"][idx].astype(F32) + delta[..., None]
    return (dl[..., None] * shifted).reshape(-1)


def _dequant_iq1_s(b):
    d = _f16(b, 0)
    low = b[:, 2:34].astype(np.int64).reshape(-1, 8, 4)
    qh = _u16(b, 34, 8)[:, :, None]                            # 3 high bits per group, scale, delta sign
    idx = low | (((qh >> (3 * np.arange(4))) & 7) << 8)
    dl = d * (2 * ((qh[:, :, 0] >> 12) & 7) + 1).astype(F32)
    negative = np.repeat(((qh >> 15) & 1).astype(bool), 4, axis=2)
    return _iq1_values(np.repeat(dl[:, :, None], 4, axis=2), idx, negative)


def _dequant_iq1_m(b):
    low = b[:, 0:32].astype(np.int64).reshape(-1, 8, 4)
    nibbles = b[:, 32:48].astype(np.int64).reshape(-1, 8, 2, 1) >> np.array([0, 4])
    nibbles = (nibbles & 15).reshape(-1, 8, 4)                 # per group: 3 index bits, delta sign
    idx = low | ((nibbles & 7) << 8)
    sc = _u16(b, 48, 4)                                        # (nb, 4)
    # the fp16 super-block scale: the top nibbles of the four words, lowest first
    h = ((sc >> 12) << (4 * np.arange(4))).sum(axis=1).astype("<u2")
    d = h.view("<f2").astype(F32)[:, None]
    codes = (np.repeat(sc, 2, axis=1) >> (6 * np.tile([0, 1], 4)))  # (nb, 8): 6 bits per 32
    ls = np.stack([codes & 7, (codes >> 3) & 7], axis=2)         # (nb, 8, 2) halves
    dl = np.repeat(d[:, :, None] * (2 * ls + 1).astype(F32), 2, axis=2)
    return _iq1_values(dl, idx, (nibbles >> 3).astype(bool))


_DECODERS = {
    "iq2_xxs": _dequant_iq2_xxs,
    "iq2_xs": _dequant_iq2_xs,
    "iq2_s": _dequant_iq2_s,
    "iq3_xxs": _dequant_iq3_xxs,
    "iq3_s": _dequant_iq3_s,
    "iq1_s": _dequant_iq1_s,
    "iq1_m": _dequant_iq1_m,
}


def dequantize(name, raw):
    """Decodes a byte string of whole blocks of grid format name into float32."""
    name = name.lower()
    if name not in _DECODERS:
        raise ValueError(f"unknown format {name!r}")
    out = _DECODERS[name](_blocks(raw, FORMATS[name][1]))
    assert out.dtype == F32, out.dtype  # a silent float64 promotion would break bit-exactness
    return out
