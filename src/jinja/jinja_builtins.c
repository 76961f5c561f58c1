/* jinja_builtins.c - filters, tests, methods and global functions, each as
 * @huggingface/jinja's runtime.ts implements it (which is often not as Python
 * Jinja does; the comments say where that matters for a chat template).
 *
 * Filters come in two forms that HF treats separately: `x | name` and
 * `x | name(args)`. Some exist in only one form (`default` needs its
 * parentheses; `trim(...)` does not exist), and `int` differs between them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja_int.h"

enum {
    M_UPPER, M_LOWER, M_STRIP, M_TITLE, M_CAPITALIZE, M_RSTRIP, M_LSTRIP, M_STARTSWITH, M_ENDSWITH, M_SPLIT,
    M_REPLACE, M_GET, M_ITEMS, M_KEYS, M_VALUES, M_DICTSORT,
    G_RAISE, G_RANGE, G_STRFTIME, G_NAMESPACE,
};

static const char *const STRING_METHODS[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip",
                                             "lstrip", "startswith", "endswith", "split", "replace"};
static const char *const OBJECT_METHODS[] = {"get", "items", "keys", "values", "dictsort"};

static int fail_type(jr *r, uint32_t pos, const char *what, jv v) {
    return ds_jinja_fail(r, pos, DS_EINVAL, "%s: got %s", what, ds_jinja_value_type_name(v));
}

static jstr mkstr(const char *z) {
    jstr s = {z, strlen(z)};
    return s;
}

/* The kwargs object a call passes last, or NULL; *n_pos excludes it. */
static const jobj *split_kwargs(const jv *args, int n, int *n_pos) {
    if (n > 0 && args[n - 1].k == JV_OBJECT && args[n - 1].u.o->kwargs) {
        *n_pos = n - 1;
        return args[n - 1].u.o;
    }
    *n_pos = n;
    return NULL;
}

/* args[i] ?? kwargs[name] ?? NULL (a C NULL: "not given"). */
static const jv *arg_or_kw(const jv *args, int n_pos, int i, const jobj *kw, const char *name) {
    if (i >= 0 && i < n_pos) return &args[i];
    return kw ? ds_jinja_obj_get(kw, name, strlen(name)) : NULL;
}

/* JavaScript truthiness of x.value (a list or dict is an object: always true). */
static int raw_truthy(jv v) {
    if (v.k == JV_ARRAY || v.k == JV_OBJECT || v.k == JV_NS || v.k == JV_FUNC) return 1;
    return ds_jinja_value_truthy(v);
}

/* --- strings --- */

static int str_title(jr *r, uint32_t pos, jstr s, jv *out) {
    /* value.replace(/\b\w/g, c => c.toUpperCase()): ASCII word starts only,
     * and the rest of the word is left as it is */
    char *p = ds_jinja_arena_alloc(&r->arena, s.n + 1);
    if (!p) return ds_jinja_fail_oom(r, pos);
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        int word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        char prev = i ? s.p[i - 1] : ' ';
        int prev_word = (prev >= 'a' && prev <= 'z') || (prev >= 'A' && prev <= 'Z') || (prev >= '0' && prev <= '9') ||
                        prev == '_';
        p[i] = word && !prev_word && c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
    }
    p[s.n] = '\0';
    *out = jv_str(p, s.n);
    return J_OK;
}

static int str_capitalize(jr *r, uint32_t pos, jstr s, jv *out) {
    if (s.n == 0) {
        *out = jv_str("", 0);
        return J_OK;
    }
    size_t k;
    uint32_t cp = ds_jinja_wtf8_decode(s.p, s.n, &k);
    if (cp >= 0x10000) {   /* charAt(0) is half a pair, which has no upper case */
        *out = jv_str(s.p, s.n);
        return J_OK;
    }
    jstr first = {s.p, k}, rest = {s.p + k, s.n - k};
    jv up;
    JTRY(ds_jinja_str_case_map(r, pos, first, 1, &up));
    return ds_jinja_value_concat(r, pos, up.u.s, rest, out);
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    return memmem(h, hn, n, nn);
}

/* Python-like str.split as runtime.ts writes it with JavaScript strings. */
static int str_split(jr *r, uint32_t pos, jstr s, const jv *args, int n, jv *out) {
    jv sep = n > 0 ? args[0] : jv_null();
    if (sep.k != JV_STR && sep.k != JV_NULL) return ds_jinja_fail(r, pos, DS_EINVAL, "split: sep must be a string or none");
    jv maxv = n > 1 ? args[1] : jv_int(-1);
    if (maxv.k != JV_INT) return ds_jinja_fail(r, pos, DS_EINVAL, "split: maxsplit must be an integer");
    double maxsplit = maxv.u.n;
    for (int pass = 0; pass < 2; pass++) {   /* count, then fill */
        size_t count = 0;
        jv *items = pass ? out->u.a->items : NULL;
        if (sep.k == JV_NULL) {
            jstr t = ds_jinja_str_trim(s, 1, 0);
            const char *p = t.p, *end = t.p + t.n;
            while (p < end) {
                const char *w = p;
                while (w < end && !ds_jinja_str_ws_at(w, end)) {
                    size_t k;
                    ds_jinja_wtf8_decode(w, (size_t)(end - w), &k);
                    w += k;
                }
                if (w > p) {
                    if (maxsplit != -1 && (double)count >= maxsplit) {
                        if (items) items[count] = jv_str(p, (size_t)(end - p));
                        count++;
                        break;
                    }
                    if (items) items[count] = jv_str(p, (size_t)(w - p));
                    count++;
                }
                p = w;
                for (size_t k; (k = ds_jinja_str_ws_at(p, end)) > 0;) p += k;
            }
        } else {
            jstr d = sep.u.s;
            if (d.n == 0) return ds_jinja_fail(r, pos, DS_EINVAL, "split: empty separator");
            size_t total = 0;
            for (const char *p = s.p, *hit;; p = hit + d.n) {
                hit = find_bytes(p, (size_t)(s.p + s.n - p), d.p, d.n);
                total++;
                if (!hit) break;
            }
            /* result.splice(maxsplit) joined back: the pieces from keep on */
            size_t keep = total;
            if (maxsplit != -1 && (double)total > maxsplit)
                keep = maxsplit < 0 ? (size_t)fmax((double)total + maxsplit, 0) : (size_t)maxsplit;
            const char *p = s.p;
            for (size_t i = 0; i < keep; i++) {
                const char *hit = find_bytes(p, (size_t)(s.p + s.n - p), d.p, d.n);
                const char *e = hit ? hit : s.p + s.n;
                if (items) items[count] = jv_str(p, (size_t)(e - p));
                count++;
                p = hit ? hit + d.n : s.p + s.n;
            }
            if (keep < total) {
                if (items) items[count] = jv_str(p, (size_t)(s.p + s.n - p));
                count++;
            }
        }
        if (!pass) JTRY(ds_jinja_value_new_array(r, pos, count, out));
    }
    return J_OK;
}

