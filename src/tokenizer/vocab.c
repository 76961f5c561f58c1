/* vocab.c - byte-level BPE vocabularies: generation for test models, and
 * reading/writing tokenizer.json and GGUF tokenizer.ggml.* metadata. */
#include "tokenizer/vocab.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mapped_file.h"
#include "loading/gguf.h"
#include "loading/gguf_writer.h"
#include "loading/json_file.h"

const char DS_PRETOK_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char DS_PRETOK_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Qwen3.5's added tokens in id order (docs/model.md §6); `special` as its tokenizer marks them. */
static const struct { const char *text; int special; } QWEN35_ADDED[] = {
    {"<|endoftext|>", 1}, {"<|im_start|>", 1}, {"<|im_end|>", 1}, {"<|object_ref_start|>", 1},
    {"<|object_ref_end|>", 1}, {"<|box_start|>", 1}, {"<|box_end|>", 1}, {"<|quad_start|>", 1},
    {"<|quad_end|>", 1}, {"<|vision_start|>", 1}, {"<|vision_end|>", 1}, {"<|vision_pad|>", 1},
    {"<|image_pad|>", 1}, {"<|video_pad|>", 1}, {"<tool_call>", 0}, {"</tool_call>", 0},
    {"<|fim_prefix|>", 0}, {"<|fim_middle|>", 0}, {"<|fim_suffix|>", 0}, {"<|fim_pad|>", 0},
    {"<|repo_name|>", 0}, {"<|file_sep|>", 0}, {"<tool_response>", 0}, {"</tool_response>", 0},
    {"<think>", 0}, {"</think>", 0}, {"<|audio_start|>", 1}, {"<|audio_end|>", 1},
    {"<tts_pad>", 1}, {"<tts_text_bos>", 1}, {"<tts_text_eod>", 1}, {"<tts_text_bos_single>", 1},
    {"<|audio_pad|>", 1},
};
#define N_QWEN35_ADDED ((int)(sizeof QWEN35_ADDED / sizeof QWEN35_ADDED[0]))

void ds_vocab_free(ds_vocab *v) {
    if (v->tokens)
        for (int i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->pre);
    memset(v, 0, sizeof *v);
}

const char *ds_vocab_pretok_regex(const ds_vocab *v) {
    return v->pre && strcmp(v->pre, "qwen35") == 0 ? DS_PRETOK_QWEN35 : DS_PRETOK_QWEN2;
}

int32_t ds_vocab_find(const ds_vocab *v, const char *token) {
    for (int i = 0; i < v->n_tokens; i++)
        if (v->tokens[i] && strcmp(v->tokens[i], token) == 0) return i;
    return -1;
}

static void set_specials(ds_vocab *v) {
    v->eos_id = ds_vocab_find(v, "<|im_end|>");
    v->eot_id = ds_vocab_find(v, "<|endoftext|>");
    v->pad_id = v->eot_id;
}

static ds_status alloc_tables(ds_vocab *v, int n_tokens, int n_merges, ds_err *e) {
    v->tokens = calloc((size_t)n_tokens, sizeof *v->tokens);
    v->types = calloc((size_t)n_tokens, sizeof *v->types);
    v->merges = calloc((size_t)(n_merges ? n_merges : 1), sizeof *v->merges);
    if (!v->tokens || !v->types || !v->merges) return ds_fail(e, DS_ENOMEM, "out of memory for a vocabulary of %d", n_tokens);
    v->n_tokens = n_tokens;
    return DS_OK;
}

/* --- generation --- */

/* GPT-2's byte-to-unicode table: printable bytes stand for themselves, the
 * others are moved to code points 256 and up so every token is visible text. */
static int byte_to_codepoint(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    return 256 + n;
}

static int utf8_put(char *out, int cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* the table never goes past U+07FF */
}

