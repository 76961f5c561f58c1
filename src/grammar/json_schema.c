/* json_schema.c - see json_schema.h.
 *
 * Each schema becomes a GBNF expression; objects, arrays, property values,
 * referenced definitions and the shared primitives (string, number, any
 * value) become rules of their own, named `name-...`. Choices made where
 * JSON Schema allows more than a grammar can follow exactly (all of them
 * keep the grammar's sentences valid under the schema):
 *   - properties come in the order the schema lists them (required ones
 *     always, optional ones when the answer wants), then the properties
 *     that only additionalProperties allows (their names written without
 *     escapes, never one of the listed names);
 *   - a schema without `type` takes the types its keywords imply
 *     (properties: object, items: array, ...), any value when none do;
 *   - integers have at most 16 digits unless a bound needs more; integer
 *     bounds are exact; a number with a bound has no exponent, its whole
 *     part is held exactly, and a value between two whole numbers one of
 *     which is beyond the bound is left out (maximum 2.5 allows 2 and 1.99
 *     but not 2.3);
 *   - oneOf is written as anyOf: a value that matches several branches is
 *     not refused;
 *   - format date takes days 01-31 (01-30 in the short months, 01-29 in
 *     February, whatever the year); time and date-time need an offset (Z
 *     or +hh:mm), as RFC 3339 does;
 *   - enum / const values are written as compact JSON (whitespace between
 *     tokens allowed as elsewhere), with the keys of an object in their
 *     order in the schema. */
#include "grammar/json_schema.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_text.h"
#include "grammar/regex.h"

#define MAX_DEPTH 64
#define INT_DIGITS 16 /* integers without bounds: at most this many digits */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ANY = 127 };
static const char *const TYPE_NAMES[] = {"null", "boolean", "integer", "number", "string", "array", "object"};

enum { P_WS = 1, P_CHAR = 2, P_STRING = 4, P_INT = 8, P_NUMBER = 16, P_VALUE = 32, P_DATE = 64, P_TIME = 128 };

typedef struct {
    const json_t *root;
    const ds_schema_options *o;
    const char *name;
    ds_sb rules;
    char **names; /* rule names taken */
    int n_names, cap_names;
    struct { char *ptr, *rule; } *refs;
    int n_refs, cap_refs;
    unsigned prims;
    json_t *owned; /* schemas made by merging allOf, alive until the end */
    char path[1024];
    size_t path_len;
    int depth;
    ds_err *e;
    ds_status st;
} gen;

static int failf(gen *g, ds_status code, const char *fmt, const char *word) {
    if (g->st != DS_OK) return 0;
    char msg[800];
    snprintf(msg, sizeof msg, fmt, word);
    const char *where = g->path_len ? g->path : "(root)";
    char *at = strstr(msg, "@@"); /* where the schema's location goes; else at the end */
    if (at) {
        *at = 0;
        g->st = ds_fail(g->e, code, "json_schema: %sat %s%s", msg, where, at + 2);
    } else g->st = ds_fail(g->e, code, "json_schema: %s at %s", msg, where);
    return 0;
}

static int oom(gen *g) {
    if (g->st == DS_OK) g->st = ds_fail(g->e, DS_ENOMEM, "json_schema: out of memory");
    return 0;
}

/* --- the JSON pointer of the schema being compiled (for messages) --- */

static size_t path_push(gen *g, const char *seg) {
    size_t old = g->path_len;
    ds_sb t = {0};
    ds_sb_puts(&t, "/");
    for (const char *s = seg; *s; s++) {
        if (*s == '~') ds_sb_puts(&t, "~0");
        else if (*s == '/') ds_sb_puts(&t, "~1");
        else ds_sb_append(&t, s, 1);
    }
    if (t.s && old + t.n < sizeof g->path) {
        memcpy(g->path + old, t.s, t.n + 1);
        g->path_len = old + t.n;
    }
    ds_sb_free(&t);
    return old;
}

static size_t path_push_i(gen *g, size_t i) {
    char b[32];
    snprintf(b, sizeof b, "%zu", i);
    return path_push(g, b);
}

static void path_pop(gen *g, size_t old) { g->path_len = old, g->path[old] = 0; }

/* --- rules --- */

/* A new rule name `name-hint` (hint cut to letters, digits and '-'), unique. */
static char *rule_name(gen *g, const char *hint) {
    char base[96];
    size_t n = (size_t)snprintf(base, sizeof base, "%s-", g->name);
    for (const char *s = hint; *s && n + 1 < 64; s++) {
        char c = *s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) base[n++] = c;
        else if (n && base[n - 1] != '-') base[n++] = '-';
    }
    while (n && base[n - 1] == '-') n--;
    base[n] = 0;
    char cand[128];
    snprintf(cand, sizeof cand, "%s", base);
    for (int k = 2;; k++) {
        int taken = !strcmp(cand, g->name);
        for (int i = 0; i < g->n_names && !taken; i++) taken = !strcmp(g->names[i], cand);
        if (!taken) break;
        snprintf(cand, sizeof cand, "%s-%d", base, k);
    }
    if (g->n_names == g->cap_names) {
        int cap = g->cap_names ? 2 * g->cap_names : 32;
        char **nn = realloc(g->names, (size_t)cap * sizeof *nn);
        if (!nn) { oom(g); return NULL; }
        g->names = nn, g->cap_names = cap;
    }
    char *s = strdup(cand);
    if (!s) { oom(g); return NULL; }
    return g->names[g->n_names++] = s;
}

static void add_rule(gen *g, const char *name, const ds_sb *body) {
    ds_sb_printf(&g->rules, "%s ::= %s\n", name, body->s ? body->s : "\"\"");
    if (body->oom) g->rules.oom = 1;
}

static const char *ws(gen *g) {
    if (!g->o->max_space) return "";
    g->prims |= P_WS;
    static __thread char b[96];
    snprintf(b, sizeof b, " %s-ws ", g->name);
    return b;
}

static void put_ws(gen *g, ds_sb *t) { ds_sb_puts(t, ws(g)); }

/* " sep " between two elements: whitespace, then the literal, then whitespace */
static void put_sep(gen *g, ds_sb *t, const char *lit) {
    ds_sb_puts(t, g->o->max_space ? ws(g) : " ");
    ds_sb_puts(t, lit);
    ds_sb_puts(t, g->o->max_space ? ws(g) : " ");
}

static void put_prim(gen *g, ds_sb *t, unsigned p, const char *suffix) {
    g->prims |= p;
    ds_sb_printf(t, "%s-%s", g->name, suffix);
}

static void put_repeat(ds_sb *t, long mn, long mx) { /* mx < 0: unbounded */
    if (mn == 0 && mx == 1) ds_sb_puts(t, "?");
    else if (mn == 0 && mx < 0) ds_sb_puts(t, "*");
    else if (mn == 1 && mx < 0) ds_sb_puts(t, "+");
    else if (mx < 0) ds_sb_printf(t, "{%ld,}", mn);
    else if (mn == mx) ds_sb_printf(t, "{%ld}", mn);
    else ds_sb_printf(t, "{%ld,%ld}", mn, mx);
}

/* --- keywords --- */

static const char *const KNOWN[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    "pattern", "format", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    NULL};
static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "readOnly", "writeOnly", "deprecated", NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++) if (!strcmp(*l, k)) return 1;
    return 0;
}