/* utils.ts replace(): count null or negative means all; "" matches between
 * every two characters (and at both ends). */
static int str_replace(jr *r, uint32_t pos, jstr s, jstr from, jstr to, double count, int has_count, jv *out) {
    if (has_count && count == 0) {
        *out = jv_str(s.p, s.n);
        return J_OK;
    }
    double remaining = !has_count || count < 0 ? INFINITY : count;
    jbuf b = {0};
    if (from.n == 0) {
        for (size_t i = 0, k = 0;; i += k) {
            if (remaining > 0) {
                JTRY(ds_jinja_buf_put(r, pos, &b, to.p, to.n));
                remaining--;
            }
            if (i >= s.n) break;
            ds_jinja_wtf8_decode(s.p + i, s.n - i, &k);
            JTRY(ds_jinja_buf_put(r, pos, &b, s.p + i, k));
        }
    } else {
        const char *p = s.p, *end = s.p + s.n;
        while (p <= end) {
            const char *hit = remaining > 0 ? find_bytes(p, (size_t)(end - p), from.p, from.n) : NULL;
            if (!hit) break;
            JTRY(ds_jinja_buf_put(r, pos, &b, p, (size_t)(hit - p)));
            JTRY(ds_jinja_buf_put(r, pos, &b, to.p, to.n));
            remaining--;
            p = hit + from.n;
        }
        JTRY(ds_jinja_buf_put(r, pos, &b, p, (size_t)(end - p)));
    }
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

static int str_affix(jr *r, uint32_t pos, jstr s, const jv *args, int n, int end, jv *out) {
    const char *name = end ? "endswith" : "startswith";
    if (n == 0) return ds_jinja_fail(r, pos, DS_EINVAL, "%s() needs an argument", name);
    jv pat = args[0];
    size_t n_pats = pat.k == JV_STR ? 1 : pat.k == JV_ARRAY ? pat.u.a->n : 0;
    if (pat.k != JV_STR && pat.k != JV_ARRAY)
        return ds_jinja_fail(r, pos, DS_EINVAL, "%s() takes a string or a tuple of strings", name);
    for (size_t i = 0; i < n_pats; i++) {
        jv p = pat.k == JV_STR ? pat : pat.u.a->items[i];
        if (p.k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "%s() tuple items must be strings", name);
        jstr a = p.u.s;
        if (a.n <= s.n && !memcmp(end ? s.p + s.n - a.n : s.p, a.p, a.n)) {
            *out = jv_bool(1);
            return J_OK;
        }
    }
    *out = jv_bool(0);
    return J_OK;
}

/* --- comparison and sorting --- */

static int numeric_like(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num_of(jv v) { return v.k == JV_BOOL ? v.u.b : v.u.n; }

/* compareRuntimeValues */
static int compare(jr *r, uint32_t pos, jv a, jv b, int case_sensitive, int *res) {
    if (a.k == JV_NULL && b.k == JV_NULL) return *res = 0, J_OK;
    if (a.k == JV_UNDEF && b.k == JV_UNDEF) return *res = 0, J_OK;
    if (a.k == JV_NULL || b.k == JV_NULL || a.k == JV_UNDEF || b.k == JV_UNDEF)
        return ds_jinja_fail(r, pos, DS_EINVAL, "cannot compare %s with %s", ds_jinja_value_type_name(a), ds_jinja_value_type_name(b));
    if (numeric_like(a) && numeric_like(b)) {
        double x = num_of(a), y = num_of(b);
        *res = x < y ? -1 : x > y ? 1 : 0;
        return J_OK;
    }
    if (strcmp(ds_jinja_value_type_name(a), ds_jinja_value_type_name(b)) != 0)
        return ds_jinja_fail(r, pos, DS_EINVAL, "cannot compare %s with %s", ds_jinja_value_type_name(a), ds_jinja_value_type_name(b));
    if (a.k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "cannot compare values of type %s", ds_jinja_value_type_name(a));
    jstr x = a.u.s, y = b.u.s;
    if (!case_sensitive) {
        jv lx, ly;
        JTRY(ds_jinja_str_case_map(r, pos, x, 0, &lx));
        JTRY(ds_jinja_str_case_map(r, pos, y, 0, &ly));
        x = lx.u.s;
        y = ly.u.s;
    }
    *res = ds_jinja_str_compare(x, y);
    return ds_jinja_charge_scan(r, pos, x.n < y.n ? x.n : y.n);
}

typedef struct {
    int case_sensitive, reverse;
    int index;          /* dictsort: compare item[index]; -1: the item */
    const char *attr;   /* sort(attribute=): a dotted path */
} sort_opts;

static jv attribute_path(jv item, const char *path);

static jv sort_key(jv v, const sort_opts *o) {
    if (o->index >= 0) return v.u.a->items[o->index];
    if (o->attr) return attribute_path(v, o->attr);
    return v;
}

/* A stable merge sort (Array.prototype.sort is stable) whose comparison may fail. */
static int sort_values(jr *r, uint32_t pos, jv *v, size_t n, const sort_opts *o) {
    if (n < 2) return J_OK;
    jv *tmp = ds_jinja_arena_alloc(&r->arena, n * sizeof *tmp);
    if (!tmp) return ds_jinja_fail_oom(r, pos);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c = 0;
                JTRY(compare(r, pos, sort_key(v[i], o), sort_key(v[j], o), o->case_sensitive, &c));
                if (o->reverse) c = -c;
                if (++r->steps > r->lim.max_steps) return ds_jinja_fail(r, pos, DS_ENOMEM, "too many evaluation steps");
                tmp[k++] = c <= 0 ? v[i++] : v[j++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof *v);
    }
    return J_OK;
}

static int copy_array(jr *r, uint32_t pos, const jarr *a, jv *out) {
    JTRY(ds_jinja_value_new_array(r, pos, a->n, out));
    if (a->n) memcpy(out->u.a->items, a->items, a->n * sizeof(jv));
    return J_OK;
}

/* JavaScript parseInt(s, 10) (digits after optional space and sign) and
 * parseFloat (the longest decimal prefix); NaN when there is none. */
static double js_parse_number(jstr s, int integer) {
    s = ds_jinja_str_trim(s, 1, 0);
    char buf[400];
    size_t n = 0, i = 0;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-')) buf[n++] = s.p[i++];
    if (!integer && s.n - i >= 8 && !memcmp(s.p + i, "Infinity", 8)) return buf[0] == '-' && n ? -INFINITY : INFINITY;
    size_t digits = 0;
    while (i < s.n && s.p[i] >= '0' && s.p[i] <= '9' && n < sizeof buf - 8) buf[n++] = s.p[i++], digits++;
    if (!integer) {
        if (i < s.n && s.p[i] == '.') {
            size_t save = n;
            buf[n++] = s.p[i++];
            size_t frac = 0;
            while (i < s.n && s.p[i] >= '0' && s.p[i] <= '9' && n < sizeof buf - 8) buf[n++] = s.p[i++], frac++;
            if (!frac && !digits) n = save;
            digits += frac;
        }
        if (digits && i < s.n && (s.p[i] == 'e' || s.p[i] == 'E')) {
            size_t save = n, j = i + 1;
            buf[n++] = 'e';
            if (j < s.n && (s.p[j] == '+' || s.p[j] == '-')) buf[n++] = s.p[j++];
            size_t ed = 0;
            while (j < s.n && s.p[j] >= '0' && s.p[j] <= '9' && n < sizeof buf - 2) buf[n++] = s.p[j++], ed++;
            if (!ed) n = save;
        }
    }
    if (!digits) return NAN;
    buf[n] = '\0';
    return strtod(buf, NULL);
}

/* getAttributeValue: "a.b.0" through dicts, namespaces and lists. */
static jv attribute_path(jv item, const char *path) {
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (item.k == JV_OBJECT || item.k == JV_NS) {
            const jv *v = ds_jinja_obj_get(item.u.o, p, n);
            item = v ? *v : jv_undef();
        } else if (item.k == JV_ARRAY) {
            jstr part = {p, n};
            double idx = js_parse_number(part, 1);
            if (isnan(idx) || idx < 0 || idx >= (double)item.u.a->n) return jv_undef();
            item = item.u.a->items[(size_t)idx];
        } else {
            return jv_undef();
        }
        if (!dot) return item;
        p = dot + 1;
    }
}

