/* model_make_policy.c - llama-quantize's file types and per-tensor type
 * choices, and --tensor-type overrides (see model_make_policy.h).
 *
 * The choices follow llama.cpp's src/llama-quant.cpp (llama_tensor_get_type
 * and its helpers) as facts: which tensors are quantised at all, the rules
 * per tensor kind and file type, and the fallbacks. Some rules count: the
 * value projections (attn_v, and attn_qkv which counts as one) and the down
 * projections are numbered in llama.cpp's tensor order (by layer, then by
 * name), and "first two", "first eighth" or "use_more_bits" refer to those
 * numbers, so the plan is made for the whole model at once. No importance
 * matrix is involved: the choices are those llama-quantize makes without one. */
#include "model/model_make_policy.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's LLAMA_FTYPE_* numbers: general.file_type, and the names the rules below test */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ2_XXS = 19, FT_IQ2_XS = 20, FT_Q2_K_S = 21,
    FT_IQ3_XS = 22, FT_IQ3_XXS = 23, FT_IQ1_S = 24, FT_IQ4_NL = 25, FT_IQ3_S = 26, FT_IQ3_M = 27,
    FT_IQ2_S = 28, FT_IQ2_M = 29, FT_IQ4_XS = 30, FT_IQ1_M = 31, FT_BF16 = 32, FT_TQ1_0 = 36,
    FT_TQ2_0 = 37, FT_MXFP4_MOE = 38,
};

static const ds_file_type file_types[] = {
    {"F32", FT_F32, DS_F32},         {"F16", FT_F16, DS_F16},           {"BF16", FT_BF16, DS_BF16},
    {"Q8_0", FT_Q8_0, DS_Q8_0},      {"Q6_K", FT_Q6_K, DS_Q6_K},        {"Q5_K_M", FT_Q5_K_M, DS_Q5_K},
    {"Q5_K_S", FT_Q5_K_S, DS_Q5_K},  {"Q4_K_M", FT_Q4_K_M, DS_Q4_K},    {"Q4_K_S", FT_Q4_K_S, DS_Q4_K},
    {"Q3_K_L", FT_Q3_K_L, DS_Q3_K},  {"Q3_K_M", FT_Q3_K_M, DS_Q3_K},    {"Q3_K_S", FT_Q3_K_S, DS_Q3_K},
    {"Q2_K", FT_Q2_K, DS_Q2_K},      {"Q2_K_S", FT_Q2_K_S, DS_Q2_K},    {"Q5_1", FT_Q5_1, DS_Q5_1},
    {"Q5_0", FT_Q5_0, DS_Q5_0},      {"Q4_1", FT_Q4_1, DS_Q4_1},        {"Q4_0", FT_Q4_0, DS_Q4_0},
    {"IQ4_NL", FT_IQ4_NL, DS_IQ4_NL}, {"IQ4_XS", FT_IQ4_XS, DS_IQ4_XS}, {"IQ3_M", FT_IQ3_M, DS_IQ3_S},
    {"IQ3_S", FT_IQ3_S, DS_IQ3_S},   {"IQ3_XS", FT_IQ3_XS, DS_IQ3_S},   {"IQ3_XXS", FT_IQ3_XXS, DS_IQ3_XXS},
    {"IQ2_M", FT_IQ2_M, DS_IQ2_S},   {"IQ2_S", FT_IQ2_S, DS_IQ2_XS},    {"IQ2_XS", FT_IQ2_XS, DS_IQ2_XS},
    {"IQ2_XXS", FT_IQ2_XXS, DS_IQ2_XXS}, {"IQ1_M", FT_IQ1_M, DS_IQ1_M}, {"IQ1_S", FT_IQ1_S, DS_IQ1_S},
    {"TQ2_0", FT_TQ2_0, DS_TQ2_0},   {"TQ1_0", FT_TQ1_0, DS_TQ1_0},     {"MXFP4_MOE", FT_MXFP4_MOE, DS_MXFP4},
};
#define N_FILE_TYPES ((int)(sizeof file_types / sizeof file_types[0]))