static int check_keywords(gen *g, const json_t *s) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!in_list(KNOWN, k) && !in_list(ANNOTATIONS, k))
            return failf(g, DS_EUNSUPPORTED, "keyword '%s' @@ is not supported", k);
    }
    return 1;
}

/* Keywords that constrain (all but annotations and definitions), other than the ones in except. */
static int has_constraints(const json_t *s, const char *const *except) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(ANNOTATIONS, k) || !strcmp(k, "$defs") || !strcmp(k, "definitions")) continue;
        if (except && in_list(except, k)) continue;
        return 1;
    }
    return 0;
}

static int get_count(gen *g, const json_t *s, const char *key, long *out) {
    const json_t *v = json_object_get(s, key);
    if (!v) return 1;
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (d < 0 || d != floor(d) || d > 1e9) return failf(g, DS_EINVAL, "'%s' must be a whole number 0..1e9", key);
    *out = (long)d;
    return 1;
}

static int type_mask(gen *g, const json_t *t, unsigned *mask) {
    *mask = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        int found = 0;
        for (int k = 0; k < 7 && json_is_string(x); k++)
            if (!strcmp(json_string_value(x), TYPE_NAMES[k])) *mask |= 1u << k, found = 1;
        if (!found) return failf(g, DS_EINVAL, "'type' has an unknown type name%s", "");
    }
    if (!*mask) return failf(g, DS_EINVAL, "'type' is an empty list%s", "");
    return 1;
}

/* The types a schema without `type` implies by its keywords. */
static unsigned implied_types(const json_t *s) {
    static const struct { const char *k; unsigned t; } K[] = {
        {"properties", T_OBJ}, {"required", T_OBJ}, {"additionalProperties", T_OBJ},
        {"items", T_ARR}, {"prefixItems", T_ARR}, {"additionalItems", T_ARR}, {"minItems", T_ARR}, {"maxItems", T_ARR},
        {"pattern", T_STR}, {"format", T_STR}, {"minLength", T_STR}, {"maxLength", T_STR},
        {"minimum", T_NUM}, {"maximum", T_NUM}, {"exclusiveMinimum", T_NUM}, {"exclusiveMaximum", T_NUM}};
    unsigned m = 0;
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) if (json_object_get(s, K[i].k)) m |= K[i].t;
    return m ? m : T_ANY;
}

/* --- $ref --- */

static const json_t *resolve_ref(gen *g, const char *ref) {
    if (ref[0] != '#') return failf(g, DS_EUNSUPPORTED, "remote $ref '%s' is not supported", ref), NULL;
    const json_t *cur = g->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return failf(g, DS_EUNSUPPORTED, "$ref '%s' (an anchor) is not supported", ref), NULL;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && p[1] == '0') c = '~', p++;
            else if (c == '~' && p[1] == '1') c = '/', p++;
            else if (c == '%' && p[1] && p[2]) { /* percent-encoded, as in URI fragments */
                char h[3] = {p[1], p[2], 0};
                c = (char)strtol(h, NULL, 16), p += 2;
            }
            if (n + 1 < sizeof seg) seg[n++] = c;
        }
        seg[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, seg);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);
            cur = *seg && !*end && i >= 0 ? json_array_get(cur, (size_t)i) : NULL;
        } else cur = NULL;
        if (!cur) return failf(g, DS_ENOTFOUND, "$ref '%s' points at nothing", ref), NULL;
    }
    return cur;
}

static int gen_value(gen *g, const json_t *s, ds_sb *out);

static int gen_ref(gen *g, const char *ref, ds_sb *out) {
    for (int i = 0; i < g->n_refs; i++)
        if (!strcmp(g->refs[i].ptr, ref)) { ds_sb_puts(out, g->refs[i].rule); return 1; }
    const json_t *target = resolve_ref(g, ref);
    if (!target) return 0;
    const char *last = strrchr(ref, '/');
    char *rule = rule_name(g, last && last[1] ? last + 1 : "root-ref");
    if (!rule) return 0;
    if (g->n_refs == g->cap_refs) {
        int cap = g->cap_refs ? 2 * g->cap_refs : 8;
        void *r = realloc(g->refs, (size_t)cap * sizeof *g->refs);
        if (!r) return oom(g);
        g->refs = r, g->cap_refs = cap;
    }
    char *ptr = strdup(ref);
    if (!ptr) return oom(g);
    g->refs[g->n_refs].ptr = ptr, g->refs[g->n_refs].rule = rule;
    g->n_refs++;
    /* the rule is known before its body is written: recursion refers to it */
    char saved[sizeof g->path];
    size_t saved_len = g->path_len;
    memcpy(saved, g->path, sizeof saved);
    snprintf(g->path, sizeof g->path, "%s", ref + 1);
    g->path_len = strlen(g->path);
    ds_sb body = {0};
    int ok = gen_value(g, target, &body);
    memcpy(g->path, saved, sizeof saved);
    g->path_len = saved_len;
    if (ok) add_rule(g, rule, &body);
    ds_sb_free(&body);
    if (ok) ds_sb_puts(out, rule);
    return ok;
}

/* --- allOf: merging schemas into one --- */

static json_t *keep(gen *g, json_t *x) { /* the generator owns x from now on */
    if (x && json_array_append_new(g->owned, x)) return oom(g), NULL;
    if (!x) oom(g);
    return x;
}

static json_t *all_of2(const json_t *a, const json_t *b) {
    json_t *l = json_array();
    json_array_append((json_t *)l, (json_t *)a);
    json_array_append((json_t *)l, (json_t *)b);
    json_t *s = json_object();
    json_object_set_new(s, "allOf", l);
    return s;
}

static const json_t *flatten(gen *g, const json_t *s, int depth);