static int object_items(jr *r, uint32_t pos, const jobj *o, int what, jv *out) {
    JTRY(ds_jinja_value_new_array(r, pos, o->n, out));
    for (size_t i = 0; i < o->n; i++) {
        jv key = jv_str(o->keys[i].p, o->keys[i].n);
        if (what == M_KEYS) out->u.a->items[i] = key;
        else if (what == M_VALUES) out->u.a->items[i] = o->vals[i];
        else {
            jv pair;
            JTRY(ds_jinja_value_new_array(r, pos, 2, &pair));
            pair.u.a->items[0] = key;
            pair.u.a->items[1] = o->vals[i];
            out->u.a->items[i] = pair;
        }
    }
    return J_OK;
}

static int dictsort(jr *r, uint32_t pos, const jobj *o, const jv *args, int n, jv *out) {
    const jobj *kw = NULL;
    jv pos_args[8];
    int n_pos = 0;
    for (int i = 0; i < n; i++) {   /* runtime.ts filters out every kwargs object */
        if (args[i].k == JV_OBJECT && args[i].u.o->kwargs) kw = args[i].u.o;
        else if (n_pos < 8) pos_args[n_pos++] = args[i];
    }
    const jv *cs = arg_or_kw(pos_args, n_pos, 0, kw, "case_sensitive");
    const jv *by = arg_or_kw(pos_args, n_pos, 1, kw, "by");
    const jv *rev = arg_or_kw(pos_args, n_pos, 2, kw, "reverse");
    if (cs && cs->k != JV_BOOL) return ds_jinja_fail(r, pos, DS_EINVAL, "dictsort: case_sensitive must be a boolean");
    if (by && (by->k != JV_STR || !(jstr_eq(by->u.s, "key") || jstr_eq(by->u.s, "value"))))
        return ds_jinja_fail(r, pos, DS_EINVAL, "dictsort: by must be 'key' or 'value'");
    if (rev && rev->k != JV_BOOL) return ds_jinja_fail(r, pos, DS_EINVAL, "dictsort: reverse must be a boolean");
    JTRY(object_items(r, pos, o, M_ITEMS, out));
    sort_opts so = {cs ? cs->u.b : 0, rev ? rev->u.b : 0, by && jstr_eq(by->u.s, "value") ? 1 : 0, NULL};
    return sort_values(r, pos, out->u.a->items, out->u.a->n, &so);
}

/* --- members and methods --- */

int ds_jinja_builtin_member(jr *r, uint32_t pos, jv obj, jv prop, jv *out) {
    *out = jv_undef();
    if (obj.k == JV_OBJECT || obj.k == JV_NS) {
        if (prop.k != JV_STR) return fail_type(r, pos, "a dict key must be a string", prop);
        const jv *v = ds_jinja_obj_get(obj.u.o, prop.u.s.p, prop.u.s.n);
        if (v) {
            *out = *v;
            return J_OK;
        }
        if (obj.k == JV_OBJECT)
            for (size_t i = 0; i < sizeof OBJECT_METHODS / sizeof OBJECT_METHODS[0]; i++)
                if (jstr_eq(prop.u.s, OBJECT_METHODS[i])) return ds_jinja_value_new_func(r, pos, JF_METHOD, M_GET + (int)i, obj, NULL, NULL, out);
        return J_OK;
    }
    if (obj.k == JV_ARRAY || obj.k == JV_STR) {
        if (prop.k == JV_INT) {
            double i = prop.u.n;   /* Array.prototype.at / String.prototype.at */
            if (isnan(i)) i = 0;
            i = trunc(i);
            if (obj.k == JV_ARRAY) {
                double n = (double)obj.u.a->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) *out = obj.u.a->items[(size_t)i];
                return J_OK;
            }
            JTRY(ds_jinja_charge_scan(r, pos, obj.u.s.n));
            double n = (double)ds_jinja_str_utf16_len(obj.u.s);
            if (i < 0) i += n;
            if (!(i >= 0 && i < n)) return J_OK;
            size_t want = (size_t)i, unit = 0;
            jstr s = obj.u.s;
            for (size_t b = 0, k; b < s.n; b += k) {
                uint32_t cp = ds_jinja_wtf8_decode(s.p + b, s.n - b, &k);
                size_t units = cp >= 0x10000 ? 2 : 1;
                if (want < unit + units) {
                    if (units == 1) {
                        *out = jv_str(s.p + b, k);
                        return J_OK;
                    }
                    char *half = ds_jinja_arena_alloc(&r->arena, 4);   /* one half of a surrogate pair */
                    if (!half) return ds_jinja_fail_oom(r, pos);
                    uint32_t u = want == unit ? 0xD800 + ((cp - 0x10000) >> 10) : 0xDC00 + ((cp - 0x10000) & 0x3FF);
                    *out = jv_str(half, ds_jinja_wtf8_encode(u, half));
                    return J_OK;
                }
                unit += units;
            }
            return J_OK;
        }
        if (prop.k != JV_STR) return fail_type(r, pos, "an index must be an integer or a name", prop);
        if (jstr_eq(prop.u.s, "length")) {
            if (obj.k == JV_STR) JTRY(ds_jinja_charge_scan(r, pos, obj.u.s.n));
            *out = jv_int(obj.k == JV_ARRAY ? (double)obj.u.a->n : (double)ds_jinja_str_utf16_len(obj.u.s));
            return J_OK;
        }
        if (obj.k == JV_STR)
            for (size_t i = 0; i < sizeof STRING_METHODS / sizeof STRING_METHODS[0]; i++)
                if (jstr_eq(prop.u.s, STRING_METHODS[i])) return ds_jinja_value_new_func(r, pos, JF_METHOD, M_UPPER + (int)i, obj, NULL, NULL, out);
        return J_OK;
    }
    if (prop.k != JV_STR) return fail_type(r, pos, "an attribute name must be a string", prop);
    return J_OK;   /* attributes of none, undefined, numbers...: undefined */
}

