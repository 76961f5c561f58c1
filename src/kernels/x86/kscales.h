/* kscales.h - the 6-bit sub-block scales and mins of q4_K/q5_K, kept packed
 * in the repacked layout (12 bytes per row, byte b of the 16 rows at
 * [b][16]), unpacked 16 rows at a time: out[j] (j < 8) the scales and
 * out[8 + j] the mins of sub-block j, one byte per row. */
#ifndef DS_KSCALES_H
#define DS_KSCALES_H

#include <immintrin.h>
#include <stdint.h>

static inline void ds_k_unpack_scales(const uint8_t *p, uint8_t out[16][16]) {
    __m128i B[12];
    for (int b = 0; b < 12; b++) B[b] = _mm_loadu_si128((const __m128i *)(p + 16 * b));
    const __m128i m63 = _mm_set1_epi8(63), m0f = _mm_set1_epi8(0x0F), m30 = _mm_set1_epi8(0x30);
    for (int j = 0; j < 4; j++) {
        _mm_storeu_si128((__m128i *)out[j], _mm_and_si128(B[j], m63));
        _mm_storeu_si128((__m128i *)out[8 + j], _mm_and_si128(B[j + 4], m63));
        /* (x >> 6) << 4 == (x >> 2) & 0x30 */
        __m128i sc = _mm_or_si128(_mm_and_si128(B[j + 8], m0f), _mm_and_si128(_mm_srli_epi16(B[j], 2), m30));
        __m128i mn = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(B[j + 8], 4), m0f),
                                  _mm_and_si128(_mm_srli_epi16(B[j + 4], 2), m30));
        _mm_storeu_si128((__m128i *)out[4 + j], sc);
        _mm_storeu_si128((__m128i *)out[12 + j], mn);
    }
}

#endif
