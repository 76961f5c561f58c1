/* tool_grammar.c - see tool_grammar.h.
 *
 * Rules: root, call, tN (function N of tools), tN-args, tN-pK (its K-th
 * property), tN-pK-v (that property's value, with the schema compiler's
 * helpers named tN-pK-v-...), xml-text (a raw string value), json-* (free
 * JSON arguments). */
#include "server/tool_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "server/json_text.h"
#include "server/output_grammar.h"
#include "common/strbuf.h"

ds_call_form ds_call_form_of_template(const char *src) {
    if (src && !strstr(src, "<function=") && strstr(src, "<tool_call>") && strstr(src, "\"name\"")) return DS_CALL_JSON;
    return DS_CALL_XML;
}

static const json_t *function_of(const json_t *tool) {
    const json_t *f = json_is_object(tool) ? json_object_get(tool, "function") : NULL;
    return json_is_object(f) ? f : NULL;
}

/* appends rules from a compiler (text malloc'd), owning it */
static void append_rules(ds_sb *b, char *rules) {
    ds_sb_puts(b, rules);
    if (b->n && b->s[b->n - 1] != '\n') ds_sb_puts(b, "\n");
    free(rules);
}

/* JSON Schema's date, time, date-time, uuid and email as regular expressions over the raw text */
static const char *format_regex(const char *f) {
    static const char *const FORMATS[][2] = {
        {"date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
        {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
        {"date-time", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                      "(\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
        {"email", "[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+"},
    };
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
        if (!strcmp(f, FORMATS[i][0])) return FORMATS[i][1];
    return NULL;
}

static int is_annotation(const char *k) {
    static const char *const A[] = {"type", "description", "title", "default", "examples", "$comment", "deprecated",
                                    "readOnly", "writeOnly"};
    for (size_t i = 0; i < sizeof A / sizeof *A; i++)
        if (!strcmp(k, A[i])) return 1;
    return 0;
}

/* 1 when every value of an enum / const is a string */
static int all_strings(const json_t *s) {
    const json_t *en = json_object_get(s, "enum"), *c = json_object_get(s, "const");
    if (c) return json_is_string(c);
    if (!json_is_array(en) || !json_array_size(en)) return 0;
    size_t i;
    const json_t *x;
    json_array_foreach(en, i, x) if (!json_is_string(x)) return 0;
    return 1;
}

/* whether the schema's type is exactly "string" (or it has none and lists strings only) */
static int string_only(const json_t *s) {
    const json_t *t = json_object_get(s, "type");
    if (json_is_string(t)) return ds_json_str_is(t, "string");
    if (json_is_array(t)) return json_array_size(t) == 1 && ds_json_str_is(json_array_get(t, 0), "string");
    return !t && all_strings(s);
}

/* "string" among several types: the schema with the others, for the JSON part of the value */
static json_t *without_string(const json_t *s) {
    const json_t *t = json_object_get(s, "type");
    if (!json_is_array(t)) return NULL;
    int has = 0;
    size_t i;
    const json_t *x;
    json_array_foreach(t, i, x) has |= ds_json_str_is(x, "string");
    if (!has) return NULL;
    json_t *copy = json_deep_copy(s), *types = json_array();
    json_array_foreach(t, i, x) if (!ds_json_str_is(x, "string")) json_array_append(types, (json_t *)x);
    json_object_set_new(copy, "type", types);
    /* string keywords do not apply to the other types */
    static const char *const STRING_KW[] = {"pattern", "format", "minLength", "maxLength"};
    for (size_t k = 0; k < sizeof STRING_KW / sizeof *STRING_KW; k++) json_object_del(copy, STRING_KW[k]);
    return copy;
}

/* The raw text of a string-typed XML value: rule `name`. where: the property's path, for errors. */
static ds_status raw_string_rule(ds_sb *b, const char *name, const json_t *s, const char *where, ds_err *e) {
    const json_t *en = json_object_get(s, "enum"), *c = json_object_get(s, "const");
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    const json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_annotation(k) || !strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "pattern") ||
            !strcmp(k, "format") || !strcmp(k, "minLength") || !strcmp(k, "maxLength"))
            continue;
        return ds_fail(e, DS_EUNSUPPORTED, "%s: '%s' is not supported for a string parameter in the XML call form",
                       where, k);
    }
    int n_kinds = (en || c) + !!pat + !!fmt + (mn || mx);
    if (n_kinds > 1)
        return ds_fail(e, DS_EUNSUPPORTED, "%s: a string parameter in the XML call form takes one of enum / const, "
                       "pattern, format or minLength / maxLength, not several", where);
    if (en || c) {
        if (!all_strings(s)) return ds_fail(e, DS_EUNSUPPORTED, "%s: enum / const of a string must list strings", where);
        ds_sb_printf(b, "%s ::= ", name);
        if (c) {
            ds_gbnf_literal(b, json_string_value(c), json_string_length(c));
        } else {
            size_t i;
            const json_t *x;
            json_array_foreach(en, i, x) {
                if (i) ds_sb_puts(b, " | ");
                ds_gbnf_literal(b, json_string_value(x), json_string_length(x));
            }
        }
        ds_sb_puts(b, "\n");
        return DS_OK;
    }
    if (pat || fmt) {
        const char *re = NULL;
        size_t rl = 0;
        if (pat) {
            if (!json_is_string(pat)) return ds_fail(e, DS_EINVAL, "%s: 'pattern' must be a string", where);
            re = json_string_value(pat), rl = json_string_length(pat);
        } else {
            if (!json_is_string(fmt) || !(re = format_regex(json_string_value(fmt))))
                return ds_fail(e, DS_EUNSUPPORTED, "%s: format '%s' is not supported (date, time, date-time, uuid, "
                               "email)", where, json_is_string(fmt) ? json_string_value(fmt) : "?");
            rl = strlen(re);
        }
        char *rules = NULL;
        ds_status st = ds_regex_to_gbnf(re, rl, name, 0, &rules, e);
        if (st) {
            ds_err_prefix(e, "%s: %s", where, pat ? "pattern" : "format");
            return st;
        }
        append_rules(b, rules);
        return DS_OK;
    }
    if (mn || mx) {
        double lo = mn ? json_number_value(mn) : 0, hi = mx ? json_number_value(mx) : -1;
        if ((mn && (!json_is_integer(mn) || lo < 0)) || (mx && (!json_is_integer(mx) || hi < lo)))
            return ds_fail(e, DS_EINVAL, "%s: minLength / maxLength must be integers, minLength <= maxLength", where);
        /* a length-bounded raw value holds no '<' at all: simpler than "no </" and still any word */
        if (mx) ds_sb_printf(b, "%s ::= [^<]{%.0f,%.0f}\n", name, lo, hi);
        else ds_sb_printf(b, "%s ::= [^<]{%.0f,}\n", name, lo);
        return DS_OK;
    }
    ds_sb_printf(b, "%s ::= xml-text\n", name);
    return DS_OK;
}