/* A small open-addressing set of strings, for uniqueness while generating. */
typedef struct { char **slots; size_t cap; } str_set;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int set_add(str_set *set, char *s) { /* 1 added, 0 present */
    size_t i = hash_str(s) & (set->cap - 1);
    while (set->slots[i]) {
        if (strcmp(set->slots[i], s) == 0) return 0;
        i = (i + 1) & (set->cap - 1);
    }
    set->slots[i] = s;
    return 1;
}

ds_status ds_vocab_generate(ds_vocab *v, int n_regular, ds_err *e) {
    memset(v, 0, sizeof *v);
    if (n_regular < 256) return ds_fail(e, DS_EINVAL, "a byte-level vocabulary needs at least 256 tokens, got %d", n_regular);
    int n_tokens = n_regular + N_QWEN35_ADDED;
    ds_status s = alloc_tables(v, n_tokens, n_regular - 256, e);
    if (s) return s;
    str_set set = {.cap = 1};
    while (set.cap < (size_t)n_tokens * 2) set.cap *= 2;
    set.slots = calloc(set.cap, sizeof *set.slots);
    if (!set.slots) return ds_fail(e, DS_ENOMEM, "out of memory");
    for (int b = 0; b < 256; b++) {
        char buf[4] = {0};
        utf8_put(buf, byte_to_codepoint(b));
        v->tokens[b] = strdup(buf);
        v->types[b] = DS_TOKEN_NORMAL;
        set_add(&set, v->tokens[b]);
    }
    /* Words grow one letter at a time, shortest first, from every letter and
     * from the space marker; frequent English letters come first. */
    static const char letters[] = "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ";
    int n = 256;
    for (int base = 0; n < n_regular && base < n; base++) {
        const char *t = v->tokens[base];
        int wordlike = 1;
        const char *p = t;
        if (strncmp(p, "\xc4\xa0", 2) == 0) p += 2; /* 'Ġ' is the space byte */
        for (; *p; p++) wordlike &= strchr(letters, *p) != NULL;
        if (!wordlike || strlen(t) > 24) continue;
        for (const char *l = letters; *l && n < n_regular; l++) {
            size_t len = strlen(t);
            char *cand = malloc(len + 2);
            if (!cand) { free(set.slots); return ds_fail(e, DS_ENOMEM, "out of memory"); }
            memcpy(cand, t, len);
            cand[len] = *l;
            cand[len + 1] = '\0';
            if (!set_add(&set, cand)) { free(cand); continue; }
            char *merge = malloc(len + 3);
            if (!merge) { free(set.slots); return ds_fail(e, DS_ENOMEM, "out of memory"); }
            snprintf(merge, len + 3, "%s %c", t, *l);
            v->tokens[n] = cand;
            v->types[n] = DS_TOKEN_NORMAL;
            v->merges[v->n_merges++] = merge;
            n++;
        }
    }
    free(set.slots);
    if (n < n_regular) return ds_fail(e, DS_EINVAL, "cannot generate %d distinct tokens", n_regular);
    for (int i = 0; i < N_QWEN35_ADDED; i++) {
        v->tokens[n_regular + i] = strdup(QWEN35_ADDED[i].text);
        v->types[n_regular + i] = QWEN35_ADDED[i].special ? DS_TOKEN_CONTROL : DS_TOKEN_USER_DEFINED;
    }
    for (int i = 0; i < n_tokens; i++)
        if (!v->tokens[i]) return ds_fail(e, DS_ENOMEM, "out of memory");
    v->pre = strdup("qwen35");
    set_specials(v);
    return v->pre ? DS_OK : ds_fail(e, DS_ENOMEM, "out of memory");
}

/* --- tokenizer.json --- */

/* An id field: a whole number in [0, 2^24]. */
static int token_id(const json_t *v, int *out) {
    uint64_t u;
    if (ds_json_uint(v, 1u << 24, &u) != 0) return -1;
    *out = (int)u;
    return 0;
}