/* llama-quantize's shorter spellings */
static const struct { const char *alias, *name; } aliases[] = {
    {"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"},
};

static int same_ignoring_case(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (toupper((unsigned char)*a) != toupper((unsigned char)*b)) return 0;
    return *a == *b;
}

const ds_file_type *ds_file_type_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (same_ignoring_case(name, aliases[i].alias)) name = aliases[i].name;
    for (int i = 0; i < N_FILE_TYPES; i++)
        if (same_ignoring_case(name, file_types[i].name)) return &file_types[i];
    return NULL;
}

int ds_file_type_count(void) { return N_FILE_TYPES; }

const ds_file_type *ds_file_type_at(int i) { return i >= 0 && i < N_FILE_TYPES ? &file_types[i] : NULL; }

int ds_file_type_is_float(const ds_file_type *ft) {
    return ft->base == DS_F32 || ft->base == DS_F16 || ft->base == DS_BF16;
}

/* --- overrides --- */

struct ds_type_overrides {
    int n;
    struct {
        pcre2_code *re;
        ds_dtype type;
    } v[];
};

void ds_type_overrides_free(ds_type_overrides *ov) {
    if (!ov) return;
    for (int i = 0; i < ov->n; i++) pcre2_code_free(ov->v[i].re);
    free(ov);
}

ds_status ds_type_overrides_new(const char *const *args, int n, ds_type_overrides **out, ds_err *e) {
    *out = NULL;
    if (n <= 0) return DS_OK;
    ds_type_overrides *ov = calloc(1, sizeof *ov + (size_t)n * sizeof ov->v[0]);
    if (!ov) return ds_fail(e, DS_ENOMEM, "out of memory for --tensor-type");
    for (int i = 0; i < n; i++) {
        const char *arg = args[i], *eq = strrchr(arg, '='); /* the type has no '='; a regex may */
        ds_status s = DS_OK;
        if (!eq) s = ds_fail(e, DS_EINVAL, "--tensor-type '%s': expected REGEX=TYPE", arg);
        else if (eq == arg) s = ds_fail(e, DS_EINVAL, "--tensor-type '%s': the regex before '=' is empty", arg);
        else if (!eq[1]) s = ds_fail(e, DS_EINVAL, "--tensor-type '%s': no type after '='", arg);
        else if (ds_dtype_from_name(eq + 1, &ov->v[i].type) != 0) {
            char known[512] = "";
            for (int t = 0; t < DS_DTYPE_COUNT; t++) {
                strncat(known, t ? ", " : "", sizeof known - strlen(known) - 1);
                strncat(known, ds_dtype_get((ds_dtype)t)->name, sizeof known - strlen(known) - 1);
            }
            s = ds_fail(e, DS_EINVAL, "--tensor-type '%s': unknown type '%s' (known: %s)", arg, eq + 1, known);
        } else {
            int code;
            PCRE2_SIZE at;
            /* tensor names are lower case; llama-quantize lowers the pattern, caseless matching is the same */
            ov->v[i].re = pcre2_compile((PCRE2_SPTR)arg, (PCRE2_SIZE)(eq - arg), PCRE2_CASELESS, &code, &at, NULL);
            if (!ov->v[i].re) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(code, msg, sizeof msg);
                s = ds_fail(e, DS_EINVAL, "--tensor-type '%s': bad regex at offset %zu: %s", arg, (size_t)at, (char *)msg);
            }
        }
        if (s) {
            ov->n = i;
            ds_type_overrides_free(ov);
            return s;
        }
        ov->n = i + 1;
    }
    *out = ov;
    return DS_OK;
}