/* the value of one XML parameter: rule `name` */
static ds_status xml_value_rule(ds_sb *b, const char *name, const json_t *s, const ds_schema_options *so,
                                const char *where, ds_err *e) {
    if (!json_is_object(s)) {
        if (json_is_true(s)) {   /* any value: raw text, which the parser reads as JSON when it is */
            ds_sb_printf(b, "%s ::= xml-text\n", name);
            return DS_OK;
        }
        return ds_fail(e, DS_EINVAL, "%s: a property schema must be an object", where);
    }
    if (string_only(s)) return raw_string_rule(b, name, s, where, e);
    json_t *rest = without_string(s);
    char sub[96], rules_name[96];
    snprintf(rules_name, sizeof rules_name, "%s-j", name);
    char *rules = NULL;
    ds_status st = ds_json_schema_to_gbnf(rest ? rest : s, rules_name, so, &rules, e);
    if (st) {
        json_decref(rest);
        ds_err_prefix(e, "%s", where);
        return st;
    }
    append_rules(b, rules);
    if (rest) {
        json_t *str = json_deep_copy(s);
        json_object_set_new(str, "type", json_string("string"));
        json_object_del(str, "enum");   /* an enum's strings apply; its other values went to the JSON part */
        if (json_object_get(s, "enum")) {
            json_t *strs = json_array();
            size_t i;
            const json_t *x;
            json_array_foreach(json_object_get(s, "enum"), i, x) if (json_is_string(x)) json_array_append(strs, (json_t *)x);
            json_object_set_new(str, "enum", strs);
        }
        snprintf(sub, sizeof sub, "%s-s", name);
        st = raw_string_rule(b, sub, str, where, e);
        json_decref(str);
        json_decref(rest);
        if (st) return st;
        ds_sb_printf(b, "%s ::= %s | %s\n", name, sub, rules_name);
    } else {
        ds_sb_printf(b, "%s ::= %s\n", name, rules_name);
    }
    return DS_OK;
}

static int is_required(const json_t *req, const char *key) {
    size_t i;
    const json_t *x;
    json_array_foreach(req, i, x) if (ds_json_str_is(x, key)) return 1;
    return 0;
}