ds_status ds_vocab_read_tokenizer_json(ds_vocab *v, const char *path, ds_err *e) {
    memset(v, 0, sizeof *v);
    /* Strings stay without JSON_ALLOW_NUL: tokens are NUL-terminated here and in
     * GGUF, and an object key (model.vocab's tokens) cannot hold a NUL at all,
     * so a "\u0000" is reported with its line and column instead of cut short. */
    json_t *root;
    ds_status s = ds_json_file_read(path, 512u << 20, 0, &root, e);
    if (s) return s;
    const json_t *model = json_object_get(root, "model");
    const char *type = json_string_value(json_object_get(model, "type"));
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    const json_t *added = json_object_get(root, "added_tokens");
    const char *key;
    const json_t *it;
    size_t i;
    if (!type || strcmp(type, "BPE") != 0) {
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: field 'model.type' is not \"BPE\"", path);
        goto out;
    }
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        s = ds_fail(e, DS_ECORRUPT, "%s: fields 'model.vocab' and 'model.merges' must be an object and a list", path);
        goto out;
    }
    if (added && !json_is_array(added)) {
        s = ds_fail(e, DS_ECORRUPT, "%s: field 'added_tokens' is not a list", path);
        goto out;
    }
    if (json_array_size(merges) > (1u << 24)) {
        s = ds_fail(e, DS_ECORRUPT, "%s: model.merges has %zu entries (at most 2^24)", path, json_array_size(merges));
        goto out;
    }
    int max_id = -1, id = 0;
    json_object_foreach((json_t *)vocab, key, it) {
        if (token_id(it, &id) != 0) {
            s = ds_fail(e, DS_ECORRUPT, "%s: model.vocab['%.40s'] is not a token id", path, key);
            goto out;
        }
        if (id > max_id) max_id = id;
    }
    json_array_foreach(added, i, it) {
        if (token_id(json_object_get(it, "id"), &id) != 0 || !json_is_string(json_object_get(it, "content"))) {
            s = ds_fail(e, DS_ECORRUPT, "%s: added_tokens[%zu] lacks a valid id or content", path, i);
            goto out;
        }
        if (id > max_id) max_id = id;
    }
    if ((s = alloc_tables(v, max_id + 1, (int)json_array_size(merges), e))) goto out;
    json_object_foreach((json_t *)vocab, key, it) {
        token_id(it, &id);
        if (v->tokens[id]) {
            s = ds_fail(e, DS_ECORRUPT, "%s: token id %d is given to two tokens in model.vocab", path, id);
            goto out;
        }
        v->tokens[id] = strdup(key);
        v->types[id] = DS_TOKEN_NORMAL;
    }
    json_array_foreach(added, i, it) {
        token_id(json_object_get(it, "id"), &id);
        const char *content = json_string_value(json_object_get(it, "content"));
        if (v->tokens[id] && strcmp(v->tokens[id], content) != 0) {
            s = ds_fail(e, DS_ECORRUPT, "%s: added token '%.40s' reuses id %d of '%.40s'", path, content, id, v->tokens[id]);
            goto out;
        }
        free(v->tokens[id]);
        v->tokens[id] = strdup(content);
        v->types[id] = json_is_true(json_object_get(it, "special")) ? DS_TOKEN_CONTROL : DS_TOKEN_USER_DEFINED;
    }
    for (int k = 0; k < v->n_tokens; k++) {
        if (v->types[k] == 0) { /* an id no entry names: keep the table dense like GGUF does */
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%d]", k);
            v->tokens[k] = strdup(buf);
            v->types[k] = DS_TOKEN_UNUSED;
        }
        if (!v->tokens[k]) { s = ds_fail(e, DS_ENOMEM, "out of memory"); goto out; }
    }
    json_array_foreach(merges, i, it) {
        char *m = NULL;
        const char *l = json_string_value(json_array_get(it, 0)), *r = json_string_value(json_array_get(it, 1));
        if (json_is_string(it)) {
            m = strdup(json_string_value(it));
        } else if (json_array_size(it) == 2 && l && r) {
            size_t n = strlen(l) + strlen(r) + 2;
            if ((m = malloc(n))) snprintf(m, n, "%s %s", l, r);
        } else {
            s = ds_fail(e, DS_ECORRUPT, "%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", path, v->n_merges);
            goto out;
        }
        if (!m) { s = ds_fail(e, DS_ENOMEM, "out of memory"); goto out; }
        v->merges[v->n_merges++] = m;
    }
    /* the split pattern tells Qwen3.5's pre-tokenizer from Qwen2/3's */
    const char *pre = "qwen2";
    const json_t *pt = json_object_get(root, "pre_tokenizer");
    const json_t *list = json_object_get(pt, "pretokenizers");
    size_t n_pre = list ? json_array_size(list) : 1;
    for (i = 0; i < n_pre; i++) {
        const json_t *one = list ? json_array_get(list, i) : pt;
        const char *pat = json_string_value(json_object_get(json_object_get(one, "pattern"), "Regex"));
        if (!pat) continue;
        if (strcmp(pat, DS_PRETOK_QWEN35) == 0) pre = "qwen35";
        else if (strcmp(pat, DS_PRETOK_QWEN2) != 0) {
            s = ds_fail(e, DS_EUNSUPPORTED, "%s: the pre-tokenizer's split pattern is neither Qwen2/3's nor Qwen3.5's", path);
            goto out;
        }
    }
    v->pre = strdup(pre);
    set_specials(v);
