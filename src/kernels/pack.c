/* pack.c - repacking quantised matrices into 16-row groups for the SIMD
 * kernels (layout in kern.h). Runs once per matrix at load; scalar code. */
#include <string.h>

#include "common/half.h"
#include "kernels/gblock.h"
#include "kernels/kern.h"

int ds_pack_sb_elems(ds_dtype t) {
    switch (t) {
    case DS_Q8_0:
    case DS_Q4_0: return 32;
    case DS_Q4_K:
    case DS_Q5_K:
    case DS_Q6_K: return 256;
    default: return ds_gblock_type(t) ? 32 : 0;
    }
}

size_t ds_pack_sb_bytes(ds_dtype t, int form) {
    if (ds_gblock_type(t)) return ds_gform_of(form).bytes;
    switch (t) {
    case DS_Q8_0: return 32 + 8 * 64;
    case DS_Q4_0: return 32 + 4 * 64;
    case DS_Q4_K: return 64 + 192 + 8 * 4 * 64;
    case DS_Q5_K: return 64 + 192 + 8 * 4 * 64 + 8 * 64;
    case DS_Q6_K: return 32 + 256 + 8 * 4 * 64 + 8 * 2 * 64;
    default: return 0;
    }
}

size_t ds_pack_bytes(ds_dtype t, int form, int64_t rows, int64_t cols) {
    int sb = ds_pack_sb_elems(t);
    if (!sb) return 0;
    int64_t groups = (rows + DS_QG - 1) / DS_QG;
    return (size_t)groups * (size_t)(cols / sb) * ds_pack_sb_bytes(t, form);
}

/* ------------------------------------------------------------------------ */
/* The gblock types                                                          */

static int f16_exact(float v) {
    float back = ds_f16_to_f32(ds_f32_to_f16(v));
    return memcmp(&back, &v, 4) == 0;
}

/* index of each int8 level in the type's table; -1 where absent */
static void level_index(ds_dtype t, int16_t idx[256]) {
    const ds_glevels *l = ds_gblock_levels(t);
    for (int v = 0; v < 256; v++) idx[v] = -1;
    for (int k = l->count - 1; k >= 0; k--) idx[(uint8_t)l->lv[k]] = (int16_t)k;
}

int ds_pack_form(const ds_wmat *w, int64_t g0, int64_t g1) {
    if (!ds_gblock_type(w->type)) return 0;
    int count = ds_gblock_levels(w->type)->count;
    int form = (count > 16 ? DS_GF_FIVE : 0) | (count > 32 ? DS_GF_BAD : 0);
    int16_t idx[256];
    level_index(w->type, idx);
    size_t rb = ds_dtype_row_bytes(w->type, w->cols);
    int64_t r1 = g1 * DS_QG < w->rows ? g1 * DS_QG : w->rows;
    for (int64_t r = g0 * DS_QG; r < r1; r++) {
        const uint8_t *row = w->data + (size_t)r * rb;
        for (int64_t b = 0; b < w->cols / 32; b++) {
            ds_gblock g;
            ds_gblock_decode(w->type, row, b, &g);
            for (int i = 0; i < 32; i++)
                if (idx[(uint8_t)g.lv[i]] < 0) form |= DS_GF_BAD;
            if (g.sc[0] != 1 || g.sc[1] != 1) form |= DS_GF_SC;
            if (g.sc[0] != g.sc[1]) form |= DS_GF_SPLIT;
            if (!f16_exact(g.d)) form |= DS_GF_D32;
            if (g.dm != 0.0f) {
                form |= DS_GF_MIN;
                if (g.mn[0] != 1 || g.mn[1] != 1) form |= DS_GF_MNS;
                if (!f16_exact(g.dm)) form |= DS_GF_D32;
            }
        }
    }
    return form;
}

size_t ds_pack_plan(ds_wmat *w) {
    int sbe = ds_pack_sb_elems(w->type);
    if (!sbe) return 0;
    w->form = ds_pack_form(w, 0, (w->rows + DS_QG - 1) / DS_QG);
    w->sb_bytes = ds_pack_sb_bytes(w->type, w->form);
    w->group_bytes = (size_t)(w->cols / sbe) * w->sb_bytes;
    return ds_pack_bytes(w->type, w->form, w->rows, w->cols);
}

static void put_scale(uint8_t *p, int i, float v, int f32) {
    if (f32) memcpy(p + 4 * i, &v, 4);
    else {
        uint16_t h = ds_f32_to_f16(v);
        memcpy(p + 2 * i, &h, 2);
    }
}

