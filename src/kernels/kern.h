/* kern.h - matrix kernels and their per-ISA tables (private to src/kernels).
 *
 * NUMERICS (the contract every path keeps; see ops.h for the op list)
 *   - F32 and F16 weights: F32 activations; per output, 16 partial sums over
 *     the row in steps of 16 (lane l takes elements l, l+16, ...), products
 *     and sums rounded separately (no FMA), then summed lane 0..15 in order,
 *     then the tail. This is ds_dot's order, so every path gives the same bits.
 *   - BF16 weights: activations rounded to BF16 (nearest even), then as F32.
 *     Products of two BF16 values are exact in F32, so again every path gives
 *     the same bits, except the AVX512_BF16 path (VDPBF16PS), which pairs
 *     elements inside a lane; it is checked against the others to a tolerance.
 *   - Quantised weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K): activations quantised
 *     per 32 elements to int8 with an F32 scale dx = amax/127 (q = x * (1/dx)
 *     rounded to nearest even). Integer dot products per 32-element block
 *     (exact; the k-quants' sub-block scales applied in integers: sc * isum,
 *     q6_K's two 16-element halves as sc_a isum_a + sc_b isum_b), then per
 *     block, in block order: acc = acc + (float)isum * (dw * dx), and for the
 *     k-quants with mins acc = acc - (dmin * m) * (dx * sum(q)). Every path
 *     performs exactly these F32 operations, so all give the same bits.
 *     Q8_0 weights are as precise as such activations, so for them the
 *     activations carry a second int8 term, the residual on a 128 times finer
 *     grid: with v = x/dx (clamped to +-127), q = rint(v), r = rint(128 (v-q))
 *     in -64..64, x ~ (dx/128)(128 q + r), and a block adds
 *     acc = acc + (float)(128 isum_q + isum_r) * (dw * (dx/128)): about 15
 *     bits of activation for twice the integer work (decode, bound by memory,
 *     does not notice). A matrix marked x8 (DS_W_X8: the output head, whose
 *     error stays in the logits) skips the residual in every call, like
 *     Q4_0: acc = acc + (float)isum_q * (dw * dx); batched decode, bound by
 *     the integer work, gains. The mark is the weight's, never the batch's.
 *   - The gblock types (gblock.h: q4_1, q5_0, q5_1, q2_K, q3_K, the iq types,
 *     mxfp4, tq1_0, tq2_0): activations as for the others. Per 32-element
 *     block, with the block's integer form (lv, sc, mn, d, dm) from
 *     ds_gblock_decode and the activation half sums s0, s1 (of q):
 *       isum = sc0 ia + sc1 ib,  ia, ib = sum lv q over each 16-half (exact)
 *       acc = acc + (float)isum * (d * dx)
 *       and when dm != 0 (a C compare: NaN counts as nonzero)
 *       acc = acc + (float)(mn0 s0 + mn1 s1) * (dm * dx)
 *     in block order, every product and sum rounded separately. The integers
 *     fit 32 bits (|lv|, |sc|, |mn| <= 128), and mn0 s0 + mn1 s1 stays below
 *     2^24, so the SIMD paths may form it in F32. acc starts at +0 and a sum
 *     of round-to-nearest adds is never -0, so a block whose term is +-0
 *     leaves acc unchanged: the paths may skip terms they know are zero.
 *     A row read back (ds_unpack_row, embeddings) is (d * sc) * lv, then
 *     + dm * mn when dm != 0: the format's own formula for every such type
 *     up to the sign of a zero. nvfp4 (per-16 float scales, no integer form)
 *     is widened to BF16 at load by the CPU backend: E2M1 times a UE4M3 scale
 *     has at most 7 significant bits, so the BF16 copy is exact.
 *   A row's result never depends on how many tokens or threads share the
 *   call: that is what makes batching invisible in the logits.
 *
 * PACKED LAYOUT (AVX2 and AVX512 paths; the reference reads GGUF blocks)
 *   Quantised matrices are repacked at load into groups of 16 rows. Within a
 *   group, each super-block (32 elements for q8_0/q4_0, 256 for k-quants)
 *   holds the 16 rows' scales as arrays over rows, then integer levels made
 *   unsigned (q8_0: q+128; q6_K: q+32) and interleaved so that one 64-byte
 *   vector holds, for each of the 16 rows, 4 consecutive elements ("a k-step"):
 *   a VNNI dot of that vector with 4 broadcast activation bytes adds one
 *   k-step to 16 row sums at once, with no horizontal reduction. 4-bit levels
 *   pack k-step p (low nibble) with k-step p+4 (high nibble) of a 32-element
 *   chunk. Bytes per 16-row super-block:
 *     q8_0  [d:16 f16][q: 8 k-steps x 64]                                    544
 *     q4_0  [d:16 f16][q: 4 x 64 nibble pairs]                               288
 *     q4_K  [d:16][dmin:16][12 GGUF scale bytes x 16 rows][q: 8 chunks x 4 x 64]  2304
 *     q5_K  q4_K + [qh: 8 chunks x 64; bit s of byte (row,c) = bit 4 of k-step s] 2816
 *     q6_K  [d:16][sc:16x16 i8][ql: 8 chunks x 4 x 64][qh: 8 chunks x 2 x 64,
 *            bits 2s..2s+1 = bits 4,5 of k-step s (s = 0..3 of each half)]  3360
 *   The gblock types share one layout per 32-element super-block, each row's
 *   levels stored as indices into the type's level table (ds_gblock_levels),
 *   looked up into int8 with VPSHUFB (16 entries; 32 with a fifth bit). What
 *   the packer stores depends on the matrix (its form, found by a scan of
 *   the decoded blocks, DS_GF_*): d and dm as F16 when every value survives
 *   the round trip exactly, else F32; scales only when some sc != 1, one
 *   per block unless some block's halves differ (SPLIT); mins only when
 *   some dm != 0, and the integer mins only when some differ from 1 (MNS):
 *     [idx: 4 x 64 nibble pairs][hb: 64, five-bit tables: bit s of byte (row,c)
 *      = bit 4 of the index of k-step s][d: 16 f16|f32][sc: 16 or 2 x 16 i8]
 *      [dm: 16 f16|f32][mn: 2 x 16 i8]                      288 .. 480
 *   The last group of a matrix whose rows are not a multiple of 16 is padded
 *   with zero rows. */