out:
    json_decref(root);
    if (s) ds_vocab_free(v);
    return s;
}

/* Builders that remember a failure in *bad: out of memory, or a token that is
 * not UTF-8 (jansson checks every string it is given). */
static json_t *set(json_t *obj, const char *key, json_t *val, int *bad) {
    if (json_object_set_new(obj, key, val) != 0) {
        *bad = 1;
        return NULL;
    }
    return val;
}

static void append(json_t *arr, json_t *val, int *bad) { *bad |= json_array_append_new(arr, val) != 0; }

static json_t *byte_level(void) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
}

/* the first token or merge that jansson would not take as a string, for the message */
static ds_status not_utf8(const ds_vocab *v, const char *path, ds_err *e) {
    for (int i = 0; i < v->n_tokens; i++) {
        json_t *t = json_string(v->tokens[i]);
        if (!t) return ds_fail(e, DS_ECORRUPT, "%s: token %d is not valid UTF-8, which JSON cannot hold", path, i);
        json_decref(t);
    }
    for (int i = 0; i < v->n_merges; i++) {
        json_t *t = json_string(v->merges[i]);
        if (!t) return ds_fail(e, DS_ECORRUPT, "%s: merge %d is not valid UTF-8, which JSON cannot hold", path, i);
        json_decref(t);
    }
    return ds_fail(e, DS_ENOMEM, "%s: out of memory serialising the tokenizer", path);
}