/* One schema that holds exactly when a and b both do (both flattened). */
static const json_t *merge2(gen *g, const json_t *a, const json_t *b) {
    if (json_is_true(a)) return b;
    if (json_is_true(b)) return a;
    if (json_is_false(a) || json_is_false(b)) return json_false(); /* a property one branch forbids */
    json_t *m = keep(g, json_object());
    if (!m) return NULL;
    const char *k;
    const json_t *va;
    json_object_foreach((json_t *)a, k, va) {
        if (!json_object_get(b, k)) json_object_set(m, k, (json_t *)va);
    }
    json_object_foreach((json_t *)b, k, va) {
        if (!json_object_get(a, k)) json_object_set(m, k, (json_t *)va);
    }
    json_object_foreach((json_t *)a, k, va) {
        const json_t *vb = json_object_get(b, k);
        if (!vb || in_list(ANNOTATIONS, k) || !strcmp(k, "$defs") || !strcmp(k, "definitions")) continue;
        if (!strcmp(k, "type")) {
            unsigned ma, mb;
            if (!type_mask(g, va, &ma) || !type_mask(g, vb, &mb)) return NULL;
            unsigned r = ma & mb;
            if (((ma & T_NUM) && (mb & T_INT)) || ((ma & T_INT) && (mb & T_NUM))) r |= T_INT;
            if (!r) return failf(g, DS_EUNSUPPORTED, "allOf: no type satisfies every branch%s", ""), NULL;
            json_t *l = json_array();
            for (int t = 0; t < 7; t++) if (r & 1u << t) json_array_append_new(l, json_string(TYPE_NAMES[t]));
            json_object_set_new(m, k, l);
        } else if (!strcmp(k, "required")) {
            json_t *l = json_deep_copy(va);
            size_t i;
            const json_t *x;
            json_array_foreach((json_t *)vb, i, x) {
                int dup = 0;
                for (size_t j = 0; j < json_array_size(l); j++) dup |= json_equal(json_array_get(l, j), (json_t *)x);
                if (!dup) json_array_append((json_t *)l, (json_t *)x);
            }
            json_object_set_new(m, k, l);
        } else if (!strcmp(k, "properties")) {
            json_t *p = json_object();
            const char *pk;
            const json_t *pv;
            const json_t *adda = json_object_get(a, "additionalProperties"), *addb = json_object_get(b, "additionalProperties");
            json_object_foreach((json_t *)va, pk, pv) {
                const json_t *other = json_object_get(vb, pk);
                if (!other) other = addb;
                json_object_set_new(p, pk, other ? all_of2(pv, other) : json_incref((json_t *)pv));
            }
            json_object_foreach((json_t *)vb, pk, pv) {
                if (json_object_get(va, pk)) continue;
                json_object_set_new(p, pk, adda ? all_of2(adda, pv) : json_incref((json_t *)pv));
            }
            json_object_set_new(m, k, p);
        } else if (!strcmp(k, "additionalProperties") || !strcmp(k, "items") || !strcmp(k, "additionalItems")) {
            if (json_is_array(va) || json_is_array(vb))
                return failf(g, DS_EUNSUPPORTED, "allOf: cannot merge two array forms of '%s'", k), NULL;
            json_object_set_new(m, k, all_of2(va, vb));
        } else if (!strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") ||
                   !strcmp(k, "exclusiveMinimum") || !strcmp(k, "maximum") || !strcmp(k, "maxLength") ||
                   !strcmp(k, "maxItems") || !strcmp(k, "exclusiveMaximum")) {
            if (!json_is_number(va) || !json_is_number(vb))
                return failf(g, DS_EUNSUPPORTED, "allOf: cannot merge two '%s' that are not numbers", k), NULL;
            int take_max = !strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") || !strcmp(k, "exclusiveMinimum");
            double x = json_number_value(va), y = json_number_value(vb);
            json_object_set(m, k, (json_t *)((take_max ? x >= y : x <= y) ? va : vb));
        } else if (!strcmp(k, "anyOf")) {
            json_t *l = json_array();
            size_t i, j;
            const json_t *x, *y;
            json_array_foreach((json_t *)va, i, x) json_array_foreach((json_t *)vb, j, y) json_array_append_new(l, all_of2(x, y));
            if (json_array_size(l) > 64) { json_decref(l); return failf(g, DS_EUNSUPPORTED, "allOf: two anyOf make over 64 branches%s", ""), NULL; }
            json_object_set_new(m, k, l);
        } else if (!json_equal((json_t *)va, (json_t *)vb)) {
            return failf(g, DS_EUNSUPPORTED, "allOf: cannot merge two different '%s'", k), NULL;
        }
    }
    return m;
}

/* s without allOf and without a $ref beside other keywords: the same constraint in one object. */
static const json_t *flatten(gen *g, const json_t *s, int depth) {
    if (depth > 16) return failf(g, DS_EUNSUPPORTED, "allOf and $ref nest too deeply to merge%s", ""), NULL;
    if (!json_is_object(s)) return s;
    if (!check_keywords(g, s)) return NULL;
    const json_t *all = json_object_get(s, "allOf"), *ref = json_object_get(s, "$ref");
    if (!all && !ref) return s;
    json_t *rest = keep(g, json_deep_copy(s));
    if (!rest) return NULL;
    json_object_del(rest, "allOf");
    json_object_del(rest, "$ref");
    /* the referenced schema and the branches first: their properties come first */
    const json_t *acc = json_true();
    if (ref) {
        if (!json_is_string(ref)) return failf(g, DS_EINVAL, "'$ref' must be a string%s", ""), NULL;
        const json_t *t = resolve_ref(g, json_string_value(ref));
        if (!t || !(t = flatten(g, t, depth + 1)) || !(acc = merge2(g, acc, t))) return NULL;
    }
    if (all) {
        if (!json_is_array(all) || !json_array_size(all)) return failf(g, DS_EINVAL, "'allOf' must be a non-empty array%s", ""), NULL;
        size_t i;
        const json_t *x;
        json_array_foreach((json_t *)all, i, x) {
            size_t old = path_push(g, "allOf");
            path_push_i(g, i);
            const json_t *f = flatten(g, x, depth + 1);
            path_pop(g, old);
            if (!f || !(acc = merge2(g, acc, f))) return NULL;
        }
    }
    return merge2(g, acc, rest);
}

/* --- literal JSON values (enum, const) --- */

static void put_json_string(ds_sb *t, const char *s, size_t n) {
    ds_sb_puts(t, "\"\\\"");
    for (size_t i = 0; i < n;) {
        int used;
        int32_t cp = ds_utf8_decode(s + i, n - i, &used);
        i += (size_t)used;
        if (cp < 0) continue;
        if (cp < 0x20) {
            ds_sb_puts(t, "\" ");
            ds_gtext_json_cp(t, (uint32_t)cp);
            ds_sb_puts(t, " \"");
        } else {
            if (cp == '"' || cp == '\\') ds_sb_puts(t, "\\\\");
            ds_gtext_lit_cp(t, (uint32_t)cp);
        }
    }
    ds_sb_puts(t, "\\\"\"");
}

static void put_real(ds_sb *t, double d) {
    char b[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, d);
        if (strtod(b, NULL) == d) break;
    }
    int plain = !strpbrk(b, ".eEn");
    if (plain) ds_sb_printf(t, "(\"%s\" | \"%s.0\")", b, b); /* 3.0 in the schema: 3 and 3.0 are equal */
    else ds_sb_printf(t, "\"%s\"", b);
}

static void gen_literal(gen *g, const json_t *v, ds_sb *t) {
    switch (json_typeof(v)) {
    case JSON_NULL: ds_sb_puts(t, "\"null\""); return;
    case JSON_TRUE: ds_sb_puts(t, "\"true\""); return;
    case JSON_FALSE: ds_sb_puts(t, "\"false\""); return;
    case JSON_INTEGER: ds_sb_printf(t, "\"%lld\"", (long long)json_integer_value(v)); return;
    case JSON_REAL: put_real(t, json_real_value(v)); return;
    case JSON_STRING: put_json_string(t, json_string_value(v), json_string_length(v)); return;
    case JSON_ARRAY: {
        ds_sb_puts(t, "\"[\"");
        put_ws(g, t);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put_sep(g, t, "\",\"");
            else ds_sb_puts(t, " ");
            gen_literal(g, json_array_get(v, i), t);
        }
        if (json_array_size(v)) put_ws(g, t);
        ds_sb_puts(t, " \"]\"");
        return;
    }
    case JSON_OBJECT: {
        ds_sb_puts(t, "\"{\"");
        put_ws(g, t);
        const char *k;
        const json_t *x;
        int i = 0;
        json_object_foreach((json_t *)v, k, x) {
            if (i++) put_sep(g, t, "\",\"");
            else ds_sb_puts(t, " ");
            put_json_string(t, k, strlen(k));
            put_sep(g, t, "\":\"");
            gen_literal(g, x, t);
        }
        if (i) put_ws(g, t);
        ds_sb_puts(t, " \"}\"");
        return;
    }
    }
}

