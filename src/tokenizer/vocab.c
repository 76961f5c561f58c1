/* vocab.c - byte-level BPE vocabularies: generation for test models, and
 * reading/writing tokenizer.json and GGUF tokenizer.ggml.* metadata. */
#include "tokenizer/vocab.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mapped_file.h"
#include "loading/gguf.h"
#include "loading/gguf_writer.h"

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

ds_status ds_vocab_read_tokenizer_json(ds_vocab *v, const char *path, ds_err *e) {
    memset(v, 0, sizeof *v);
    char *text;
    size_t len;
    ds_status s = ds_read_text_file(path, 512u << 20, &text, &len, e);
    if (s) return s;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root) return ds_fail(e, DS_ECORRUPT, "%s: not valid JSON", path);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0) {
        s = ds_fail(e, DS_EUNSUPPORTED, "%s: field 'model.type' is not \"BPE\"", path);
        goto out;
    }
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        s = ds_fail(e, DS_ECORRUPT, "%s: fields 'model.vocab' and 'model.merges' must be an object and a list", path);
        goto out;
    }
    int max_id = -1;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > (1 << 24)) {
            s = ds_fail(e, DS_ECORRUPT, "%s: model.vocab['%.40s'] is not a token id", path, it->string);
            goto out;
        }
        if ((int)it->valuedouble > max_id) max_id = (int)it->valuedouble;
    }
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > (1 << 24) || !cJSON_IsString(content)) {
            s = ds_fail(e, DS_ECORRUPT, "%s: an entry of 'added_tokens' lacks a valid id or content", path);
            goto out;
        }
        if ((int)id->valuedouble > max_id) max_id = (int)id->valuedouble;
    }
    if ((s = alloc_tables(v, max_id + 1, cJSON_GetArraySize(merges), e))) goto out;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int id = (int)it->valuedouble;
        if (v->tokens[id]) {
            s = ds_fail(e, DS_ECORRUPT, "%s: token id %d is given to two tokens in model.vocab", path, id);
            goto out;
        }
        v->tokens[id] = strdup(it->string);
        v->types[id] = DS_TOKEN_NORMAL;
    }
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next) {
        int id = (int)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        if (v->tokens[id] && strcmp(v->tokens[id], content) != 0) {
            s = ds_fail(e, DS_ECORRUPT, "%s: added token '%.40s' reuses id %d of '%.40s'", path, content, id, v->tokens[id]);
            goto out;
        }
        free(v->tokens[id]);
        v->tokens[id] = strdup(content);
        v->types[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) ? DS_TOKEN_CONTROL
                                                                                   : DS_TOKEN_USER_DEFINED;
    }
    for (int i = 0; i < v->n_tokens; i++) {
        if (v->types[i] == 0) { /* an id no entry names: keep the table dense like GGUF does */
            char buf[32];
            snprintf(buf, sizeof buf, "[PAD%d]", i);
            v->tokens[i] = strdup(buf);
            v->types[i] = DS_TOKEN_UNUSED;
        }
        if (!v->tokens[i]) { s = ds_fail(e, DS_ENOMEM, "out of memory"); goto out; }
    }
    for (const cJSON *it = merges->child; it; it = it->next) {
        char *m = NULL;
        if (cJSON_IsString(it)) {
            m = strdup(it->valuestring);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            size_t n = strlen(it->child->valuestring) + strlen(it->child->next->valuestring) + 2;
            if ((m = malloc(n))) snprintf(m, n, "%s %s", it->child->valuestring, it->child->next->valuestring);
        } else {
            s = ds_fail(e, DS_ECORRUPT, "%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", path, v->n_merges);
            goto out;
        }
        if (!m) { s = ds_fail(e, DS_ENOMEM, "out of memory"); goto out; }
        v->merges[v->n_merges++] = m;
    }
    /* the split pattern tells Qwen3.5's pre-tokenizer from Qwen2/3's */
    const char *pre = "qwen2";
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    for (const cJSON *it = list ? list->child : pt; it; it = list ? it->next : NULL) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "pattern"), "Regex");
        if (!cJSON_IsString(pat)) continue;
        if (strcmp(pat->valuestring, DS_PRETOK_QWEN35) == 0) pre = "qwen35";
        else if (strcmp(pat->valuestring, DS_PRETOK_QWEN2) != 0) {
            s = ds_fail(e, DS_EUNSUPPORTED, "%s: the pre-tokenizer's split pattern is neither Qwen2/3's nor Qwen3.5's", path);
            goto out;
        }
    }
    v->pre = strdup(pre);
    set_specials(v);
out:
    cJSON_Delete(root);
    if (s) ds_vocab_free(v);
    return s;
}

static cJSON *byte_level(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", 0);
    cJSON_AddBoolToObject(o, "trim_offsets", 0);
    cJSON_AddBoolToObject(o, "use_regex", 0);
    return o;
}

ds_status ds_vocab_write_tokenizer_json(const ds_vocab *v, const char *path, ds_err *e) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (int i = 0; i < v->n_tokens; i++) {
        if (v->types[i] != DS_TOKEN_CONTROL && v->types[i] != DS_TOKEN_USER_DEFINED) continue;
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", i);
        cJSON_AddStringToObject(t, "content", v->tokens[i]);
        cJSON_AddBoolToObject(t, "single_word", 0);
        cJSON_AddBoolToObject(t, "lstrip", 0);
        cJSON_AddBoolToObject(t, "rstrip", 0);
        cJSON_AddBoolToObject(t, "normalized", 0);
        cJSON_AddBoolToObject(t, "special", v->types[i] == DS_TOKEN_CONTROL);
        cJSON_AddItemToArray(added, t);
    }
    cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
    cJSON_AddStringToObject(norm, "type", "NFC");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers");
    cJSON *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", ds_vocab_pretok_regex(v));
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", 0);
    cJSON_AddItemToArray(list, split);
    cJSON_AddItemToArray(list, byte_level());
    cJSON_AddItemToObject(root, "post_processor", byte_level());
    cJSON_AddItemToObject(root, "decoder", byte_level());
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < v->n_tokens; i++)
        if (v->types[i] == DS_TOKEN_NORMAL) cJSON_AddNumberToObject(vocab, v->tokens[i], i);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < v->n_merges; i++) cJSON_AddItemToArray(merges, cJSON_CreateString(v->merges[i]));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return ds_fail(e, DS_ENOMEM, "%s: out of memory serialising the tokenizer", path);
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