ds_status ds_vocab_write_tokenizer_json(const ds_vocab *v, const char *path, ds_err *e) {
    json_t *root = json_object();
    int bad = 0;
    set(root, "version", json_string("1.0"), &bad);
    set(root, "truncation", json_null(), &bad);
    set(root, "padding", json_null(), &bad);
    json_t *added = set(root, "added_tokens", json_array(), &bad);
    for (int i = 0; i < v->n_tokens; i++) {
        if (v->types[i] != DS_TOKEN_CONTROL && v->types[i] != DS_TOKEN_USER_DEFINED) continue;
        append(added,
               json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", i, "content", v->tokens[i], "single_word", 0,
                         "lstrip", 0, "rstrip", 0, "normalized", 0, "special", v->types[i] == DS_TOKEN_CONTROL),
               &bad);
    }
    set(root, "normalizer", json_pack("{s:s}", "type", "NFC"), &bad);
    json_t *pre = set(root, "pre_tokenizer", json_object(), &bad);
    set(pre, "type", json_string("Sequence"), &bad);
    json_t *list = set(pre, "pretokenizers", json_array(), &bad);
    append(list,
           json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", ds_vocab_pretok_regex(v),
                     "behavior", "Isolated", "invert", 0),
           &bad);
    append(list, byte_level(), &bad);
    set(root, "post_processor", byte_level(), &bad);
    set(root, "decoder", byte_level(), &bad);
    json_t *model = set(root, "model", json_object(), &bad);
    set(model, "type", json_string("BPE"), &bad);
    set(model, "dropout", json_null(), &bad);
    set(model, "unk_token", json_null(), &bad);
    set(model, "continuing_subword_prefix", json_string(""), &bad);
    set(model, "end_of_word_suffix", json_string(""), &bad);
    set(model, "fuse_unk", json_false(), &bad);
    set(model, "byte_fallback", json_false(), &bad);
    set(model, "ignore_merges", json_false(), &bad);
    json_t *vocab = set(model, "vocab", json_object(), &bad);
    for (int i = 0; i < v->n_tokens; i++)
        if (v->types[i] == DS_TOKEN_NORMAL) set(vocab, v->tokens[i], json_integer(i), &bad);
    json_t *merges = set(model, "merges", json_array(), &bad);
    for (int i = 0; i < v->n_merges; i++) append(merges, json_string(v->merges[i]), &bad);
    /* the order of the keys is the order Hugging Face writes them in */
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return not_utf8(v, path, e);
    FILE *f = fopen(path, "wb");
    ds_status s = DS_OK;
    if (!f || fputs(text, f) < 0) s = ds_fail(e, DS_EIO, "%s: cannot write", path);
    if (f && fclose(f) != 0 && !s) s = ds_fail(e, DS_EIO, "%s: cannot write", path);
    free(text);
    return s;
}

/* --- GGUF --- */

void ds_vocab_write_gguf(const ds_vocab *v, ds_gguf_writer *w) {
    ds_gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
    ds_gguf_writer_str(w, "tokenizer.ggml.pre", v->pre ? v->pre : "qwen2");
    ds_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (size_t)v->n_tokens);
    ds_gguf_writer_arr_i32(w, "tokenizer.ggml.token_type", v->types, (size_t)v->n_tokens);
    ds_gguf_writer_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (size_t)v->n_merges);
    if (v->eos_id >= 0) ds_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id);
    if (v->pad_id >= 0) ds_gguf_writer_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad_id);
    if (v->eot_id >= 0) ds_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->eot_id);
    ds_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", 0);
}

static ds_status copy_strings(const ds_gguf *g, const char *key, char ***out, int *n, ds_err *e) {
    const ds_gguf_kv *kv = ds_gguf_find(g, key);
    if (!kv) return ds_fail(e, DS_ENOTFOUND, "%s: key '%s' is missing", g->path, key);
    if (kv->type != DS_GGUF_ARRAY || kv->arr_type != DS_GGUF_STRING || kv->arr_len > (1u << 24))
        return ds_fail(e, DS_ECORRUPT, "%s: key '%s' is not an array of at most 2^24 strings", g->path, key);
    ds_str *tmp = malloc((size_t)(kv->arr_len ? kv->arr_len : 1) * sizeof *tmp);
    *out = calloc((size_t)(kv->arr_len ? kv->arr_len : 1), sizeof **out);
    if (!tmp || !*out) { free(tmp); return ds_fail(e, DS_ENOMEM, "out of memory"); }
    ds_status s = ds_gguf_arr_strings(g, kv, tmp, e);
    for (uint64_t i = 0; i < kv->arr_len && !s; i++) {
        if (memchr(tmp[i].ptr, '\0', tmp[i].len)) {
            s = ds_fail(e, DS_ECORRUPT, "%s: %s[%llu] contains a NUL byte", g->path, key, (unsigned long long)i);
            break;
        }
        if (!((*out)[i] = strndup(tmp[i].ptr, (size_t)tmp[i].len))) s = ds_fail(e, DS_ENOMEM, "out of memory");
        else *n = (int)i + 1;
    }
    free(tmp);
    return s;
}