/* the type of the first override whose regex is found in name; -1 if none (or out of memory) */
static int override_type(const ds_type_overrides *ov, const char *name) {
    if (!ov) return -1;
    for (int i = 0; i < ov->n; i++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(ov->v[i].re, NULL);
        if (!md) return -1;
        int rc = pcre2_match(ov->v[i].re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
        pcre2_match_data_free(md);
        if (rc >= 0) return (int)ov->v[i].type;
    }
    return -1;
}

/* --- the choices --- */

typedef enum { CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q, CAT_ATTN_OUTPUT,
               CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN } category;

/* llama.cpp's tensor categories, by name; attn_qkv (and attn_kv_b) count as value projections */
static category category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") || strstr(name, "attn_v.weight"))
        return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(name, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up")) return CAT_FFN_UP;
    if (strstr(name, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* llama.cpp quantises matrices and expert stacks (a dimension of 1 does not
 * count) whose names end in "weight", except norms, the MoE router and the
 * conv weight; deltaserve's own kinds say the same of its tensors */
static int quantisable(const ds_tensor_spec *s) {
    int dims = 1;
    for (int d = 1; d < 4; d++)
        if (s->ne[d] > 1) dims = d + 1;
    return (s->kind == DS_TK_MATRIX || s->kind == DS_TK_EMBED) && dims >= 2 && ends_with(s->name, "weight") &&
           !strstr(s->name, "_norm.weight") && !strstr(s->name, "ffn_gate_inp.weight") && !strstr(s->name, "ssm_conv1d");
}

typedef struct {
    int ft;
    ds_dtype base;
    int n_gqa, n_expert, tied;
    int n_layer_all;            /* decoder layers, the MTP block included */
    int n_attn_v, i_attn_v;     /* value projections: how many, and how many seen */
    int i_ffn_down, i_ffn_gate, i_ffn_up;
} plan_state;

static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int is_one_of(int ft, const int *set, int n) {
    for (int i = 0; i < n; i++)
        if (set[i] == ft) return 1;
    return 0;
}
#define ONE_OF(ft, ...) is_one_of(ft, (const int[]){__VA_ARGS__}, (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)))

/* The layer a feed-forward rule looks at: the count so far in dense models,
 * the layer in the name with experts (whose tensors are not one per layer). */
static int ffn_layer(const plan_state *q, const ds_tensor_spec *s, int counter) {
    return q->n_expert > 1 ? s->layer : counter;
}

static ds_dtype choose(plan_state *q, const ds_tensor_spec *s, category cat) {
    const int ft = q->ft, gqa4 = q->n_gqa >= 4, e8 = q->n_expert == 8;
    ds_dtype t = q->base;
    const int iq2_family = ONE_OF(ft, FT_IQ2_XXS, FT_IQ2_XS, FT_IQ1_S, FT_IQ2_S, FT_IQ2_M, FT_IQ1_M);
    const int iq2_s_m = ft == FT_IQ2_S || ft == FT_IQ2_M;
    if (cat == CAT_OUTPUT || (q->tied && cat == CAT_TOKEN_EMBD)) {
        if (ft == FT_MXFP4_MOE || s->ne[0] % ds_dtype_get(t)->block_elems != 0) t = DS_Q8_0;
        else if (ONE_OF(ft, FT_IQ2_XXS, FT_IQ2_XS, FT_IQ3_XXS, FT_IQ1_S, FT_IQ2_S, FT_IQ2_M, FT_IQ1_M)) t = DS_Q5_K;
        else if (t != DS_Q8_0) t = DS_Q6_K;
    } else if (ft == FT_MXFP4_MOE) {
        t = s->ne[2] > 1 ? DS_MXFP4 : DS_Q8_0; /* expert stacks, and the rest */
    } else if (cat == CAT_TOKEN_EMBD) {
        if (ONE_OF(ft, FT_IQ2_XXS, FT_IQ2_XS, FT_IQ1_S, FT_IQ1_M)) t = DS_Q2_K;
        else if (ONE_OF(ft, FT_IQ2_S, FT_IQ2_M, FT_IQ3_XXS)) t = DS_IQ3_S;
        else if (ONE_OF(ft, FT_TQ1_0, FT_TQ2_0)) t = DS_Q4_K;
    } else if (iq2_family) {
        if (cat == CAT_ATTN_V) {
            t = gqa4 || q->n_expert >= 4 ? DS_Q4_K : iq2_s_m ? DS_IQ3_S : DS_Q2_K;
            q->i_attn_v++;
        } else if (e8 && cat == CAT_ATTN_K) {
            t = DS_Q4_K;
        } else if (cat == CAT_FFN_DOWN) {
            if (q->i_ffn_down < q->n_layer_all / 8) t = iq2_s_m ? DS_IQ3_S : DS_Q2_K;
            q->i_ffn_down++;
        } else if (cat == CAT_ATTN_OUTPUT) {
            if (e8) t = DS_Q5_K;
            else if (ft == FT_IQ1_S || ft == FT_IQ1_M) t = DS_IQ2_XXS;
            else if (iq2_s_m) t = DS_IQ3_S;
        }
    } else if (cat == CAT_ATTN_V) {
        const int i = q->i_attn_v;
        if (ft == FT_Q2_K) t = gqa4 ? DS_Q4_K : DS_Q3_K;
        else if (ft == FT_Q2_K_S && gqa4) t = DS_Q4_K;
        else if (ft == FT_IQ3_XXS) t = gqa4 ? DS_Q4_K : DS_IQ3_S;
        else if ((ft == FT_IQ3_XS || ft == FT_IQ3_S) && gqa4) t = DS_Q4_K;
        else if (ft == FT_IQ3_M) t = DS_Q4_K;
        else if (ft == FT_Q3_K_M) t = i < 2 ? DS_Q5_K : DS_Q4_K;
        else if (ft == FT_Q3_K_L) t = DS_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && gqa4) t = DS_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, q->n_attn_v)) t = DS_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4) t = DS_Q5_K;
        if (e8) t = DS_Q8_0;
        q->i_attn_v++;
    } else if (cat == CAT_ATTN_K) {
        if (e8) t = DS_Q8_0;
        else if (ft == FT_IQ3_XS) t = DS_IQ3_XXS;
        else if (ft == FT_IQ3_XXS) t = DS_IQ2_S;
    } else if (cat == CAT_ATTN_Q) {
        if (ft == FT_IQ3_XS) t = DS_IQ3_XXS;
        else if (ft == FT_IQ3_XXS) t = DS_IQ2_S;
    } else if (cat == CAT_FFN_DOWN) {
        const int i = ffn_layer(q, s, q->i_ffn_down), n = q->n_layer_all;
        if (ft == FT_Q2_K) t = DS_Q3_K;
        else if (ft == FT_Q2_K_S) { if (i < n / 8) t = DS_Q4_K; }
        else if (ft == FT_IQ3_XXS) t = i < n / 8 ? DS_Q4_K : DS_Q3_K;
        else if (ft == FT_Q3_K_M) t = i < n / 16 ? DS_Q5_K : DS_Q4_K;
        else if (ft == FT_IQ3_M && (i < n / 8 || (e8 && use_more_bits(i, n)))) t = DS_Q4_K;
        else if (ft == FT_Q3_K_L) t = DS_Q5_K;
        else if (ft == FT_Q4_K_M) { if (use_more_bits(i, n)) t = DS_Q6_K; }
        else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS)) t = DS_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(i, n)) t = DS_Q6_K;
        else if (ft == FT_Q4_K_S && i < n / 8) t = DS_Q5_K;
        q->i_ffn_down++;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (e8) {
            if (ONE_OF(ft, FT_Q2_K, FT_IQ3_XS, FT_IQ3_XXS, FT_Q3_K_S, FT_Q3_K_M, FT_IQ4_NL, FT_Q4_K_S, FT_Q4_K_M,
                       FT_IQ3_S, FT_IQ3_M, FT_IQ4_XS))
                t = DS_Q5_K;
        } else if (ft == FT_Q2_K) t = DS_Q3_K;
        else if (ft == FT_IQ3_XXS) t = DS_IQ3_S;
        else if (ft == FT_Q3_K_M || ft == FT_IQ3_M) t = DS_Q4_K;
        else if (ft == FT_Q3_K_L) t = DS_Q5_K;
    } else if (cat == CAT_FFN_GATE || cat == CAT_FFN_UP) {
        int *counter = cat == CAT_FFN_GATE ? &q->i_ffn_gate : &q->i_ffn_up;
        const int i = ffn_layer(q, s, *counter), n = q->n_layer_all;
        if (ft == FT_IQ3_XS && i >= n / 8 && i < 7 * n / 8) t = DS_IQ3_XXS;
        (*counter)++;
    }
    return t;
}