static int value_type_ok(const json_t *v, unsigned mask) {
    switch (json_typeof(v)) {
    case JSON_NULL: return mask & T_NULL;
    case JSON_TRUE: case JSON_FALSE: return mask & T_BOOL;
    case JSON_INTEGER: return mask & (T_INT | T_NUM);
    case JSON_REAL: return (mask & T_NUM) || ((mask & T_INT) && json_real_value(v) == floor(json_real_value(v)));
    case JSON_STRING: return mask & T_STR;
    case JSON_ARRAY: return mask & T_ARR;
    case JSON_OBJECT: return mask & T_OBJ;
    }
    return 0;
}

static int gen_enum(gen *g, const json_t *s, unsigned mask, ds_sb *out) {
    static const char *const OK_BESIDE[] = {"enum", "const", "type", NULL};
    const json_t *en = json_object_get(s, "enum"), *c = json_object_get(s, "const");
    if (en && c) return failf(g, DS_EUNSUPPORTED, "enum together with const is not supported%s", "");
    if (has_constraints(s, OK_BESIDE)) {
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)s, k, v)
            if (!in_list(OK_BESIDE, k) && !in_list(ANNOTATIONS, k) && strcmp(k, "$defs") && strcmp(k, "definitions"))
                return failf(g, DS_EUNSUPPORTED, "keyword '%s' beside enum / const is not supported", k);
    }
    if (en && !json_is_array(en)) return failf(g, DS_EINVAL, "'enum' must be an array%s", "");
    size_t n = en ? json_array_size(en) : 1;
    int k = 0;
    ds_sb t = {0};
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : c;
        if (!value_type_ok(v, mask)) continue;
        if (k++) ds_sb_puts(&t, " | ");
        gen_literal(g, v, &t);
    }
    if (!k) { ds_sb_free(&t); return failf(g, DS_EUNSUPPORTED, "enum / const admits no value of the schema's type%s", ""); }
    ds_sb_printf(out, "(%s)", t.s ? t.s : "");
    if (t.oom) out->oom = 1;
    ds_sb_free(&t);
    return 1;
}

/* --- numbers --- */

/* Same-length decimal strings a <= b: the digit strings between them. */
static void digits_between(ds_sb *t, const char *a, const char *b, size_t n) {
    if (n == 0) { ds_sb_puts(t, "\"\""); return; }
    if (a[0] == b[0]) {
        ds_sb_printf(t, "\"%c\"", a[0]);
        if (n > 1) { ds_sb_puts(t, " "); digits_between(t, a + 1, b + 1, n - 1); }
        return;
    }
    int a_low = 1, b_high = 1; /* a's tail all 0, b's tail all 9 */
    for (size_t i = 1; i < n; i++) a_low &= a[i] == '0', b_high &= b[i] == '9';
    ds_sb_puts(t, "(");
    char lo = a[0], hi = b[0];
    int k = 0;
    if (!a_low) {
        char nines[32];
        memset(nines, '9', n - 1);
        ds_sb_printf(t, "\"%c\" ", a[0]);
        digits_between(t, a + 1, nines, n - 1);
        lo++, k++;
    }
    if (!b_high) hi--;
    if (lo <= hi) {
        ds_sb_puts(t, k++ ? " | " : "");
        if (lo == hi) ds_sb_printf(t, "\"%c\"", lo);
        else ds_sb_printf(t, "[%c-%c]", lo, hi);
        if (n > 1) ds_sb_printf(t, " [0-9]{%zu}", n - 1);
    }
    if (!b_high) {
        char zeros[32];
        memset(zeros, '0', n - 1);
        ds_sb_printf(t, "%s\"%c\" ", k++ ? " | " : "", b[0]);
        digits_between(t, zeros, b + 1, n - 1);
    }
    ds_sb_puts(t, ")");
}

/* The decimal forms (no sign, no leading zero) of the integers in [a, b], 0 <= a <= b. */
static void uint_range(ds_sb *t, long long a, long long b) {
    char sa[32], sb[32];
    int la = snprintf(sa, sizeof sa, "%lld", a), lb = snprintf(sb, sizeof sb, "%lld", b);
    int k = 0;
    ds_sb_puts(t, "(");
    for (int len = la; len <= lb; len++) {
        char lo[32], hi[32];
        if (len == la) memcpy(lo, sa, (size_t)la + 1);
        else { lo[0] = '1'; memset(lo + 1, '0', (size_t)len - 1); lo[len] = 0; }
        if (len == lb) memcpy(hi, sb, (size_t)lb + 1);
        else { memset(hi, '9', (size_t)len); hi[len] = 0; }
        if (k++) ds_sb_puts(t, " | ");
        digits_between(t, lo, hi, (size_t)len);
    }
    ds_sb_puts(t, ")");
}

/* The integers in [lo, hi] (both within +-(10^18)). */
static void int_range(ds_sb *t, long long lo, long long hi) {
    int k = 0;
    ds_sb_puts(t, "(");
    if (lo < 0) {
        ds_sb_puts(t, "\"-\" ");
        uint_range(t, hi < 0 ? -hi : 1, -lo);
        k++;
    }
    if (hi >= 0) {
        if (k++) ds_sb_puts(t, " | ");
        uint_range(t, lo > 0 ? lo : 0, hi);
    }
    ds_sb_puts(t, ")");
}

typedef struct { int has_lo, has_hi; double lo, hi; int lo_excl, hi_excl; } bounds;

static int get_bounds(gen *g, const json_t *s, bounds *b) {
    memset(b, 0, sizeof *b);
    const json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    const json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
    if ((mn && !json_is_number(mn)) || (mx && !json_is_number(mx)))
        return failf(g, DS_EINVAL, "'minimum' and 'maximum' must be numbers%s", "");
    if (mn) b->has_lo = 1, b->lo = json_number_value(mn);
    if (mx) b->has_hi = 1, b->hi = json_number_value(mx);
    /* draft-04 spells exclusive bounds as booleans beside minimum / maximum */
    if (json_is_boolean(emn)) b->lo_excl = json_is_true(emn) && mn;
    else if (json_is_number(emn)) {
        double v = json_number_value(emn);
        if (!b->has_lo || v >= b->lo) b->has_lo = 1, b->lo = v, b->lo_excl = 1;
    } else if (emn) return failf(g, DS_EINVAL, "'exclusiveMinimum' must be a number%s", "");
    if (json_is_boolean(emx)) b->hi_excl = json_is_true(emx) && mx;
    else if (json_is_number(emx)) {
        double v = json_number_value(emx);
        if (!b->has_hi || v <= b->hi) b->has_hi = 1, b->hi = v, b->hi_excl = 1;
    } else if (emx) return failf(g, DS_EINVAL, "'exclusiveMaximum' must be a number%s", "");
    if ((b->has_lo && fabs(b->lo) > 1e18) || (b->has_hi && fabs(b->hi) > 1e18))
        return failf(g, DS_EUNSUPPORTED, "a bound beyond 1e18 is not supported%s", "");
    return 1;
}