ds_status ds_vocab_read_gguf(ds_vocab *v, const ds_gguf *g, ds_err *e) {
    memset(v, 0, sizeof *v);
    ds_str model, pre;
    ds_status s = ds_gguf_get_str(g, "tokenizer.ggml.model", &model, e);
    if (!s && !ds_str_eq(model, "gpt2"))
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: tokenizer.ggml.model is '%.*s'; only byte-level BPE (\"gpt2\") is supported",
                    g->path, (int)(model.len > 32 ? 32 : model.len), model.ptr);
    if (!s) s = copy_strings(g, "tokenizer.ggml.tokens", &v->tokens, &v->n_tokens, e);
    if (!s) s = copy_strings(g, "tokenizer.ggml.merges", &v->merges, &v->n_merges, e);
    if (s) goto fail;
    v->types = malloc((size_t)(v->n_tokens ? v->n_tokens : 1) * sizeof *v->types);
    if (!v->types) { s = ds_fail(e, DS_ENOMEM, "out of memory"); goto fail; }
    const ds_gguf_kv *kv = ds_gguf_find(g, "tokenizer.ggml.token_type");
    if (kv) {
        int64_t *tmp = malloc((size_t)(kv->arr_len ? kv->arr_len : 1) * sizeof *tmp);
        if (!tmp) { s = ds_fail(e, DS_ENOMEM, "out of memory"); goto fail; }
        if (kv->type != DS_GGUF_ARRAY || kv->arr_len != (uint64_t)v->n_tokens)
            s = ds_fail(e, DS_ECORRUPT, "%s: tokenizer.ggml.token_type does not have one entry per token", g->path);
        else
            s = ds_gguf_arr_ints(g, kv, tmp, e);
        for (int i = 0; i < v->n_tokens && !s; i++) v->types[i] = (int32_t)tmp[i];
        free(tmp);
        if (s) goto fail;
    } else {
        for (int i = 0; i < v->n_tokens; i++) v->types[i] = DS_TOKEN_NORMAL;
    }
    s = ds_gguf_get_str(g, "tokenizer.ggml.pre", &pre, e);
    if (s == DS_ENOTFOUND) v->pre = strdup("qwen2");
    else if (s) goto fail;
    else if (ds_str_eq(pre, "qwen35") || ds_str_eq(pre, "qwen2")) v->pre = strndup(pre.ptr, (size_t)pre.len);
    else {
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not one deltaserve knows (qwen2, qwen35)",
                    g->path, (int)(pre.len > 32 ? 32 : pre.len), pre.ptr);
        goto fail;
    }
    set_specials(v);
    uint32_t id;
    if (ds_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &id, NULL) == DS_OK && id < (uint32_t)v->n_tokens)
        v->eos_id = (int32_t)id;
    if (ds_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &id, NULL) == DS_OK && id < (uint32_t)v->n_tokens)
        v->pad_id = (int32_t)id;
    return v->pre ? DS_OK : ds_fail(e, DS_ENOMEM, "out of memory");
fail:
    ds_vocab_free(v);
    return s;
}

ds_status ds_vocab_pad(ds_vocab *v, int n_tokens, ds_err *e) {
    if (n_tokens <= v->n_tokens) return DS_OK;
    char **tokens = realloc(v->tokens, (size_t)n_tokens * sizeof *tokens);
    if (!tokens) return ds_fail(e, DS_ENOMEM, "out of memory");
    v->tokens = tokens;
    int32_t *types = realloc(v->types, (size_t)n_tokens * sizeof *types);
    if (!types) return ds_fail(e, DS_ENOMEM, "out of memory");
    v->types = types;
    for (int i = v->n_tokens; i < n_tokens; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%d]", i);
        v->types[i] = DS_TOKEN_UNUSED;
        v->tokens[i] = strdup(buf);
        v->n_tokens = i + 1;
        if (!v->tokens[i]) return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    return DS_OK;
}