/* llama.cpp's type for a row its block does not divide; -1 where it defines none */
static int fallback(ds_dtype t, int64_t ne0) {
    if (ne0 % ds_dtype_get(t)->block_elems == 0) return (int)t;
    ds_dtype r;
    switch (t) {
    case DS_IQ1_S: case DS_IQ1_M: case DS_IQ2_XXS: case DS_IQ2_XS: case DS_IQ2_S: case DS_IQ3_XXS: case DS_IQ3_S:
    case DS_IQ4_XS: r = DS_IQ4_NL; break;
    case DS_Q2_K: case DS_Q3_K: case DS_TQ1_0: case DS_TQ2_0: r = DS_Q4_0; break;
    case DS_Q4_K: r = DS_Q5_0; break;
    case DS_Q5_K: r = DS_Q5_1; break;
    case DS_Q6_K: r = DS_Q8_0; break;
    default: return -1;
    }
    return ne0 % ds_dtype_get(r)->block_elems == 0 ? (int)r : (int)DS_F16;
}

/* llama.cpp's tensor order: by the layer in the name (none first), then by name */
typedef struct {
    int layer, index;
    const char *name;
} ordered;

static int by_layer_then_name(const void *a, const void *b) {
    const ordered *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

ds_status ds_quant_plan(const ds_model_config *c, const ds_tensor_spec *specs, int n, const ds_file_type *ft,
                        const ds_type_overrides *ov, ds_dtype *types, ds_err *e) {
    ordered *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order) return ds_fail(e, DS_ENOMEM, "out of memory planning tensor types");
    plan_state q = {.ft = (int)ft->ftype, .base = ft->base, .n_expert = c->n_expert, .tied = c->tied_embeddings,
                    .n_gqa = c->n_head_kv > 0 ? c->n_head / c->n_head_kv : 0, .n_layer_all = c->n_layer + c->n_mtp};
    for (int i = 0; i < n; i++) {
        int l = -1;
        order[i] = (ordered){.layer = sscanf(specs[i].name, "blk.%d.", &l) == 1 ? l : -1, .index = i, .name = specs[i].name};
        q.n_attn_v += quantisable(&specs[i]) && category_of(specs[i].name) == CAT_ATTN_V;
    }
    qsort(order, (size_t)n, sizeof *order, by_layer_then_name);
    ds_status st = DS_OK;
    for (int k = 0; k < n && !st; k++) {
        const ds_tensor_spec *s = &specs[order[k].index];
        ds_dtype *t = &types[order[k].index];
        if (!quantisable(s)) {
            *t = DS_F32;
            continue;
        }
        int forced = override_type(ov, s->name);
        if (forced >= 0) *t = (ds_dtype)forced;
        else if (ds_file_type_is_float(ft)) *t = ft->base;
        else *t = choose(&q, s, category_of(s->name));
        int fit = fallback(*t, s->ne[0]);
        if (fit < 0)
            st = ds_fail(e, DS_EINVAL, "tensor '%s': rows of %lld elements do not fit %s blocks of %d, and it has no fallback type",
                         s->name, (long long)s->ne[0], ds_dtype_get(*t)->name, ds_dtype_get(*t)->block_elems);
        else *t = (ds_dtype)fit;
    }
    free(order);
    return st;
}