#ifndef DS_KERN_H
#define DS_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu.h"
#include "kernels/dtype.h"

#define DS_QG 16 /* rows per packed group */

/* A weight matrix as the kernels see it. */
typedef struct {
    ds_dtype type;
    int64_t rows, cols;
    const uint8_t *data;    /* GGUF row-major blocks (always set) */
    const uint8_t *packed;  /* 16-row groups (quantised types on SIMD paths), or NULL */
    size_t group_bytes;     /* bytes of one packed group */
    size_t sb_bytes;        /* bytes of one packed super-block of a group */
    int form;               /* gblock types: DS_GF_* of the packed layout */
    int x8;                 /* q8_0: activations at 8 bits alone, no residual term (NUMERICS) */
} ds_wmat;

/* The form of a packed gblock matrix (PACKED LAYOUT above). */
enum {
    DS_GF_D32 = 1,  /* d and dm stored as F32 (else F16) */
    DS_GF_SC = 2,   /* scales stored (else every sc is 1) */
    DS_GF_MIN = 4,  /* dm stored (else every dm is 0) */
    DS_GF_FIVE = 8, /* more than 16 levels: a fifth index bit */
    DS_GF_BAD = 16, /* a decoded level outside the type's table: not packable */
    DS_GF_SPLIT = 32, /* some block's halves have different scales: two per block stored */
    DS_GF_MNS = 64,   /* some block with a min has mn != 1: per-half mins stored (else dm alone) */
};

/* Byte offsets inside one packed gblock super-block of a form. */
typedef struct {
    size_t hb, d, sc, dm, mn, bytes;
} ds_gform;