/* tN-args for the XML form; 0 when the function takes no parameters (no rule written) */
static ds_status xml_args(ds_sb *b, int n, const json_t *params, const ds_schema_options *so, const char *where,
                          int *has_args, ds_err *e) {
    *has_args = 0;
    if (!params) return DS_OK;
    const json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    const json_t *type = json_object_get(params, "type");
    if (type && !ds_json_str_is(type, "object"))
        return ds_fail(e, DS_EUNSUPPORTED, "%s: the parameters must be of type object", where);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)params, k, v) {
        if (is_annotation(k) || !strcmp(k, "properties") || !strcmp(k, "required") ||
            (!strcmp(k, "additionalProperties") && (json_is_false(v) || (json_is_true(v) && !so->strict))) ||
            !strcmp(k, "$schema") || !strcmp(k, "strict"))
            continue;
        return ds_fail(e, DS_EUNSUPPORTED, "%s: '%s' is not supported for the parameters of the XML call form", where, k);
    }
    if (props && !json_is_object(props)) return ds_fail(e, DS_EINVAL, "%s.properties must be an object", where);
    if (!json_object_size(props)) return DS_OK;
    ds_sb line = {0};
    ds_sb_printf(&line, "t%d-args ::=", n);
    int i = 0;
    json_object_foreach((json_t *)props, k, v) {
        char rule[64], val[64], pw[200];
        snprintf(rule, sizeof rule, "t%d-p%d", n, i);
        snprintf(val, sizeof val, "t%d-p%d-v", n, i);
        snprintf(pw, sizeof pw, "%s.properties.%.100s", where, k);
        if (!*k || strpbrk(k, "<>\n\r\t ")) {
            ds_sb_free(&line);
            return ds_fail(e, DS_EUNSUPPORTED, "%s: this name cannot be written in the XML call form", pw);
        }
        ds_status st = xml_value_rule(b, val, v, so, pw, e);
        if (st) {
            ds_sb_free(&line);
            return st;
        }
        ds_sb_printf(b, "%s ::= \"<parameter=", rule);
        /* the name inside the literal: escaped as a literal's body */
        ds_sb lit = {0};
        ds_gbnf_literal(&lit, k, strlen(k));
        if (lit.s) ds_sb_append(b, lit.s + 1, lit.n - 2);
        ds_sb_free(&lit);
        ds_sb_printf(b, ">\\n\" %s \"\\n</parameter>\\n\"\n", val);
        ds_sb_printf(&line, " %s%s", rule, is_required(req, k) ? "" : "?");
        i++;
    }
    ds_sb_puts(&line, "\n");
    ds_sb_append(b, line.s, line.n);
    ds_sb_free(&line);
    *has_args = 1;
    return DS_OK;
}

/* tN-args for the JSON form */
static ds_status json_args(ds_sb *b, int n, const json_t *params, const ds_schema_options *so, const char *where,
                           ds_err *e) {
    if (!params) {
        ds_sb_printf(b, "t%d-args ::= \"{}\"\n", n);
        return DS_OK;
    }
    char name[32], *rules = NULL;
    snprintf(name, sizeof name, "t%d-args", n);
    ds_status st = ds_json_schema_to_gbnf(params, name, so, &rules, e);
    if (st) {
        ds_err_prefix(e, "%s", where);
        return st;
    }
    append_rules(b, rules);
    return DS_OK;
}

/* Appends the rule tN for one function. free_args: its arguments are any (a schema that did not compile). */
static ds_status function_rule(const ds_tool_grammar_params *p, ds_sb *b, int n, const json_t *f, int free_args,
                               ds_err *e) {
    const json_t *nm = json_object_get(f, "name"), *params = json_object_get(f, "parameters");
    int strict = json_is_true(json_object_get(f, "strict"));
    ds_schema_options so = {.strict = strict, .max_space = p->max_space};
    char where[64];
    snprintf(where, sizeof where, "tools[%d].function.parameters", n);
    const char *name = json_string_value(nm);
    if (p->form == DS_CALL_XML) {
        if (!*name || strpbrk(name, "<>\n\r\t "))
            return ds_fail(e, DS_EUNSUPPORTED, "tools[%d].function.name '%s' cannot be written in the XML call form", n, name);
        int has_args = 0;
        if (free_args) {
            ds_sb_printf(b, "t%d-args ::= ( \"<parameter=\" [^<>\\n]+ \">\\n\" xml-text \"\\n</parameter>\\n\" )*\n", n);
            has_args = 1;
        } else {
            ds_status st = xml_args(b, n, params, &so, where, &has_args, e);
            if (st) return st;
        }
        ds_sb_printf(b, "t%d ::= ", n);
        ds_sb lit = {0};
        ds_sb_puts(&lit, "<function=");
        ds_sb_puts(&lit, name);
        ds_sb_puts(&lit, ">\n");
        ds_gbnf_literal(b, lit.s, lit.n);
        ds_sb_free(&lit);
        if (has_args) ds_sb_printf(b, " t%d-args", n);
        ds_sb_puts(b, " \"</function>\"\n");
        return DS_OK;
    }
    if (free_args) {
        ds_sb_printf(b, "t%d-args ::= json-object\n", n);
    } else {
        ds_status st = json_args(b, n, params, &so, where, e);
        if (st) return st;
    }
    char *quoted = ds_json_dump(nm);
    if (!quoted) return ds_fail(e, DS_ENOMEM, "out of memory writing a tool grammar");
    ds_sb lit = {0};
    ds_sb_puts(&lit, "{\"name\": ");
    ds_sb_puts(&lit, quoted);
    ds_sb_puts(&lit, ", \"arguments\": ");
    free(quoted);
    ds_sb_printf(b, "t%d ::= ", n);
    ds_gbnf_literal(b, lit.s, lit.n);
    ds_sb_free(&lit);
    ds_sb_printf(b, " t%d-args \"}\"\n", n);
    return DS_OK;
}