static float get_scale(const uint8_t *p, int i, int f32) {
    if (f32) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return ds_f16_to_f32(h);
}

static void put_nibbles(uint8_t *dst, int i, const uint8_t *lv);

static void pack_gblock_group(const ds_wmat *w, uint8_t *dst, int64_t g) {
    ds_gform f = ds_gform_of(w->form);
    int16_t idx[256];
    level_index(w->type, idx);
    size_t rb = ds_dtype_row_bytes(w->type, w->cols);
    int64_t nb = w->cols / 32;
    memset(dst, 0, (size_t)nb * f.bytes);
    for (int i = 0; i < DS_QG; i++) {
        int64_t r = g * DS_QG + i;
        if (r >= w->rows) break;
        const uint8_t *row = w->data + (size_t)r * rb;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = dst + (size_t)b * f.bytes, ix[32];
            ds_gblock gb;
            ds_gblock_decode(w->type, row, b, &gb);
            for (int e = 0; e < 32; e++) ix[e] = (uint8_t)(idx[(uint8_t)gb.lv[e]] < 0 ? 0 : idx[(uint8_t)gb.lv[e]]);
            put_nibbles(o, i, ix);
            if (w->form & DS_GF_FIVE)
                for (int e = 0; e < 32; e++) o[f.hb + 4 * i + e % 4] |= (uint8_t)(((ix[e] >> 4) & 1) << (e / 4));
            put_scale(o + f.d, i, gb.d, w->form & DS_GF_D32);
            if (w->form & DS_GF_SC) {
                o[f.sc + i] = (uint8_t)gb.sc[0];
                if (w->form & DS_GF_SPLIT) o[f.sc + 16 + i] = (uint8_t)gb.sc[1];
            }
            if (w->form & DS_GF_MIN) {
                put_scale(o + f.dm, i, gb.dm, w->form & DS_GF_D32);
                if (w->form & DS_GF_MNS) {
                    o[f.mn + i] = (uint8_t)gb.mn[0];
                    o[f.mn + 16 + i] = (uint8_t)gb.mn[1];
                }
            }
        }
    }
}

void ds_gblock_row(ds_dtype t, const void *row, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        ds_gblock g;
        ds_gblock_decode(t, row, b, &g);
        for (int e = 0; e < 32; e++) {
            float v = (g.d * (float)g.sc[e / 16]) * (float)g.lv[e];
            if (g.dm != 0.0f) v = v + g.dm * (float)g.mn[e / 16];
            dst[32 * b + e] = v;
        }
    }
}

/* 6-bit scale and min of sub-block j of a q4_K/q5_K block (GGUF packing) */
static void k_scale_min(const uint8_t *p, int j, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = p[j] & 63;
        *mn = p[j + 4] & 63;
    } else {
        *sc = (uint8_t)((p[j + 4] & 0xF) | ((p[j - 4] >> 6) << 4));
        *mn = (uint8_t)((p[j + 4] >> 4) | ((p[j] >> 6) << 4));
    }
}

/* Writes 32 unsigned levels (< 16) of row i of a chunk as nibble pairs:
 * byte (p, i, c) = lv[4p + c] | lv[16 + 4p + c] << 4. */
static void put_nibbles(uint8_t *dst, int i, const uint8_t *lv) {
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 4; c++)
            dst[64 * p + 4 * i + c] = (uint8_t)((lv[4 * p + c] & 0xF) | ((lv[16 + 4 * p + c] & 0xF) << 4));
}