static inline ds_gform ds_gform_of(int form) {
    ds_gform g;
    size_t fl = form & DS_GF_D32 ? 64 : 32, o = 256;
    g.hb = o, o += form & DS_GF_FIVE ? 64 : 0;
    g.d = o, o += fl;
    g.sc = o, o += form & DS_GF_SC ? (form & DS_GF_SPLIT ? 32 : 16) : 0;
    g.dm = o, o += form & DS_GF_MIN ? fl : 0;
    g.mn = o, o += (form & DS_GF_MIN) && (form & DS_GF_MNS) ? 32 : 0;
    g.bytes = o;
    return g;
}

/* Activations quantised per 32 elements (rows of K, K a multiple of 32). */
typedef struct {
    int64_t K;
    int8_t *q;      /* [n][K] */
    float *d;       /* [n][K/32] scales */
    float *ms;      /* [n][K/32] d * sum(q): k-quant mins */
    int32_t *c128;  /* [n][K/32] 128 * sum(q): q8_0 offset */
    int32_t *c8;    /* [n][K/32]   8 * sum(q): q4_0 offset */
    int32_t *c32;   /* [n][K/16]  32 * sum(q) over 16: q6_K offset */
    int8_t *r;      /* [n][K] residual levels (q8_0 weights) */
    float *e;       /* [n][K/32] dx / 128, the scale of 128 q + r */
    int32_t *r128;  /* [n][K/32] 128 * sum(r) */
} ds_xq;

/* One matrix product y[t][r] = W[r] . x[t] for t < n. Which activation form
 * is read depends on the weight type: x (F32, F16), xb (BF16), xq (quantised). */
typedef struct {
    float *y;
    int64_t ldy;
    const ds_wmat *w;
    int64_t n;
    const float *x;
    int64_t ldx;
    const uint16_t *xb;  /* [n][cols] */
    const ds_xq *xq;
} ds_mm;

typedef void (*ds_mm_fn)(const ds_mm *m, int64_t r0, int64_t r1);

/* Table entries of every type that can take the gblock form (a type whose
 * decoder is not built in answers ds_gblock_type 0 and is never loaded). */
#define DS_GBLOCK_MM(fn)                                                                              \
    [DS_Q4_1] = fn, [DS_Q5_0] = fn, [DS_Q5_1] = fn, [DS_Q2_K] = fn, [DS_Q3_K] = fn, [DS_IQ2_XXS] = fn, \
    [DS_IQ2_XS] = fn, [DS_IQ2_S] = fn, [DS_IQ3_XXS] = fn, [DS_IQ3_S] = fn, [DS_IQ1_S] = fn,           \
    [DS_IQ1_M] = fn, [DS_IQ4_NL] = fn, [DS_IQ4_XS] = fn, [DS_MXFP4] = fn, [DS_TQ1_0] = fn, [DS_TQ2_0] = fn

/* The kernels of one ISA level. NULL entries fall back to the reference. */
typedef struct {
    ds_isa isa;
    int packs;                                           /* reads the packed layout */
    void (*quant_x)(const ds_xq *xq, int64_t t, const float *x); /* row t of xq from x[K] */
    void (*to_bf16)(uint16_t *dst, const float *x, int64_t n);
    ds_mm_fn mm[DS_DTYPE_COUNT];                         /* rows [r0, r1), r0 a multiple of 16 */
    /* vector primitives of attention and the DeltaNet (any summation order) */
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n);   /* y += a x */
    void (*scale)(float *y, float a, int64_t n);                  /* y *= a */
    void (*silu_mul)(float *a, const float *b, int64_t n);        /* a = silu(a) * b (b NULL: 1) */
    float (*exp_sum)(float *x, float m, int64_t n);               /* x = exp(x - m); returns the sum */
    float (*max)(const float *x, int64_t n);                      /* the largest of x (n > 0; no NaN) */
    void (*bias_act)(float *y, const float *b, int64_t n, int act); /* y = act(y + b) (b NULL: 0; DS_ACT_*) */
    void (*mul_add)(float *acc, const float *a, const float *b, int64_t n, int init); /* acc = (init ? 0 : acc) + a b */
    /* C[M][N] += alpha A[M][K] B[K][N], row-major; each element a chain of
     * products over K in order (its value never depends on M or N); the
     * SIMD versions need N a multiple of vw */
    void (*gemm_acc)(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int M, int K, int N, float alpha);
    /* Gated DeltaNet on one head (cpu_deltanet.c describes them); the SIMD
     * versions need Dk and Dv multiples of vw, else the reference runs */
    int vw;
    void (*gdn_step)(float *S, const float *q, const float *k, const float *v, float beta, float g, int Dk, int Dv,
                     float *o);                                  /* o NULL: the state update alone, same bits */
    void (*gdn_chunk)(float *S, const float *q, const float *k, const float *v, size_t stride, const float *beta,
                      const float *g, size_t gstride, int n, int Dk, int Dv, float *scratch, float *o, size_t ostride);
    size_t (*gdn_chunk_floats)(int Dk, int Dv);                   /* scratch of gdn_chunk */
} ds_kern;