/* The whole numbers the bounds allow: [*lo, *hi]; 0 when there are none. */
static int int_bounds(const bounds *b, long long *lo, long long *hi) {
    long long cap = 9999999999999999LL; /* INT_DIGITS nines */
    *lo = -cap, *hi = cap;
    if (b->has_lo) {
        double c = ceil(b->lo);
        *lo = (long long)(b->lo_excl && c == b->lo ? c + 1 : c);
        if (*lo > cap) *hi = *lo; /* a bound beyond the usual digits: room for it */
    }
    if (b->has_hi) {
        double f = floor(b->hi);
        *hi = (long long)(b->hi_excl && f == b->hi ? f - 1 : f);
        if (*hi < -cap) *lo = *hi;
    }
    if (b->has_lo && !b->has_hi && *hi < *lo) *hi = *lo;
    return *lo <= *hi;
}

static int gen_integer(gen *g, const json_t *s, ds_sb *out) {
    bounds b;
    if (!get_bounds(g, s, &b)) return 0;
    if (!b.has_lo && !b.has_hi) { put_prim(g, out, P_INT, "int"); return 1; }
    long long lo, hi;
    if (!int_bounds(&b, &lo, &hi)) return failf(g, DS_EUNSUPPORTED, "the bounds admit no integer%s", "");
    int_range(out, lo, hi);
    return 1;
}

static int gen_number(gen *g, const json_t *s, ds_sb *out) {
    bounds b;
    if (!get_bounds(g, s, &b)) return 0;
    if (!b.has_lo && !b.has_hi) { put_prim(g, out, P_NUMBER, "number"); return 1; }
    long long lo, hi;
    int any_int = int_bounds(&b, &lo, &hi);
    /* A non-whole value I.F (F not all zeros) lies strictly between I and I+1
     * (or -I-1 and -I): allowed when both ends are within the bounds. */
    long long cap = 9999999999999999LL;
    double flo = b.has_lo ? b.lo : -(double)cap - 1, fhi = b.has_hi ? b.hi : (double)cap + 1;
    long long p_lo = (long long)ceil(flo > 0 ? flo : 0), p_hi = (long long)floor(fhi) - 1; /* I >= 0: I..I+1 */
    long long n_lo = (long long)ceil(fhi < 0 ? -fhi : 0), n_hi = (long long)floor(-flo) - 1; /* -(I+1)..-I */
    if (p_hi > cap) p_hi = cap;
    if (n_hi > cap) n_hi = cap;
    const char *frac = " \".\" [0-9]* [1-9] [0-9]*";
    int k = 0;
    ds_sb_puts(out, "(");
    if (any_int) { int_range(out, lo, hi); ds_sb_puts(out, " (\".\" \"0\"+)?"); k++; }
    if (p_lo <= p_hi) {
        ds_sb_puts(out, k++ ? " | " : "");
        uint_range(out, p_lo, p_hi);
        ds_sb_puts(out, frac);
    }
    if (n_lo <= n_hi) {
        ds_sb_puts(out, k++ ? " | \"-\" " : "\"-\" ");
        uint_range(out, n_lo, n_hi);
        ds_sb_puts(out, frac);
    }
    ds_sb_puts(out, ")");
    if (!k) return failf(g, DS_EUNSUPPORTED, "the bounds admit no number%s", "");
    return 1;
}

/* --- strings --- */

/* JSON Schema's pattern matches anywhere (a search): each top-level
 * alternative not anchored by ^ / $ gets any text before / after it. */
static char *search_form(const char *p, size_t n) {
    ds_sb t = {0};
    size_t start = 0;
    int depth = 0, in_class = 0;
    for (size_t i = 0; i <= n; i++) {
        char c = i < n ? p[i] : '|';
        if (i < n && c == '\\') { i++; continue; }
        if (in_class) { if (c == ']' && i > (size_t)in_class) in_class = 0; continue; }
        if (c == '[') { in_class = (int)i + (i + 1 < n && p[i + 1] == '^' ? 2 : 1); continue; }
        if (c == '(') depth++;
        else if (c == ')') depth--;
        else if (c == '|' && depth == 0) {
            size_t end = i;
            int anchored_end = 0;
            if (end > start && p[end - 1] == '$') {
                size_t bs = 0;
                for (size_t j = end - 1; j > start && p[j - 1] == '\\'; j--) bs++;
                anchored_end = bs % 2 == 0;
            }
            if (start) ds_sb_puts(&t, "|");
            if (start >= end || p[start] != '^') ds_sb_puts(&t, "[\\s\\S]*");
            ds_sb_append(&t, p + start, end - start);
            if (!anchored_end) ds_sb_puts(&t, "[\\s\\S]*");
            start = i + 1;
        }
    }
    if (t.oom) { ds_sb_free(&t); return NULL; }
    return t.s;
}

static int gen_pattern(gen *g, const char *pat, size_t n, ds_sb *out) {
    char *rule = rule_name(g, "pattern"), *gb = NULL, *full;
    if (!rule) return 0;
    ds_err e = {0};
    /* the pattern as written first, so that an error names its byte offset */
    ds_status st = ds_regex_to_gbnf(pat, n, rule, 1, &gb, &e);
    free(gb), gb = NULL;
    if (st == DS_OK) {
        if (!(full = search_form(pat, n))) return oom(g);
        st = ds_regex_to_gbnf(full, strlen(full), rule, 1, &gb, &e);
        free(full);
    }
    if (st != DS_OK) {
        char msg[700];
        snprintf(msg, sizeof msg, "'pattern': %s", e.msg);
        return failf(g, st, "%s", msg);
    }
    ds_sb_puts(&g->rules, gb);
    free(gb);
    ds_sb_printf(out, "\"\\\"\" %s \"\\\"\"", rule);
    return 1;
}

static int gen_string(gen *g, const json_t *s, ds_sb *out) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long mn = 0, mx = -1;
    if (!get_count(g, s, "minLength", &mn) || !get_count(g, s, "maxLength", &mx)) return 0;
    int lengths = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if ((pat || fmt) && lengths) return failf(g, DS_EUNSUPPORTED, "minLength / maxLength beside %s is not supported", pat ? "pattern" : "format");
    if (pat && fmt) return failf(g, DS_EUNSUPPORTED, "pattern beside format is not supported%s", "");
    if (pat) {
        if (!json_is_string(pat)) return failf(g, DS_EINVAL, "'pattern' must be a string%s", "");
        return gen_pattern(g, json_string_value(pat), json_string_length(pat), out);
    }
    if (fmt) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        ds_sb_puts(out, "\"\\\"\" ");
        if (!strcmp(f, "date")) put_prim(g, out, P_DATE, "date");
        else if (!strcmp(f, "time")) put_prim(g, out, P_TIME, "time");
        else if (!strcmp(f, "date-time")) {
            put_prim(g, out, P_DATE, "date");
            ds_sb_puts(out, " \"T\" ");
            put_prim(g, out, P_TIME, "time");
        } else if (!strcmp(f, "uuid")) {
            ds_sb_puts(out, "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}");
        } else if (!strcmp(f, "email")) {
            ds_sb_puts(out, "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+ (\".\" [A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)* \"@\" "
                              "([A-Za-z0-9] ([A-Za-z0-9-]{0,61} [A-Za-z0-9])? \".\")+ [A-Za-z] [A-Za-z0-9-]{0,61}");
        } else return failf(g, DS_EUNSUPPORTED, "format '%s' @@ is not supported", f);
        ds_sb_puts(out, " \"\\\"\"");
        return 1;
    }
    if (mx >= 0 && mx < mn) return failf(g, DS_EUNSUPPORTED, "maxLength below minLength admits no string%s", "");
    if (!lengths) { put_prim(g, out, P_STRING, "string"); return 1; }
    ds_sb_puts(out, "\"\\\"\" ");
    put_prim(g, out, P_CHAR, "char");
    put_repeat(out, mn, mx);
    ds_sb_puts(out, " \"\\\"\"");
    return 1;
}

