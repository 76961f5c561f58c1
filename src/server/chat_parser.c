/* chat_parser.c - see chat_parser.h. */
#include "server/chat_parser.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_text.h"

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
static const char CALL_OPEN[] = "<tool_call>", CALL_CLOSE[] = "</tool_call>";
enum { STATE_ENDED = 3 };   /* after states 0 content, 1 reasoning, 2 inside a tool call */

void ds_chat_parser_init(ds_chat_parser *p, int start_in_reasoning, int parse_tools) {
    *p = (ds_chat_parser){.state = start_in_reasoning ? 1 : 0, .parse_tools = parse_tools, .at_start = 1};
}

void ds_chat_parser_limit_calls(ds_chat_parser *p, int max_calls) { p->max_calls = max_calls; }

void ds_chat_parser_strip_blanks(ds_chat_parser *p) { p->strip_blanks = 1; }

int ds_chat_parser_ended(const ds_chat_parser *p) { return p->state == STATE_ENDED; }

void ds_chat_parser_free(ds_chat_parser *p) {
    ds_sb_free(&p->hold);
    ds_sb_free(&p->ws);
}

static long find(const char *h, size_t hn, const char *nd) {
    size_t nn = strlen(nd);
    for (size_t i = 0; i + nn <= hn; i++)
        if (!memcmp(h + i, nd, nn)) return (long)i;
    return -1;
}

static long find_after(const char *h, size_t hn, const char *nd, size_t from) {
    if (from > hn) return -1;
    long at = find(h + from, hn - from, nd);
    return at < 0 ? -1 : at + (long)from;
}

/* the body of a call in Qwen3's JSON form (it starts with '{') */
static int json_body(const char *h, size_t n) {
    size_t i = 0;
    while (i < n && isspace((unsigned char)h[i])) i++;
    return i < n && h[i] == '{';
}

/* bytes at the end of h that are a proper prefix of tag */
static size_t partial(const char *h, size_t hn, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < hn ? tl - 1 : hn; k > 0; k--)
        if (!memcmp(h + hn - k, tag, k)) return k;
    return 0;
}

static int all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

static void content(ds_chat_parser *p, const char *s, size_t n, ds_part_fn fn, void *user) {
    if (!n) return;
    /* whitespace waits only where a tool call may still come (an answer that is only calls has
     * no content); without tools it is content like any other, sent as it comes */
    if (p->parse_tools && all_space(s, n)) {
        ds_sb_append(&p->ws, s, n);
        return;
    }
    if (p->ws.n) {
        fn(user, DS_PART_CONTENT, p->ws.s, p->ws.n, NULL);
        ds_sb_clear(&p->ws);
    }
    fn(user, DS_PART_CONTENT, s, n, NULL);
}

