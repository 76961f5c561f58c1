/* half.h - IEEE fp16 and bfloat16 conversions (scalar, exact, round to nearest even). */
#ifndef DS_HALF_H
#define DS_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ds_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float ds_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float ds_bf16_to_f32(uint16_t h) { return ds_bits_f32((uint32_t)h << 16); }

static inline uint16_t ds_f32_to_bf16(float f) {
    uint32_t u = ds_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ds_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return ds_bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return ds_bits_f32(sign | 0x7f800000u | (man << 13));
    return ds_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t ds_f32_to_f16(float f) {
    uint32_t u = ds_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or 0 */
        /* scale so that one f16 subnormal ulp (2^-24) becomes 1.0, round to even */
        float v = ds_bits_f32(a) * 16777216.0f;
        uint32_t m = (uint32_t)v;
        float rest = v - (float)m;
        if (rest > 0.5f || (rest == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t mant_round = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (((mant_round >> 13) - (112u << 10)) & 0x7fffu));
}

#endif