/* --- arrays --- */

static int gen_item_rule(gen *g, const json_t *s, const char *hint, char **rule) {
    ds_sb body = {0};
    int ok = gen_value(g, s, &body);
    char item[80];
    snprintf(item, sizeof item, "%s-item", hint);
    if (ok && body.s && !strpbrk(body.s, " ()\"[")) { /* a rule already: no wrapper */
        if ((*rule = rule_name(g, "unused"))) {
            free(*rule);
            *rule = g->names[g->n_names - 1] = strdup(body.s);
            if (!*rule) ok = oom(g);
        }
    } else if (ok && (*rule = rule_name(g, item))) add_rule(g, *rule, &body);
    ds_sb_free(&body);
    return ok && *rule;
}

static int gen_array(gen *g, const json_t *s, const char *hint, ds_sb *out) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const json_t *tail = items;
    const char *prefix_key = "prefixItems";
    if (json_is_array(items)) { /* draft-07: items as a list, then additionalItems */
        if (prefix) return failf(g, DS_EUNSUPPORTED, "items as a list beside prefixItems is not supported%s", "");
        prefix = items, prefix_key = "items", tail = json_object_get(s, "additionalItems");
    } else if (json_object_get(s, "additionalItems") && !prefix) {
        tail = items; /* additionalItems without a list of items does nothing */
    }
    if (prefix && !json_is_array(prefix)) return failf(g, DS_EINVAL, "'prefixItems' must be an array%s", "");
    long mn = 0, mx = -1;
    if (!get_count(g, s, "minItems", &mn) || !get_count(g, s, "maxItems", &mx)) return 0;
    long k = prefix ? (long)json_array_size(prefix) : 0;
    if (json_is_false(tail)) mx = mx < 0 || mx > k ? k : mx;
    if (mx >= 0 && mn > mx) return failf(g, DS_EUNSUPPORTED, "minItems cannot be met (too few items allowed)%s", "");
    if (mx == 0) { ds_sb_puts(out, "\"[\""); put_ws(g, out); ds_sb_puts(out, " \"]\""); return 1; }
    char *tail_rule = NULL;
    int tail_ok = !json_is_false(tail) && (mx < 0 || mx > k);
    if (tail_ok) {
        size_t old = path_push(g, tail == items ? "items" : "additionalItems");
        int ok = gen_item_rule(g, tail ? tail : json_true(), hint, &tail_rule);
        path_pop(g, old);
        if (!ok) return 0;
    }
    long need = mn > 0 ? mn : 1; /* an empty array is the outer option */
    ds_sb c = {0};
    int opened = 0;
    for (long i = 0; i < k && (mx < 0 || i < mx); i++) {
        size_t old = path_push(g, prefix_key);
        path_push_i(g, (size_t)i);
        if (i >= need) { ds_sb_puts(&c, "("); opened++; }
        if (i) put_sep(g, &c, "\",\"");
        ds_sb_puts(&c, "(");
        int ok = gen_value(g, json_array_get(prefix, (size_t)i), &c);
        ds_sb_puts(&c, ")");
        path_pop(g, old);
        if (!ok) { ds_sb_free(&c); return 0; }
    }
    if (tail_ok) {
        long tmin = need > k ? need - k : 0, tmax = mx < 0 ? -1 : mx - k;
        if (k == 0) { /* the first item has no comma before it */
            ds_sb_puts(&c, tail_rule);
            tmin = tmin ? tmin - 1 : 0, tmax = tmax < 0 ? -1 : tmax - 1;
        }
        if (tmax != 0) {
            ds_sb_puts(&c, " (");
            put_sep(g, &c, "\",\"");
            ds_sb_printf(&c, "%s)", tail_rule);
            put_repeat(&c, tmin, tmax);
        }
    }
    for (; opened; opened--) ds_sb_puts(&c, ")?");
    ds_sb_puts(out, "\"[\"");
    put_ws(g, out);
    ds_sb_printf(out, mn > 0 ? " %s" : " (%s", c.s ? c.s : "\"\"");
    put_ws(g, out);
    ds_sb_puts(out, mn > 0 ? " \"]\"" : ")? \"]\"");
    if (c.oom) out->oom = 1;
    ds_sb_free(&c);
    return 1;
}

/* --- objects --- */

typedef struct { const char *key; const json_t *schema; int required; char *kv; } prop;

/* Rules for the JSON string contents without escapes that are none of keys[]
 * (a trie walk: follow a key while the text does, leave it with any other character). */
static char *gen_key_not_in(gen *g, const char **keys, int n, size_t depth) {
    char *rule = rule_name(g, "other-key");
    if (!rule) return NULL;
    ds_sb b = {0};
    int terminal = 0, alts = 0;
    uint32_t *seen = malloc((size_t)(n ? n : 1) * sizeof *seen); /* first characters taken so far */
    int n_seen = 0;
    if (!seen) { oom(g); return NULL; }
    ds_sb_puts(&b, "(");
    for (int i = 0; i < n; i++) {
        size_t len = strlen(keys[i]);
        if (len == depth) { terminal = 1; continue; }
        int used;
        int32_t cp = ds_utf8_decode(keys[i] + depth, len - depth, &used);
        if (cp < 0x20 || cp == '"' || cp == '\\') continue; /* never written without an escape */
        int dup = 0;
        for (int j = 0; j < n_seen; j++) dup |= seen[j] == (uint32_t)cp;
        if (dup) continue;
        seen[n_seen++] = (uint32_t)cp;
        /* the keys that go on with this character */
        const char **sub = malloc((size_t)n * sizeof *sub);
        if (!sub) { ds_sb_free(&b); free(seen); oom(g); return NULL; }
        int m = 0;
        for (int j = 0; j < n; j++) {
            size_t lj = strlen(keys[j]);
            if (lj > depth && !strncmp(keys[j] + depth, keys[i] + depth, (size_t)used)) sub[m++] = keys[j];
        }
        char *child = gen_key_not_in(g, sub, m, depth + (size_t)used);
        free(sub);
        if (!child) { ds_sb_free(&b); free(seen); return NULL; }
        ds_sb_puts(&b, alts++ ? " | \"" : "\"");
        ds_gtext_lit_cp(&b, (uint32_t)cp);
        ds_sb_printf(&b, "\" %s", child);
    }
    ds_sb_puts(&b, alts++ ? " | [^\"\\\\\\x00-\\x1F" : "[^\"\\\\\\x00-\\x1F");
    for (int j = 0; j < n_seen; j++) ds_gtext_class_cp(&b, seen[j]);
    free(seen);
    ds_sb_printf(&b, "] [^\"\\\\\\x00-\\x1F]*)%s", terminal ? "" : "?");
    add_rule(g, rule, &b);
    ds_sb_free(&b);
    return rule;
}