static void run(ds_chat_parser *p, int final, ds_part_fn fn, void *user) {
    for (;;) {
        const char *h = p->hold.s ? p->hold.s : "";
        size_t hn = p->hold.n;
        if (p->state == STATE_ENDED) {
            ds_sb_clear(&p->hold);
            return;
        }
        if (p->state == 0 && p->at_start) {   /* a leading <think> opens the reasoning */
            if (hn < sizeof THINK_OPEN - 1 && !memcmp(h, THINK_OPEN, hn) && !final) return;
            p->at_start = 0;
            if (hn >= sizeof THINK_OPEN - 1 && !memcmp(h, THINK_OPEN, sizeof THINK_OPEN - 1)) {
                ds_sb_consume(&p->hold, sizeof THINK_OPEN - 1);
                p->state = 1;
                continue;
            }
        }
        if (!hn) return;
        if (p->state == 1) {
            p->at_start = 0;
            long at = find(h, hn, THINK_CLOSE);
            if (at >= 0) {
                if (at) fn(user, DS_PART_REASONING, h, (size_t)at, NULL);
                ds_sb_consume(&p->hold, (size_t)at + sizeof THINK_CLOSE - 1);
                p->state = 0;
                p->strip_newlines = 1;
                continue;
            }
            size_t keep = final ? 0 : partial(h, hn, THINK_CLOSE);
            if (hn - keep) fn(user, DS_PART_REASONING, h, hn - keep, NULL);
            ds_sb_consume(&p->hold, hn - keep);
            return;
        }
        if (p->state == 0) {
            if (p->strip_newlines) {
                size_t k = 0;
                while (k < hn && (h[k] == '\n' || h[k] == '\r' || (p->strip_blanks && (h[k] == ' ' || h[k] == '\t')))) k++;
                ds_sb_consume(&p->hold, k);
                if (k == hn) return;
                p->strip_newlines = 0;
                continue;
            }
            long at = p->parse_tools ? find(h, hn, CALL_OPEN) : -1;
            if (at >= 0) {
                content(p, h, (size_t)at, fn, user);
                ds_sb_consume(&p->hold, (size_t)at + sizeof CALL_OPEN - 1);
                p->state = 2;
                continue;
            }
            size_t keep = final || !p->parse_tools ? 0 : partial(h, hn, CALL_OPEN);
            content(p, h, hn - keep, fn, user);
            ds_sb_consume(&p->hold, hn - keep);
            return;
        }
        /* inside a tool call */
        long at = find(h, hn, CALL_CLOSE);
        if (at < 0) {
            if (final) {   /* unclosed: what the model wrote is returned as content */
                content(p, CALL_OPEN, sizeof CALL_OPEN - 1, fn, user);
                content(p, h, hn, fn, user);
                ds_sb_clear(&p->hold);
            }
            return;
        }
        json_t *call = ds_tool_call_parse(h, (size_t)at);
        if (!call && json_body(h, (size_t)at)) {
            /* a JSON body may hold "</tool_call>" inside a string: a later one may end it */
            long next = at;
            while (!call && (next = find_after(h, hn, CALL_CLOSE, (size_t)next + 1)) >= 0)
                if ((call = ds_tool_call_parse(h, (size_t)next))) at = next;
            if (!call && !final) return;
        }
        if (call) {
            ds_sb_clear(&p->ws);
            fn(user, DS_PART_TOOL_CALL, NULL, 0, call);
            json_decref(call);
            p->n_calls++;
        } else {
            content(p, CALL_OPEN, sizeof CALL_OPEN - 1, fn, user);
            content(p, h, (size_t)at + sizeof CALL_CLOSE - 1, fn, user);
        }
        ds_sb_consume(&p->hold, (size_t)at + sizeof CALL_CLOSE - 1);
        p->state = p->max_calls > 0 && p->n_calls >= p->max_calls ? STATE_ENDED : 0;
    }
}

void ds_chat_parser_feed(ds_chat_parser *p, const char *s, size_t n, ds_part_fn fn, void *user) {
    ds_sb_append(&p->hold, s, n);
    run(p, 0, fn, user);
}

void ds_chat_parser_finish(ds_chat_parser *p, ds_part_fn fn, void *user) {
    run(p, 1, fn, user);
    if (p->ws.n && !p->n_calls) fn(user, DS_PART_CONTENT, p->ws.s, p->ws.n, NULL);
    ds_sb_clear(&p->ws);
}

/* --- tool call bodies --- */

static void trim(const char **s, const char **e) {
    while (*s < *e && isspace((unsigned char)**s)) (*s)++;
    while (*e > *s && isspace((unsigned char)(*e)[-1])) (*e)--;
}

static const char *mem_find(const char *s, const char *e, const char *nd) {
    long at = find(s, (size_t)(e - s), nd);
    return at < 0 ? NULL : s + at;
}

/* {"name", "arguments"}: the arguments as JSON text, from an object or as the model wrote them */
static json_t *make_call(const char *name, size_t name_len, const json_t *args_obj, const json_t *args_text) {
    json_t *call = json_object(), *nm = ds_json_textn(name, name_len), *txt = NULL;
    if (args_obj) {
        char *t = ds_json_dump(args_obj);
        txt = t ? json_string(t) : NULL;
        free(t);
    } else {
        txt = json_copy((json_t *)args_text);
    }
    if (!call || !nm || !txt || json_object_set_new(call, "name", nm) || json_object_set_new(call, "arguments", txt)) {
        json_decref(call);
        return NULL;
    }
    return call;
}