extern const ds_kern ds_kern_ref;
#if defined(__x86_64__)
extern const ds_kern ds_kern_avx2;
extern const ds_kern ds_kern_avx512;
/* AVX512_BF16 matmul for BF16 weights (NULL when not built) */
void ds_mm_bf16_avx512bf16(const ds_mm *m, int64_t r0, int64_t r1);
#endif

/* Whether products of weights of type t read the quantised activations (xq). */
static inline int ds_mm_reads_xq(ds_dtype t) { return t != DS_F32 && t != DS_F16 && t != DS_BF16; }

/* The table of a level (the reference for levels not built). */
const ds_kern *ds_kern_for(ds_isa level);

/* Packed layout: super-block elements and bytes per 16-row super-block of a
 * type (0 when the type is not packed); form is 0 but for gblock types. */
int ds_pack_sb_elems(ds_dtype t);
size_t ds_pack_sb_bytes(ds_dtype t, int form);
/* Bytes of the packed form of a rows x cols matrix. */
size_t ds_pack_bytes(ds_dtype t, int form, int64_t rows, int64_t cols);
/* The form groups [g0, g1) of w (data set) need, DS_GF_* ORed (0 for types
 * that have none); the whole matrix's form is the OR over all groups. */
int ds_pack_form(const ds_wmat *w, int64_t g0, int64_t g1);
/* Packs groups [g0, g1) of w (data and form set) into dst (ds_pack_bytes long). */
void ds_pack_groups(const ds_wmat *w, uint8_t *dst, int64_t g0, int64_t g1);
/* Sets form (a scan of every group, on this thread), sb_bytes and
 * group_bytes of w (data set); returns the bytes the packed form takes. */
size_t ds_pack_plan(ds_wmat *w);
/* Row (of n elements) of a gblock type as the packed kernels read it:
 * (d * sc) * lv, + dm * mn when dm != 0 (ds_unpack_row's floats). */
void ds_gblock_row(ds_dtype t, const void *row, float *dst, int64_t n);
/* A row (n a multiple of 64) of nvfp4 as BF16: exact (NUMERICS). */
void ds_nvfp4_row_bf16(const void *row, uint16_t *dst, int64_t n);
/* The SIMD products of the gblock types (x86/kern_gblock_*.c). */
#if defined(__x86_64__)
void ds_mm_gblock_avx512(const ds_mm *m, int64_t r0, int64_t r1);
void ds_mm_gblock_avx2(const ds_mm *m, int64_t r0, int64_t r1);
#endif

/* Row r of a packed matrix dequantised to F32: the same floats as
 * ds_dequantize_row on the GGUF row. */
void ds_unpack_row(const ds_wmat *w, int64_t r, float *dst);

/* Reference building blocks (kern_ref.c), shared by the SIMD files for tails. */
void ds_quant_x_ref(const ds_xq *xq, int64_t t, const float *x);
void ds_to_bf16_ref(uint16_t *dst, const float *x, int64_t n);
/* Bytes of activation scratch for n rows of K (all arrays of ds_xq). */
size_t ds_xq_bytes(int64_t n, int64_t K);
/* Points the arrays of xq into buf (ds_xq_bytes long, 64-byte aligned). */
void ds_xq_init(ds_xq *xq, void *buf, int64_t n, int64_t K);

#endif