static int gen_object(gen *g, const json_t *s, const char *hint, ds_sb *out) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return failf(g, DS_EINVAL, "'properties' must be an object%s", "");
    if (req && !json_is_array(req)) return failf(g, DS_EINVAL, "'required' must be an array%s", "");
    if (!addl) addl = g->o->strict ? json_false() : json_true();
    size_t n_req = req ? json_array_size(req) : 0;
    for (size_t i = 0; i < n_req; i++)
        if (!json_is_string(json_array_get(req, i))) return failf(g, DS_EINVAL, "'required' must list strings%s", "");
    int cap = (int)(json_object_size(props) + n_req) + 1, n = 0, ok = 1;
    prop *p = calloc((size_t)cap, sizeof *p);
    const char **names = calloc((size_t)cap, sizeof *names);
    if (!p || !names) { free(p); free(names); return oom(g); }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        if (json_is_object(v) && json_object_get(v, "allOf")) { /* a merged property may turn out false */
            size_t old = path_push(g, "properties");
            path_push(g, k);
            v = flatten(g, v, 0);
            path_pop(g, old);
            if (!v) { ok = 0; goto out; }
        }
        int r = 0;
        for (size_t i = 0; i < n_req; i++) r |= !strcmp(json_string_value(json_array_get(req, i)), k);
        if (json_is_false(v)) { /* a property that must be absent */
            if (r) { ok = failf(g, DS_EUNSUPPORTED, "required property '%s' has the schema false", k); goto out; }
            names[n] = k, p[n++] = (prop){k, NULL, 0, NULL};
            continue;
        }
        names[n] = k, p[n++] = (prop){k, v, r, NULL};
    }
    for (size_t i = 0; i < n_req; i++) {
        const char *rk = json_string_value(json_array_get(req, i));
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= !strcmp(names[j], rk);
        if (dup) continue;
        if (json_is_false(addl)) {
            ok = failf(g, DS_EUNSUPPORTED, "required property '%s' is not allowed (additionalProperties is false)", rk);
            goto out;
        }
        names[n] = rk, p[n++] = (prop){rk, addl, 1, NULL};
    }
    int n_names = n;
    /* drop the properties that must be absent (their names stay excluded from other keys) */
    int m = 0;
    for (int i = 0; i < n; i++) if (p[i].schema) p[m++] = p[i];
    n = m;
    for (int i = 0; i < n && ok; i++) {
        size_t old = path_push(g, props && json_object_get(props, p[i].key) ? "properties" : "additionalProperties");
        if (props && json_object_get(props, p[i].key)) path_push(g, p[i].key);
        ds_sb kv = {0};
        put_json_string(&kv, p[i].key, strlen(p[i].key));
        put_sep(g, &kv, "\":\"");
        ok = gen_value(g, p[i].schema, &kv);
        path_pop(g, old);
        if (ok && (p[i].kv = rule_name(g, p[i].key))) add_rule(g, p[i].kv, &kv);
        else ok = 0;
        ds_sb_free(&kv);
    }
    char *add_kv = NULL;
    if (ok && !json_is_false(addl)) {
        ds_sb kv = {0};
        if (n_names) {
            char *keyr = gen_key_not_in(g, names, n_names, 0);
            if (!keyr) ok = 0;
            else ds_sb_printf(&kv, "\"\\\"\" %s \"\\\"\"", keyr);
        } else put_prim(g, &kv, P_STRING, "string");
        put_sep(g, &kv, "\":\"");
        size_t old = path_push(g, "additionalProperties");
        ok = ok && gen_value(g, addl, &kv);
        path_pop(g, old);
        if (ok && (add_kv = rule_name(g, "additional-kv"))) add_rule(g, add_kv, &kv);
        else ok = 0;
        ds_sb_free(&kv);
    }
    if (!ok) goto out;
    /* rest-i: the properties from i on, after at least one was written */
    ds_sb tail = {0};
    if (add_kv) {
        ds_sb_puts(&tail, "(");
        put_sep(g, &tail, "\",\"");
        ds_sb_printf(&tail, "%s)*", add_kv);
    }
    char **rest = calloc((size_t)n + 1, sizeof *rest);
    if (!rest) { ds_sb_free(&tail); ok = oom(g); goto out; }
    for (int i = n - 1; i >= 1 && ok; i--) {
        ds_sb b = {0};
        ds_sb_puts(&b, p[i].required ? "" : "(");
        put_sep(g, &b, "\",\"");
        ds_sb_printf(&b, "%s%s", p[i].kv, p[i].required ? "" : ")?");
        if (i + 1 < n) ds_sb_printf(&b, " %s", rest[i + 1]);
        else if (tail.s) ds_sb_printf(&b, " %s", tail.s);
        if ((rest[i] = rule_name(g, "rest"))) add_rule(g, rest[i], &b);
        else ok = 0;
        ds_sb_free(&b);
    }
    ds_sb first = {0};
    int alts = 0, all_optional = 1;
    for (int i = 0; i < n && ok; i++) {
        ds_sb_printf(&first, "%s%s", alts++ ? " | " : "", p[i].kv);
        if (i + 1 < n) ds_sb_printf(&first, " %s", rest[i + 1]);
        else if (tail.s) ds_sb_printf(&first, " %s", tail.s);
        if (p[i].required) { all_optional = 0; break; }
    }
    if (all_optional && add_kv) ds_sb_printf(&first, "%s%s%s%s", alts++ ? " | " : "", add_kv, tail.s ? " " : "", tail.s ? tail.s : "");
    ds_sb body = {0};
    ds_sb_puts(&body, "\"{\"");
    put_ws(g, &body);
    if (alts) {
        ds_sb_printf(&body, " (%s)", first.s);
        put_ws(g, &body);
        if (all_optional) { /* the members and their trailing space are one option */
            ds_sb fixed = {0};
            ds_sb_puts(&fixed, "\"{\"");
            put_ws(g, &fixed);
            ds_sb_printf(&fixed, " ((%s)", first.s);
            put_ws(g, &fixed);
            ds_sb_puts(&fixed, ")?");
            ds_sb_free(&body);
            body = fixed;
        }
    }
    ds_sb_puts(&body, " \"}\"");
    char *obj = ok ? rule_name(g, hint) : NULL;
    if (obj) { add_rule(g, obj, &body); ds_sb_puts(out, obj); }
    else ok = 0;
    ds_sb_free(&body);
    ds_sb_free(&first);
    ds_sb_free(&tail);
    free(rest);
out:
    free(p);
    free(names);
    return ok;
}

/* --- one schema --- */

static const char *hint_of(gen *g) {
    const char *h = strrchr(g->path, '/');
    return h && h[1] ? h + 1 : "top";
}

static int gen_type(gen *g, const json_t *s, unsigned t, ds_sb *out) {
    char hint[64];
    snprintf(hint, sizeof hint, "%s", hint_of(g));
    switch (t) {
    case T_NULL: ds_sb_puts(out, "\"null\""); return 1;
    case T_BOOL: ds_sb_puts(out, "(\"true\" | \"false\")"); return 1;
    case T_INT: return gen_integer(g, s, out);
    case T_NUM: return gen_number(g, s, out);
    case T_STR: return gen_string(g, s, out);
    case T_ARR: return gen_array(g, s, hint, out);
    default: return gen_object(g, s, hint, out);
    }
}

static int gen_any(gen *g, ds_sb *out) {
    put_prim(g, out, P_VALUE, "value");
    return 1;
}