static void pack_group(const ds_wmat *w, uint8_t *dst, int64_t g) {
    if (ds_gblock_type(w->type)) {
        pack_gblock_group(w, dst, g);
        return;
    }
    int64_t cols = w->cols;
    int sbe = ds_pack_sb_elems(w->type);
    size_t sbb = ds_pack_sb_bytes(w->type, 0);
    int64_t nsb = cols / sbe;
    size_t rb = ds_dtype_row_bytes(w->type, cols);
    memset(dst, 0, (size_t)nsb * sbb);
    for (int i = 0; i < DS_QG; i++) {
        int64_t r = g * DS_QG + i;
        if (r >= w->rows) break;
        const uint8_t *row = w->data + (size_t)r * rb;
        for (int64_t s = 0; s < nsb; s++) {
            uint8_t *o = dst + (size_t)s * sbb;
            uint8_t lv[256];
            switch (w->type) {
            case DS_Q8_0: {
                const ds_block_q8_0 *b = (const ds_block_q8_0 *)row + s;
                memcpy(o + 2 * i, &b->d, 2);
                for (int st = 0; st < 8; st++) { /* four levels at a time, made unsigned */
                    uint32_t v;
                    memcpy(&v, b->qs + 4 * st, 4);
                    v ^= 0x80808080u;
                    memcpy(o + 32 + 64 * st + 4 * i, &v, 4);
                }
                break;
            }
            case DS_Q4_0: {
                const ds_block_q4_0 *b = (const ds_block_q4_0 *)row + s;
                memcpy(o + 2 * i, &b->d, 2);
                for (int e = 0; e < 16; e++) {
                    lv[e] = b->qs[e] & 0xF;
                    lv[e + 16] = b->qs[e] >> 4;
                }
                put_nibbles(o + 32, i, lv);
                break;
            }
            case DS_Q4_K:
            case DS_Q5_K: {
                const uint8_t *qs, *qh = NULL, *scales;
                uint16_t d, dmin;
                if (w->type == DS_Q4_K) {
                    const ds_block_q4_K *b = (const ds_block_q4_K *)row + s;
                    qs = b->qs, scales = b->scales, d = b->d, dmin = b->dmin;
                } else {
                    const ds_block_q5_K *b = (const ds_block_q5_K *)row + s;
                    qs = b->qs, qh = b->qh, scales = b->scales, d = b->d, dmin = b->dmin;
                }
                memcpy(o + 2 * i, &d, 2);
                memcpy(o + 32 + 2 * i, &dmin, 2);
                for (int b2 = 0; b2 < 12; b2++) o[64 + 16 * b2 + i] = scales[b2];
                for (int gq = 0; gq < 4; gq++)
                    for (int l = 0; l < 32; l++) {
                        lv[64 * gq + l] = qs[32 * gq + l] & 0xF;
                        lv[64 * gq + 32 + l] = qs[32 * gq + l] >> 4;
                        if (qh) {
                            lv[64 * gq + l] |= (uint8_t)(((qh[l] >> (2 * gq)) & 1) << 4);
                            lv[64 * gq + 32 + l] |= (uint8_t)(((qh[l] >> (2 * gq + 1)) & 1) << 4);
                        }
                    }
                for (int j = 0; j < 8; j++) {
                    put_nibbles(o + 256 + 256 * j, i, lv + 32 * j);
                    if (qh) {
                        uint8_t *h = o + 256 + 2048 + 64 * j;
                        for (int e = 0; e < 32; e++)
                            h[4 * i + e % 4] |= (uint8_t)(((lv[32 * j + e] >> 4) & 1) << (e / 4));
                    }
                }
                break;
            }
            case DS_Q6_K: {
                const ds_block_q6_K *b = (const ds_block_q6_K *)row + s;
                memcpy(o + 2 * i, &b->d, 2);
                for (int j = 0; j < 16; j++) o[32 + 16 * j + i] = (uint8_t)b->scales[j];
                for (int half = 0; half < 2; half++) {
                    const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
                    uint8_t *v = lv + 128 * half;
                    for (int l = 0; l < 32; l++) {
                        v[l] = (uint8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                        v[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                        v[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                        v[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
                    }
                }
                for (int j = 0; j < 8; j++) {
                    put_nibbles(o + 288 + 256 * j, i, lv + 32 * j);
                    uint8_t *h = o + 288 + 2048 + 128 * j;
                    for (int e = 0; e < 32; e++) {
                        int step = e / 4, half = step / 4, sp = step % 4;
                        h[64 * half + 4 * i + e % 4] |= (uint8_t)(((lv[32 * j + e] >> 4) & 3) << (2 * sp));
                    }
                }
                break;
            }
            default: break;
            }
        }
    }
}

void ds_pack_groups(const ds_wmat *w, uint8_t *dst, int64_t g0, int64_t g1) {
    size_t gb = (size_t)(w->cols / ds_pack_sb_elems(w->type)) * ds_pack_sb_bytes(w->type, w->form);
    for (int64_t g = g0; g < g1; g++) pack_group(w, dst + (size_t)g * gb, g);
}

/* ------------------------------------------------------------------------ */
/* Back to F32 (embedding rows of a tied output matrix)                      */

static uint8_t nibble_at(const uint8_t *chunk, int i, int e) {
    /* element e (0..31) of row i of a chunk of nibble pairs */
    int step = e / 4, c = e % 4;
    uint8_t b = chunk[64 * (step % 4) + 4 * i + c];
    return step < 4 ? (b & 0xF) : (b >> 4);
}

static void unpack_gblock_row(const ds_wmat *w, int64_t r, float *dst) {
    int i = (int)(r % DS_QG);
    ds_gform f = ds_gform_of(w->form);
    const ds_glevels *l = ds_gblock_levels(w->type);
    const uint8_t *gp = w->packed + (size_t)(r / DS_QG) * w->group_bytes;
    int f32 = w->form & DS_GF_D32;
    for (int64_t b = 0; b < w->cols / 32; b++, gp += f.bytes, dst += 32) {
        float d = get_scale(gp + f.d, i, f32), dm = w->form & DS_GF_MIN ? get_scale(gp + f.dm, i, f32) : 0.0f;
        for (int e = 0; e < 32; e++) {
            int k = nibble_at(gp, i, e);
            if (w->form & DS_GF_FIVE) k |= ((gp[f.hb + 4 * i + e % 4] >> (e / 4)) & 1) << 4;
            int h = e / 16;
            int sc = w->form & DS_GF_SC ? (int8_t)gp[f.sc + (w->form & DS_GF_SPLIT ? 16 * h : 0) + i] : 1;
            float v = (d * (float)sc) * (float)l->lv[k];
            if (dm != 0.0f) v = v + dm * (float)(w->form & DS_GF_MNS ? (int8_t)gp[f.mn + 16 * h + i] : 1);
            dst[e] = v;
        }
    }
}

void ds_unpack_row(const ds_wmat *w, int64_t r, float *dst) {
    if (ds_gblock_type(w->type)) {
        unpack_gblock_row(w, r, dst);
        return;
    }
    int64_t g = r / DS_QG;
    int i = (int)(r % DS_QG);
    int sbe = ds_pack_sb_elems(w->type);
    size_t sbb = ds_pack_sb_bytes(w->type, 0);
    const uint8_t *gp = w->packed + (size_t)g * w->group_bytes;
    for (int64_t s = 0; s < w->cols / sbe; s++, gp += sbb, dst += sbe) {
        uint16_t h;
        switch (w->type) {
        case DS_Q8_0: {
            memcpy(&h, gp + 2 * i, 2);
            const float d = ds_f16_to_f32(h);
            for (int e = 0; e < 32; e++) dst[e] = (int8_t)(gp[32 + 64 * (e / 4) + 4 * i + e % 4] - 128) * d;
            break;
        }
        case DS_Q4_0: {
            memcpy(&h, gp + 2 * i, 2);
            const float d = ds_f16_to_f32(h);
            for (int e = 0; e < 32; e++) dst[e] = (nibble_at(gp + 32, i, e) - 8) * d;
            break;
        }
        case DS_Q4_K:
        case DS_Q5_K: {
            uint16_t hm;
            memcpy(&h, gp + 2 * i, 2);
            memcpy(&hm, gp + 32 + 2 * i, 2);
            const float d = ds_f16_to_f32(h), dmin = ds_f16_to_f32(hm);
            uint8_t sb[12];
            for (int b2 = 0; b2 < 12; b2++) sb[b2] = gp[64 + 16 * b2 + i];
            for (int j = 0; j < 8; j++) {
                uint8_t sc, mn;
                k_scale_min(sb, j, &sc, &mn);
                const float step = d * sc, shift = dmin * mn;
                for (int e = 0; e < 32; e++) {
                    int q = nibble_at(gp + 256 + 256 * j, i, e);
                    if (w->type == DS_Q5_K && ((gp[256 + 2048 + 64 * j + 4 * i + e % 4] >> (e / 4)) & 1)) q += 16;
                    dst[32 * j + e] = step * q - shift;
                }
            }
            break;
        }
        case DS_Q6_K: {
            memcpy(&h, gp + 2 * i, 2);
            const float d = ds_f16_to_f32(h);
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 32; e++) {
                    int step = e / 4, half = step / 4, sp = step % 4;
                    int hi = (gp[288 + 2048 + 128 * j + 64 * half + 4 * i + e % 4] >> (2 * sp)) & 3;
                    int q = (nibble_at(gp + 288 + 256 * j, i, e) | (hi << 4)) - 32;
                    dst[32 * j + e] = d * (int8_t)gp[32 + 16 * (2 * j + e / 16) + i] * q;
                }
            break;
        }
        default: break;
        }
    }
}