static int call_range(jr *r, uint32_t pos, const jv *args, int n, jv *out) {
    for (int i = 0; i < n && i < 3; i++)
        if (args[i].k != JV_INT && args[i].k != JV_FLOAT && args[i].k != JV_UNDEF)
            return fail_type(r, pos, "range() takes numbers", args[i]);
    if (n == 0 || args[0].k == JV_UNDEF) return ds_jinja_fail(r, pos, DS_EINVAL, "range() needs a number");
    double start = args[0].u.n, stop, step = 1;
    if (n < 2 || args[1].k == JV_UNDEF) {
        stop = start;
        start = 0;
    } else {
        stop = args[1].u.n;
    }
    if (n > 2 && args[2].k != JV_UNDEF) step = args[2].u.n;
    if (step == 0) return ds_jinja_fail(r, pos, DS_EINVAL, "range() step must not be zero");
    double count = ceil((stop - start) / step);
    if (!(count > 0)) count = 0;
    if (count > (double)r->lim.max_steps) return ds_jinja_fail(r, pos, DS_ENOMEM, "range() of %.0f numbers is over the limit", count);
    size_t cap = (size_t)count + 1, m = 0;
    JTRY(ds_jinja_value_new_array(r, pos, cap, out));
    for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (m == cap) break;
        out->u.a->items[m++] = floor(i) == i ? jv_int(i) : jv_float(i);
    }
    out->u.a->n = m;
    r->steps += m;
    return J_OK;
}