static int gen_value(gen *g, const json_t *s, ds_sb *out) {
    if (json_is_true(s)) return gen_any(g, out);
    if (json_is_false(s)) return failf(g, DS_EUNSUPPORTED, "the schema false admits no value%s", "");
    if (!json_is_object(s)) return failf(g, DS_EINVAL, "a schema must be an object or a boolean%s", "");
    if (++g->depth > MAX_DEPTH) return failf(g, DS_EUNSUPPORTED, "schema nested too deeply%s", "");
    int ok = 0;
    if (!check_keywords(g, s)) goto done;
    const json_t *ref = json_object_get(s, "$ref");
    static const char *const REF_ONLY[] = {"$ref", NULL};
    if (ref && !has_constraints(s, REF_ONLY)) {
        if (!json_is_string(ref)) { failf(g, DS_EINVAL, "'$ref' must be a string%s", ""); goto done; }
        ok = gen_ref(g, json_string_value(ref), out);
        goto done;
    }
    if (ref || json_object_get(s, "allOf")) {
        const json_t *f = flatten(g, s, 0);
        ok = f && gen_value(g, f, out);
        goto done;
    }
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any && one) { failf(g, DS_EUNSUPPORTED, "anyOf beside oneOf is not supported%s", ""); goto done; }
    if (any || one) {
        const json_t *l = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (!json_is_array(l) || !json_array_size(l)) { failf(g, DS_EINVAL, "'%s' must be a non-empty array", kw); goto done; }
        static const char *const SKIP[] = {"anyOf", "oneOf", NULL};
        int siblings = has_constraints(s, SKIP);
        json_t *rest = NULL;
        if (siblings) { /* {A, anyOf: [B, C]} is anyOf: [A and B, A and C] */
            if (!(rest = keep(g, json_deep_copy(s)))) goto done;
            json_object_del(rest, kw);
        }
        ds_sb_puts(out, "(");
        ok = 1;
        for (size_t i = 0; i < json_array_size(l) && ok; i++) {
            size_t old = path_push(g, kw);
            path_push_i(g, i);
            const json_t *br = json_array_get(l, i);
            if (rest) {
                const json_t *f = flatten(g, br, 0);
                br = f ? merge2(g, rest, f) : NULL;
            }
            if (i) ds_sb_puts(out, " | ");
            ok = br && gen_value(g, br, out);
            path_pop(g, old);
        }
        ds_sb_puts(out, ")");
        goto done;
    }
    unsigned mask;
    const json_t *type = json_object_get(s, "type");
    if (type) { if (!type_mask(g, type, &mask)) goto done; }
    else mask = implied_types(s);
    if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        ok = gen_enum(g, s, type ? mask : T_ANY, out);
        goto done;
    }
    if (mask == T_ANY && !has_constraints(s, NULL)) { ok = gen_any(g, out); goto done; }
    if ((mask & T_NUM) && (mask & T_INT)) mask &= ~(unsigned)T_INT; /* numbers include the integers */
    int n_types = __builtin_popcount(mask);
    if (n_types > 1) ds_sb_puts(out, "(");
    ok = 1;
    for (unsigned t = 1, k = 0; t <= T_OBJ && ok; t <<= 1) {
        if (!(mask & t)) continue;
        if (k++) ds_sb_puts(out, " | ");
        ok = gen_type(g, s, t, out);
    }
    if (n_types > 1) ds_sb_puts(out, ")");
done:
    g->depth--;
    return ok;
}

static void put_primitives(gen *g) {
    ds_sb *r = &g->rules;
    const char *n = g->name;
    if (g->prims & P_VALUE) g->prims |= P_STRING | P_NUMBER | (g->o->max_space ? P_WS : 0);
    if (g->prims & P_NUMBER) g->prims |= P_INT;
    if (g->prims & P_STRING) g->prims |= P_CHAR;
    if (g->prims & P_VALUE) {
        const char *w = ws(g);
        ds_sb_printf(r, "%s-value ::= %s-object | %s-array | %s-string | %s-number | \"true\" | \"false\" | \"null\"\n", n, n, n, n, n);
        ds_sb_printf(r, "%s-object ::= \"{\" %s (%s-string %s \":\" %s %s-value (%s \",\" %s %s-string %s \":\" %s %s-value)* %s)? \"}\"\n",
                        n, w, n, w, w, n, w, w, n, w, w, n, w);
        ds_sb_printf(r, "%s-array ::= \"[\" %s (%s-value (%s \",\" %s %s-value)* %s)? \"]\"\n", n, w, n, w, w, n, w);
    }
    if (g->prims & P_STRING) ds_sb_printf(r, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", n, n);
    if (g->prims & P_CHAR)
        /* \u escapes of surrogates are left out: a pair is one character to a JSON reader, two here */
        ds_sb_printf(r, "%s-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
                           "([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n", n);
    if (g->prims & P_NUMBER)
        ds_sb_printf(r, "%s-number ::= %s-int (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n", n, n);
    if (g->prims & P_INT) ds_sb_printf(r, "%s-int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,%d})\n", n, INT_DIGITS - 1);
    if (g->prims & P_DATE)
        ds_sb_printf(r, "%s-date ::= [0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
                           "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | [12] [0-9]))\n", n);
    if (g->prims & P_TIME)
        ds_sb_printf(r, "%s-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
                           "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n", n);
    if (g->prims & P_WS) ds_sb_printf(r, "%s-ws ::= [ \\t\\n]{0,%d}\n", n, g->o->max_space);
}

static int valid_name(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-')) return 0;
    return 1;
}

ds_status ds_json_schema_to_gbnf(const json_t *schema, const char *name, const ds_schema_options *o, char **gbnf,
                                 ds_err *e) {
    *gbnf = NULL;
    ds_schema_options none = {0};
    if (!o) o = &none;
    if (!name || !valid_name(name)) return ds_fail(e, DS_EINVAL, "json_schema: rule name '%s' is not a GBNF name", name ? name : "");
    if (o->max_space < 0 || o->max_space > 64) return ds_fail(e, DS_EINVAL, "json_schema: max_space %d is not in 0..64", o->max_space);
    gen g = {.root = schema, .o = o, .name = name, .e = e, .st = DS_OK, .owned = json_array()};
    if (!g.owned) return ds_fail(e, DS_ENOMEM, "json_schema: out of memory");
    g.path[0] = 0;
    static const char *const PRIMS[] = {"value", "object", "array", "string", "char", "number", "int", "date", "time", "ws"};
    for (size_t i = 0; i < sizeof PRIMS / sizeof PRIMS[0]; i++) rule_name(&g, PRIMS[i]);
    ds_sb top = {0};
    int ok = gen_value(&g, schema, &top);
    ds_sb out = {0};
    if (ok) {
        put_primitives(&g);
        ds_sb_printf(&out, "%s ::= %s\n", name, top.s ? top.s : "\"\"");
        if (g.rules.s) ds_sb_puts(&out, g.rules.s);
    }
    ds_status st = g.st;
    if (ok && (out.oom || g.rules.oom || top.oom)) st = ds_fail(e, DS_ENOMEM, "json_schema: out of memory");
    ds_sb_free(&top);
    ds_sb_free(&g.rules);
    for (int i = 0; i < g.n_names; i++) free(g.names[i]);
    free(g.names);
    for (int i = 0; i < g.n_refs; i++) free(g.refs[i].ptr);
    free(g.refs);
    json_decref(g.owned);
    if (!ok || st != DS_OK) { ds_sb_free(&out); return st != DS_OK ? st : ds_fail(e, DS_EINVAL, "json_schema: failed"); }
    *gbnf = out.s;
    return DS_OK;
}