static json_t *parse_json_call(const char *s, const char *e) {
    char msg[256];
    json_t *j = ds_json_parse(s, (size_t)(e - s), msg, sizeof msg);
    json_t *name = json_is_object(j) ? json_object_get(j, "name") : NULL;
    json_t *args = json_is_object(j) ? json_object_get(j, "arguments") : NULL;
    if (!args && json_is_object(j)) args = json_object_get(j, "parameters");
    json_t *call = NULL;
    if (json_is_string(name) && json_string_length(name)) {
        const char *nm = json_string_value(name);
        size_t nl = json_string_length(name);
        if (!args) {
            json_t *empty = json_object();
            call = make_call(nm, nl, empty, NULL);
            json_decref(empty);
        } else if (json_is_object(args)) {
            call = make_call(nm, nl, args, NULL);
        } else if (json_is_string(args)) {
            call = make_call(nm, nl, NULL, args);
        }
    }
    json_decref(j);
    return call;
}

static json_t *parse_xml_call(const char *s, const char *e) {
    static const char FN[] = "<function=", FN_END[] = "</function>", PAR[] = "<parameter=", PAR_END[] = "</parameter>";
    if ((size_t)(e - s) < sizeof FN - 1 || memcmp(s, FN, sizeof FN - 1)) return NULL;
    s += sizeof FN - 1;
    const char *gt = memchr(s, '>', (size_t)(e - s));
    if (!gt || gt == s) return NULL;
    const char *name = s;
    size_t name_len = (size_t)(gt - s);
    for (size_t i = 0; i < name_len; i++)
        if (isspace((unsigned char)name[i]) || name[i] == '<') return NULL;
    s = gt + 1;
    const char *fend = e;
    if ((size_t)(e - s) < sizeof FN_END - 1 || memcmp(e - (sizeof FN_END - 1), FN_END, sizeof FN_END - 1)) return NULL;
    fend = e - (sizeof FN_END - 1);
    json_t *args = json_object();
    if (!args) return NULL;
    for (;;) {
        trim(&s, &fend);
        if (s == fend) break;
        if ((size_t)(fend - s) < sizeof PAR - 1 || memcmp(s, PAR, sizeof PAR - 1)) goto bad;
        s += sizeof PAR - 1;
        const char *pgt = memchr(s, '>', (size_t)(fend - s));
        if (!pgt || pgt == s) goto bad;
        json_t *key = ds_json_textn(s, (size_t)(pgt - s));
        const char *vs = pgt + 1, *ve = mem_find(vs, fend, PAR_END);
        if (!key || !ve || json_object_getn(args, json_string_value(key), json_string_length(key))) {
            json_decref(key);
            goto bad;
        }
        s = ve + sizeof PAR_END - 1;
        if (vs < ve && *vs == '\n') vs++;
        if (ve > vs && ve[-1] == '\n') ve--;
        char msg[256];
        json_t *v = ds_json_parse(vs, (size_t)(ve - vs), msg, sizeof msg);   /* numbers, booleans, objects keep their type */
        if (!v || json_is_string(v)) {
            json_decref(v);
            v = ds_json_textn(vs, (size_t)(ve - vs));
        }
        int bad = !v || json_object_setn_new(args, json_string_value(key), json_string_length(key), v);
        json_decref(key);
        if (bad) goto bad;
    }
    json_t *call = make_call(name, name_len, args, NULL);
    json_decref(args);
    return call;
bad:
    json_decref(args);
    return NULL;
}

json_t *ds_tool_call_parse(const char *body, size_t n) {
    const char *s = body, *e = body + n;
    trim(&s, &e);
    if (s == e) return NULL;
    if (*s == '{') return parse_json_call(s, e);
    return parse_xml_call(s, e);
}