static int call_strftime(jr *r, uint32_t pos, const jv *args, int n, jv *out) {
    if (n < 1 || args[0].k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "strftime_now() takes a format string");
    static const char *const MONTHS[] = {"January", "February", "March",     "April",   "May",      "June",
                                         "July",    "August",   "September", "October", "November", "December"};
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    jstr f = args[0].u.s;
    jbuf b = {0};
    for (size_t i = 0; i < f.n; i++) {
        char c = i + 1 < f.n && f.p[i] == '%' ? f.p[i + 1] : 0;
        char tmp[32];
        int len = -1;
        switch (c) {
        case 'Y': len = snprintf(tmp, sizeof tmp, "%d", tm.tm_year + 1900); break;
        case 'm': len = snprintf(tmp, sizeof tmp, "%02d", tm.tm_mon + 1); break;
        case 'd': len = snprintf(tmp, sizeof tmp, "%02d", tm.tm_mday); break;
        case 'H': len = snprintf(tmp, sizeof tmp, "%02d", tm.tm_hour); break;
        case 'M': len = snprintf(tmp, sizeof tmp, "%02d", tm.tm_min); break;
        case 'b': len = snprintf(tmp, sizeof tmp, "%.3s", MONTHS[tm.tm_mon]); break;
        case 'B': len = snprintf(tmp, sizeof tmp, "%s", MONTHS[tm.tm_mon]); break;
        case '%': len = snprintf(tmp, sizeof tmp, "%%"); break;
        default: break;
        }
        if (len >= 0) {
            JTRY(ds_jinja_buf_put(r, pos, &b, tmp, (size_t)len));
            i++;
        } else {
            JTRY(ds_jinja_buf_putc(r, pos, &b, f.p[i]));
        }
    }
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

static int call_namespace(jr *r, uint32_t pos, const jv *args, int n, jv *out) {
    int n_pos;
    const jobj *kw = split_kwargs(args, n, &n_pos);
    if (n_pos > 1) return ds_jinja_fail(r, pos, DS_EINVAL, "namespace() takes at most 1 positional argument");
    JTRY(ds_jinja_value_new_object(r, pos, 0, JV_NS, out));
    jobj *ns = out->u.o;
    if (n_pos == 1) {
        jv src = args[0];
        if (src.k == JV_OBJECT) {
            for (size_t i = 0; i < src.u.o->n; i++) JTRY(ds_jinja_obj_set(r, pos, ns, src.u.o->keys[i], src.u.o->vals[i]));
        } else if (src.k == JV_ARRAY) {
            for (size_t i = 0; i < src.u.a->n; i++) {
                jv pair = src.u.a->items[i], k, v;
                if (pair.k == JV_ARRAY && pair.u.a->n == 2) {
                    k = pair.u.a->items[0];
                    v = pair.u.a->items[1];
                } else if (pair.k == JV_STR) {   /* a two-character string is a pair too */
                    size_t k1, k2;
                    jstr s = pair.u.s;
                    if (!s.n) return ds_jinja_fail(r, pos, DS_EINVAL, "namespace() items must be [key, value] pairs");
                    ds_jinja_wtf8_decode(s.p, s.n, &k1);
                    if (k1 >= s.n) return ds_jinja_fail(r, pos, DS_EINVAL, "namespace() items must be [key, value] pairs");
                    ds_jinja_wtf8_decode(s.p + k1, s.n - k1, &k2);
                    if (k1 + k2 != s.n) return ds_jinja_fail(r, pos, DS_EINVAL, "namespace() items must be [key, value] pairs");
                    k = jv_str(s.p, k1);
                    v = jv_str(s.p + k1, k2);
                } else {
                    return ds_jinja_fail(r, pos, DS_EINVAL, "namespace() items must be [key, value] pairs");
                }
                if (k.k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "namespace() keys must be strings");
                JTRY(ds_jinja_obj_set(r, pos, ns, k.u.s, v));
            }
        } else {
            return fail_type(r, pos, "namespace() takes a dict or a list of pairs", src);
        }
    }
    if (kw)
        for (size_t i = 0; i < kw->n; i++) JTRY(ds_jinja_obj_set(r, pos, ns, kw->keys[i], kw->vals[i]));
    return J_OK;
}

int ds_jinja_builtin_call(jr *r, uint32_t pos, const jfunc *f, jv *args, int n, jv *out) {
    jv self = f->self;
    if (self.k == JV_STR) JTRY(ds_jinja_charge_scan(r, pos, self.u.s.n));
    switch (f->id) {
    case M_UPPER: return ds_jinja_str_case_map(r, pos, self.u.s, 1, out);
    case M_LOWER: return ds_jinja_str_case_map(r, pos, self.u.s, 0, out);
    case M_STRIP:   /* trim(): the argument (strip('\n')) is ignored, as in runtime.ts */
    case M_RSTRIP:
    case M_LSTRIP: {
        jstr t = ds_jinja_str_trim(self.u.s, f->id != M_RSTRIP, f->id != M_LSTRIP);
        *out = jv_str(t.p, t.n);
        return J_OK;
    }
    case M_TITLE: return str_title(r, pos, self.u.s, out);
    case M_CAPITALIZE: return str_capitalize(r, pos, self.u.s, out);
    case M_STARTSWITH:
    case M_ENDSWITH: return str_affix(r, pos, self.u.s, args, n, f->id == M_ENDSWITH, out);
    case M_SPLIT: return str_split(r, pos, self.u.s, args, n, out);
    case M_REPLACE: {
        if (n < 2) return ds_jinja_fail(r, pos, DS_EINVAL, "replace() needs two arguments");
        if (args[0].k != JV_STR || args[1].k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "replace() arguments must be strings");
        jv count = jv_null();
        if (n > 2) {
            if (args[2].k == JV_OBJECT && args[2].u.o->kwargs) {
                const jv *c = ds_jinja_obj_get(args[2].u.o, "count", 5);
                count = c ? *c : jv_null();
            } else {
                count = args[2];
            }
        }
        if (count.k != JV_INT && count.k != JV_NULL) return ds_jinja_fail(r, pos, DS_EINVAL, "replace() count must be an integer or none");
        return str_replace(r, pos, self.u.s, args[0].u.s, args[1].u.s, count.k == JV_INT ? count.u.n : 0,
                           count.k == JV_INT, out);
    }
    case M_GET: {
        if (n < 1 || args[0].k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "get() takes a string key");
        const jv *v = ds_jinja_obj_get(self.u.o, args[0].u.s.p, args[0].u.s.n);
        *out = v ? *v : n > 1 ? args[1] : jv_null();
        return J_OK;
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: return object_items(r, pos, self.u.o, f->id, out);
    case M_DICTSORT: return dictsort(r, pos, self.u.o, args, n, out);
    case G_RAISE: {
        jbuf b = {0};
        if (n > 0 && args[0].k != JV_UNDEF) JTRY(ds_jinja_value_raw_string(r, pos, args[0], &b));
        return ds_jinja_fail(r, pos, DS_EINVAL, "raise_exception: %.*s", (int)(b.n > 500 ? 500 : b.n), b.p ? b.p : "");
    }
    case G_RANGE: return call_range(r, pos, args, n, out);
    case G_STRFTIME: return call_strftime(r, pos, args, n, out);
    case G_NAMESPACE: return call_namespace(r, pos, args, n, out);
    default: return ds_jinja_fail(r, pos, DS_EINVAL, "unknown function");
    }
}

static const char *const GLOBAL_FUNCS[] = {"raise_exception", "range", "strftime_now", "namespace"};

int ds_jinja_builtin_is_global_name(const char *name, size_t n) {
    jstr s = {name, n};
    static const char *const CONSTS[] = {"true", "false", "none", "True", "False", "None"};
    for (size_t i = 0; i < 6; i++)
        if (jstr_eq(s, CONSTS[i])) return 1;
    for (size_t i = 0; i < 4; i++)
        if (jstr_eq(s, GLOBAL_FUNCS[i])) return 1;
    return 0;
}

int ds_jinja_builtin_global(jr *r, uint32_t pos, const char *name, size_t n, jv *out) {
    jstr s = {name, n};
    if (jstr_eq(s, "true") || jstr_eq(s, "True")) *out = jv_bool(1);
    else if (jstr_eq(s, "false") || jstr_eq(s, "False")) *out = jv_bool(0);
    else if (jstr_eq(s, "none") || jstr_eq(s, "None")) *out = jv_null();
    else {
        for (int i = 0; i < 4; i++)
            if (jstr_eq(s, GLOBAL_FUNCS[i])) {
                if (ds_jinja_value_new_func(r, pos, JF_GLOBAL, G_RAISE + i, jv_undef(), NULL, NULL, out)) return -1;
                return 1;
            }
        return 0;
    }
    return 1;
}

/* --- tests --- */

int ds_jinja_builtin_test(jr *r, const jnode *n, const char *name, size_t name_n, const jv *args, int n_args, int *res) {
    jstr t = {name, name_n};
    uint32_t pos = n->pos;
    jv v = args[0];
    if (jstr_eq(t, "boolean")) *res = v.k == JV_BOOL;
    else if (jstr_eq(t, "callable")) *res = v.k == JV_FUNC;
    else if (jstr_eq(t, "odd") || jstr_eq(t, "even")) {
        if (v.k != JV_INT) return fail_type(r, pos, "odd and even take an integer", v);
        double m = fmod(v.u.n, 2);
        *res = jstr_eq(t, "odd") ? m != 0 : m == 0;
    } else if (jstr_eq(t, "false")) *res = v.k == JV_BOOL && !v.u.b;
    else if (jstr_eq(t, "true")) *res = v.k == JV_BOOL && v.u.b;
    else if (jstr_eq(t, "none")) *res = v.k == JV_NULL;
    else if (jstr_eq(t, "string")) *res = v.k == JV_STR;
    else if (jstr_eq(t, "number")) *res = v.k == JV_INT || v.k == JV_FLOAT;
    else if (jstr_eq(t, "integer")) *res = v.k == JV_INT;
    else if (jstr_eq(t, "iterable")) *res = (v.k == JV_ARRAY && !v.u.a->tuple) || v.k == JV_STR;
    else if (jstr_eq(t, "mapping")) *res = v.k == JV_OBJECT;
    else if (jstr_eq(t, "sequence")) *res = v.k == JV_ARRAY || v.k == JV_OBJECT || v.k == JV_STR;
    else if ((jstr_eq(t, "lower") || jstr_eq(t, "upper")) && v.k != JV_STR) *res = 0;
    else if (jstr_eq(t, "lower") || jstr_eq(t, "upper")) {
        jv m;
        JTRY(ds_jinja_str_case_map(r, pos, v.u.s, jstr_eq(t, "upper"), &m));
        *res = jstr_same(m.u.s, v.u.s);
    } else if (jstr_eq(t, "defined")) *res = v.k != JV_UNDEF;
    else if (jstr_eq(t, "undefined")) *res = v.k == JV_UNDEF;
    else if (jstr_eq(t, "equalto") || jstr_eq(t, "eq")) {
        if (n_args < 2) return ds_jinja_fail(r, pos, DS_EINVAL, "the '%.*s' test needs a value", (int)name_n, name);
        *res = ds_jinja_value_strict_eq(v, args[1]);
    } else {
        return ds_jinja_fail(r, pos, DS_EINVAL, "unknown test '%.*s'", (int)(name_n > 60 ? 60 : name_n), name);
    }
    return J_OK;
}

/* --- filters --- */

static int unknown_filter(jr *r, uint32_t pos, jstr name, jv v) {
    return ds_jinja_fail(r, pos, DS_EINVAL, "unknown filter '%.*s' for %s", (int)(name.n > 60 ? 60 : name.n), name.p,
                   ds_jinja_value_type_name(v));
}

static int to_json_str(jr *r, uint32_t pos, jv v, const jjson_opts *o, jv *out) {
    jbuf b = {0};
    JTRY(ds_jinja_value_tojson(r, pos, v, o, 0, &b));
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

static int indent_lines(jr *r, uint32_t pos, jstr s, double width, int first, int blank, jv *out) {
    if (width < 0 || width > (double)r->lim.max_output) return ds_jinja_fail(r, pos, DS_EINVAL, "indent: bad width");
    jbuf b = {0};
    const char *p = s.p, *end = s.p + s.n;
    for (size_t line = 0;; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        if (line) JTRY(ds_jinja_buf_putc(r, pos, &b, '\n'));
        if (!((!first && line == 0) || (!blank && e == p)))
            for (size_t k = 0; k < (size_t)width; k++) JTRY(ds_jinja_buf_putc(r, pos, &b, ' '));
        JTRY(ds_jinja_buf_put(r, pos, &b, p, (size_t)(e - p)));
        if (!nl) break;
        p = nl + 1;
    }
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

static int join_values(jr *r, uint32_t pos, jv v, jstr sep, jv *out) {
    jbuf b = {0};
    if (v.k == JV_STR) {   /* Array.from(string): code points */
        for (size_t i = 0, k; i < v.u.s.n; i += k) {
            ds_jinja_wtf8_decode(v.u.s.p + i, v.u.s.n - i, &k);
            if (i) JTRY(ds_jinja_buf_put(r, pos, &b, sep.p, sep.n));
            JTRY(ds_jinja_buf_put(r, pos, &b, v.u.s.p + i, k));
        }
    } else {
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i) JTRY(ds_jinja_buf_put(r, pos, &b, sep.p, sep.n));
            JTRY(ds_jinja_value_join_item(r, pos, v.u.a->items[i], &b));
        }
    }
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

static int filter_plain(jr *r, const jnode *f, jv v, jv *out) {
    uint32_t pos = f->pos;
    jstr name = f->s;
    if (jstr_eq(name, "safe")) {
        *out = v;
        return J_OK;
    }
    if (jstr_eq(name, "tojson")) {
        jjson_opts o = {.undefined_as_null = 1};
        return to_json_str(r, pos, v, &o, out);
    }
    switch (v.k) {
    case JV_ARRAY: {
        jarr *a = v.u.a;
        if (jstr_eq(name, "list")) *out = v;
        else if (jstr_eq(name, "first")) *out = a->n ? a->items[0] : jv_undef();
        else if (jstr_eq(name, "last")) *out = a->n ? a->items[a->n - 1] : jv_undef();
        else if (jstr_eq(name, "length")) *out = jv_int((double)a->n);
        else if (jstr_eq(name, "reverse")) {
            JTRY(ds_jinja_value_new_array(r, pos, a->n, out));
            for (size_t i = 0; i < a->n; i++) out->u.a->items[i] = a->items[a->n - 1 - i];
        } else if (jstr_eq(name, "sort")) {
            JTRY(copy_array(r, pos, a, out));
            sort_opts so = {0, 0, -1, NULL};
            return sort_values(r, pos, out->u.a->items, out->u.a->n, &so);
        } else if (jstr_eq(name, "join")) return join_values(r, pos, v, mkstr(""), out);
        else if (jstr_eq(name, "string")) {
            jjson_opts o = {0};
            return to_json_str(r, pos, v, &o, out);
        } else if (jstr_eq(name, "unique")) {
            JTRY(ds_jinja_value_new_array(r, pos, a->n, out));
            size_t m = 0;
            for (size_t i = 0; i < a->n; i++) {
                int seen = 0;
                for (size_t j = 0; j < m && !seen; j++) seen = ds_jinja_value_same_value_zero(out->u.a->items[j], a->items[i]);
                r->steps += m;
                if (r->steps > r->lim.max_steps) return ds_jinja_fail(r, pos, DS_ENOMEM, "too many evaluation steps");
                if (!seen) out->u.a->items[m++] = a->items[i];
            }
            out->u.a->n = m;
        } else return unknown_filter(r, pos, name, v);
        return J_OK;
    }
    case JV_STR: {
        jstr s = v.u.s;
        if (jstr_eq(name, "length")) {
            JTRY(ds_jinja_charge_scan(r, pos, s.n));
            *out = jv_int((double)ds_jinja_str_utf16_len(s));
        }
        else if (jstr_eq(name, "upper") || jstr_eq(name, "lower")) return ds_jinja_str_case_map(r, pos, s, jstr_eq(name, "upper"), out);
        else if (jstr_eq(name, "title")) return str_title(r, pos, s, out);
        else if (jstr_eq(name, "capitalize")) return str_capitalize(r, pos, s, out);
        else if (jstr_eq(name, "trim")) {
            JTRY(ds_jinja_charge_scan(r, pos, s.n));
            jstr t = ds_jinja_str_trim(s, 1, 1);
            *out = jv_str(t.p, t.n);
        } else if (jstr_eq(name, "indent")) return indent_lines(r, pos, s, 4, 0, 0, out);
        else if (jstr_eq(name, "join") || jstr_eq(name, "string")) *out = v;
        else if (jstr_eq(name, "int")) {
            double x = js_parse_number(s, 1);
            *out = jv_int(isnan(x) ? 0 : x);
        } else if (jstr_eq(name, "float")) {
            double x = js_parse_number(s, 0);
            *out = jv_float(isnan(x) ? 0 : x);
        } else return unknown_filter(r, pos, name, v);
        return J_OK;
    }
    case JV_INT:
    case JV_FLOAT:
        if (jstr_eq(name, "abs")) *out = v.k == JV_INT ? jv_int(fabs(v.u.n)) : jv_float(fabs(v.u.n));
        else if (jstr_eq(name, "int")) *out = jv_int(floor(v.u.n));
        else if (jstr_eq(name, "float")) *out = jv_float(v.u.n);
        else if (jstr_eq(name, "string")) return ds_jinja_value_to_rendered_str(r, pos, v, out);
        else return unknown_filter(r, pos, name, v);
        return J_OK;
    case JV_OBJECT:
        if (jstr_eq(name, "items")) return object_items(r, pos, v.u.o, M_ITEMS, out);
        if (jstr_eq(name, "length")) {
            *out = jv_int((double)v.u.o->n);
            return J_OK;
        }
        if (jstr_eq(name, "keys") || jstr_eq(name, "values"))
            return object_items(r, pos, v.u.o, jstr_eq(name, "keys") ? M_KEYS : M_VALUES, out);
        if (jstr_eq(name, "dictsort")) return dictsort(r, pos, v.u.o, NULL, 0, out);
        return unknown_filter(r, pos, name, v);
    case JV_BOOL:
        if (jstr_eq(name, "bool")) *out = v;
        else if (jstr_eq(name, "int")) *out = jv_int(v.u.b);
        else if (jstr_eq(name, "float")) *out = jv_float(v.u.b);
        else if (jstr_eq(name, "string")) *out = jv_str(v.u.b ? "true" : "false", v.u.b ? 4 : 5);
        else return unknown_filter(r, pos, name, v);
        return J_OK;
    default: return unknown_filter(r, pos, name, v);
    }
}

static int filter_tojson(jr *r, uint32_t pos, jv v, const jobj *kw, jv *out) {
    jjson_opts o = {.undefined_as_null = 1};
    const jv *x;
    if (kw && (x = ds_jinja_obj_get(kw, "indent", 6)) && x->k != JV_NULL) {
        if (x->k != JV_INT) return ds_jinja_fail(r, pos, DS_EINVAL, "tojson: indent must be an integer");
        if (x->u.n < 0 || x->u.n > 1000) return ds_jinja_fail(r, pos, DS_EINVAL, "tojson: indent out of range");
        o.indent = (int)x->u.n;
    }
    if (kw && (x = ds_jinja_obj_get(kw, "ensure_ascii", 12))) {
        if (x->k != JV_BOOL) return ds_jinja_fail(r, pos, DS_EINVAL, "tojson: ensure_ascii must be a boolean");
        o.ensure_ascii = x->u.b;
    }
    if (kw && (x = ds_jinja_obj_get(kw, "sort_keys", 9))) {
        if (x->k != JV_BOOL) return ds_jinja_fail(r, pos, DS_EINVAL, "tojson: sort_keys must be a boolean");
        o.sort_keys = x->u.b;
    }
    if (kw && (x = ds_jinja_obj_get(kw, "separators", 10)) && x->k != JV_NULL) {
        if (x->k != JV_ARRAY || x->u.a->n != 2 || x->u.a->items[0].k != JV_STR || x->u.a->items[1].k != JV_STR)
            return ds_jinja_fail(r, pos, DS_EINVAL, "tojson: separators must be a pair of strings");
        o.item_sep = x->u.a->items[0].u.s;
        o.key_sep = x->u.a->items[1].u.s;
    }
    return to_json_str(r, pos, v, &o, out);
}

static int filter_selectattr(jr *r, const jnode *f, jv v, const jv *args, int n, jv *out) {
    uint32_t pos = f->pos;
    int select = jstr_eq(f->s, "selectattr");
    for (size_t i = 0; i < v.u.a->n; i++)
        if (v.u.a->items[i].k != JV_OBJECT && v.u.a->items[i].k != JV_NS)
            return ds_jinja_fail(r, pos, DS_EINVAL, "%s only works on a list of dicts", select ? "selectattr" : "rejectattr");
    for (int i = 0; i < f->l1.n; i++)
        if (f->l1.v[i]->kind != N_STR)
            return ds_jinja_fail(r, pos, DS_EINVAL, "the arguments of %s must be string literals", select ? "selectattr" : "rejectattr");
    if (n < 1) return ds_jinja_fail(r, pos, DS_EINVAL, "selectattr needs an attribute name");
    JTRY(ds_jinja_value_new_array(r, pos, v.u.a->n, out));
    JTRY(ds_jinja_charge_scan(r, pos, v.u.a->n * 8));
    size_t m = 0;
    for (size_t i = 0; i < v.u.a->n; i++) {
        jv item = v.u.a->items[i];
        const jv *a = ds_jinja_obj_get(item.u.o, args[0].u.s.p, args[0].u.s.n);
        int ok = 0;
        if (a) {
            if (n > 1) {
                jv targs[2] = {*a, n > 2 ? args[2] : jv_undef()};
                JTRY(ds_jinja_builtin_test(r, f, args[1].u.s.p, args[1].u.s.n, targs, n > 2 ? 2 : 1, &ok));
            } else {
                ok = ds_jinja_value_truthy(*a);
            }
        }
        if (ok == select) out->u.a->items[m++] = item;
    }
    out->u.a->n = m;
    return J_OK;
}

static int filter_call(jr *r, const jnode *f, jv v, jv *args, int n_pos, const jobj *kw, jv *out) {
    uint32_t pos = f->pos;
    jstr name = f->s;
    if (jstr_eq(name, "tojson")) return filter_tojson(r, pos, v, kw, out);
    if (jstr_eq(name, "join")) {
        if (v.k != JV_STR && v.k != JV_ARRAY) return unknown_filter(r, pos, name, v);
        const jv *sep = arg_or_kw(args, n_pos, 0, kw, "separator");
        if (sep && sep->k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "join: the separator must be a string");
        return join_values(r, pos, v, sep ? sep->u.s : mkstr(""), out);
    }
    if (jstr_eq(name, "int") || jstr_eq(name, "float")) {
        int is_int = jstr_eq(name, "int");
        const jv *def = arg_or_kw(args, n_pos, 0, kw, "default");
        if (v.k == JV_STR) {
            double x = js_parse_number(v.u.s, is_int);
            if (isnan(x)) *out = def ? *def : is_int ? jv_int(0) : jv_float(0);
            else *out = is_int ? jv_int(x) : jv_float(x);
        } else if (v.k == JV_INT || v.k == JV_FLOAT) {
            *out = v;   /* as runtime.ts: a float stays a float under int() */
        } else if (v.k == JV_BOOL) {
            *out = is_int ? jv_int(v.u.b) : jv_float(v.u.b);
        } else {
            return unknown_filter(r, pos, name, v);
        }
        return J_OK;
    }
    if (jstr_eq(name, "default")) {
        jv def = n_pos > 0 ? args[0] : jv_str("", 0);
        const jv *boolean = arg_or_kw(args, n_pos, 1, kw, "boolean");
        if (boolean && boolean->k != JV_BOOL) return ds_jinja_fail(r, pos, DS_EINVAL, "default: the flag must be a boolean");
        *out = v.k == JV_UNDEF || (boolean && boolean->u.b && !ds_jinja_value_truthy(v)) ? def : v;
        return J_OK;
    }
    if (v.k == JV_ARRAY) {
        if (jstr_eq(name, "sort")) {
            const jv *rev = arg_or_kw(args, n_pos, 0, kw, "reverse");
            const jv *cs = arg_or_kw(args, n_pos, 1, kw, "case_sensitive");
            const jv *attr = arg_or_kw(args, n_pos, 2, kw, "attribute");
            if ((rev && rev->k != JV_BOOL) || (cs && cs->k != JV_BOOL))
                return ds_jinja_fail(r, pos, DS_EINVAL, "sort: reverse and case_sensitive must be booleans");
            if (attr && attr->k != JV_STR && attr->k != JV_INT && attr->k != JV_NULL)
                return ds_jinja_fail(r, pos, DS_EINVAL, "sort: attribute must be a string, an integer or none");
            char *path = NULL;
            if (attr && attr->k != JV_NULL) {
                jbuf b = {0};
                JTRY(ds_jinja_value_raw_string(r, pos, *attr, &b));
                JTRY(ds_jinja_buf_putc(r, pos, &b, '\0'));
                path = b.p;
            }
            JTRY(copy_array(r, pos, v.u.a, out));
            sort_opts so = {cs ? cs->u.b : 0, rev ? rev->u.b : 0, -1, path};
            return sort_values(r, pos, out->u.a->items, out->u.a->n, &so);
        }
        if (jstr_eq(name, "selectattr") || jstr_eq(name, "rejectattr")) {
            jv all[3];
            int n = 0;
            for (int i = 0; i < n_pos && n < 3; i++) all[n++] = args[i];
            return filter_selectattr(r, f, v, all, n, out);
        }
        if (jstr_eq(name, "map")) {
            const jv *attr = kw ? ds_jinja_obj_get(kw, "attribute", 9) : NULL;
            if (!attr) return ds_jinja_fail(r, pos, DS_EINVAL, "map() without attribute= is not supported");
            if (attr->k != JV_STR) return ds_jinja_fail(r, pos, DS_EINVAL, "map: attribute must be a string");
            const jv *def = ds_jinja_obj_get(kw, "default", 7);
            jbuf b = {0};
            JTRY(ds_jinja_buf_put(r, pos, &b, attr->u.s.p, attr->u.s.n));
            JTRY(ds_jinja_buf_putc(r, pos, &b, '\0'));
            JTRY(ds_jinja_value_new_array(r, pos, v.u.a->n, out));
            for (size_t i = 0; i < v.u.a->n; i++) {
                jv item = v.u.a->items[i];
                if (item.k != JV_OBJECT && item.k != JV_NS) return ds_jinja_fail(r, pos, DS_EINVAL, "map: the items must be dicts");
                jv got = attribute_path(item, b.p);
                out->u.a->items[i] = got.k == JV_UNDEF && def ? *def : got;
            }
            return J_OK;
        }
        return unknown_filter(r, pos, name, v);
    }
    if (v.k == JV_STR) {
        if (jstr_eq(name, "indent")) {
            const jv *width = arg_or_kw(args, n_pos, 0, kw, "width");
            const jv *first = arg_or_kw(args, n_pos, 1, kw, "first");
            const jv *blank = arg_or_kw(args, n_pos, 2, kw, "blank");
            if (width && width->k != JV_INT) return ds_jinja_fail(r, pos, DS_EINVAL, "indent: width must be an integer");
            return indent_lines(r, pos, v.u.s, width ? width->u.n : 4, first && raw_truthy(*first),
                                blank && raw_truthy(*blank), out);
        }
        if (jstr_eq(name, "replace")) {
            /* runtime.ts always passes the keyword arguments as one more argument */
            jv all[8];
            int n = 0;
            for (int i = 0; i < n_pos && n < 7; i++) all[n++] = args[i];
            jv kwv;
            if (kw) {
                kwv.k = JV_OBJECT;
                kwv.u.o = (jobj *)kw;
            } else {
                JTRY(ds_jinja_value_new_object(r, pos, 0, JV_OBJECT, &kwv));
                kwv.u.o->kwargs = 1;
            }
            all[n++] = kwv;
            jfunc fn = {.kind = JF_METHOD, .id = M_REPLACE, .self = v};
            return ds_jinja_builtin_call(r, pos, &fn, all, n, out);
        }
        return unknown_filter(r, pos, name, v);
    }
    if (v.k == JV_OBJECT) {
        for (size_t i = 0; i < sizeof OBJECT_METHODS / sizeof OBJECT_METHODS[0]; i++)
            if (jstr_eq(name, OBJECT_METHODS[i])) {
                jv all[9];
                int n = 0;
                for (int k = 0; k < n_pos && n < 8; k++) all[n++] = args[k];
                if (kw && kw->n) {
                    all[n].k = JV_OBJECT;
                    all[n++].u.o = (jobj *)kw;
                }
                jfunc fn = {.kind = JF_METHOD, .id = M_GET + (int)i, .self = v};
                return ds_jinja_builtin_call(r, pos, &fn, all, n, out);
            }
    }
    return unknown_filter(r, pos, name, v);
}

int ds_jinja_builtin_filter(jr *r, const jnode *f, jv v, jscope *s, jv *out) {
    if (!f->flag) return filter_plain(r, f, v, out);
    jv *args;
    int n;
    jobj *kw;
    JTRY(ds_jinja_eval_call_args(r, &f->l1, s, &args, &n, &kw));
    return filter_call(r, f, v, args, n, kw, out);
}