ds_status ds_tool_grammar(const ds_tool_grammar_params *p, char **gbnf, size_t *len, ds_err *e) {
    *gbnf = NULL;
    ds_sb b = {0}, alts = {0};
    int n_alts = 0, any_free = 0;
    size_t i;
    const json_t *t;
    json_array_foreach(p->tools, i, t) {
        const json_t *f = function_of(t);
        const char *name = json_string_value(f ? json_object_get(f, "name") : NULL);
        if (!name || (p->only && strcmp(p->only, name))) continue;
        size_t mark = b.n;
        ds_status st = function_rule(p, &b, (int)i, f, 0, e);
        if (st == DS_EUNSUPPORTED || st == DS_EINVAL) {
            if (json_is_true(json_object_get(f, "strict"))) goto fail;
            b.n = mark;   /* not strict: the call is forced, its arguments free */
            if (b.s) b.s[b.n] = '\0';
            st = function_rule(p, &b, (int)i, f, 1, e);
            any_free = 1;
        }
        if (st) goto fail;
        ds_sb_printf(&alts, "%st%zu", n_alts++ ? " | " : "", i);
    }
    if (!n_alts) {
        ds_fail(e, DS_EINVAL, "tool_choice: no function in 'tools' to call%s%s", p->only ? " named " : "",
                p->only ? p->only : "");
        goto fail;
    }
    ds_sb head = {0};
    ds_sb_puts(&head, "root ::= ");
    if (p->lead_space > 0) ds_sb_printf(&head, "[ \\t\\n\\r]{0,%d} ", p->lead_space);
    ds_sb_puts(&head, p->parallel ? "call ( \"\\n\" call )*\n" : "call\n");
    ds_sb_printf(&head, "call ::= \"<tool_call>\\n\" ( %s ) \"\\n</tool_call>\"\n", alts.s);
    if (p->form == DS_CALL_XML)
        /* raw text that never holds "</": runs of '<' are followed by anything but '/' */
        ds_sb_puts(&head, "xml-text ::= ( [^<] | \"<\"+ [^</] )* \"<\"*\n");
    if (any_free && p->form == DS_CALL_JSON) ds_gbnf_json_rules(&head, "json", p->max_space, 1);
    ds_sb_append(&head, b.s ? b.s : "", b.n);
    ds_sb_free(&b);
    ds_sb_free(&alts);
    if (head.oom || !head.s) {
        ds_sb_free(&head);
        return ds_fail(e, DS_ENOMEM, "out of memory writing a tool grammar");
    }
    *gbnf = head.s;
    if (len) *len = head.n;
    return DS_OK;
fail:
    ds_sb_free(&b);
    ds_sb_free(&alts);
    return e->code ? e->code : DS_EINVAL;
}

char *ds_tool_grammar_key(const ds_tool_grammar_params *p, size_t *len) {
    ds_sb b = {0};
    ds_sb_printf(&b, "tool:%d:%d:%d:%d:", (int)p->form, p->parallel, p->lead_space, p->max_space);
    if (p->only) ds_sb_append(&b, p->only, strlen(p->only) + 1);   /* the NUL ends the name */
    else ds_sb_puts(&b, "*:");
    char *t = ds_json_dump(p->tools);
    if (t) ds_sb_puts(&b, t);
    free(t);
    if (!t || b.oom) {
        ds_sb_free(&b);
        return NULL;
    }
    *len = b.n;
    return b.s;
}
