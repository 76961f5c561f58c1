/* output_grammar.c - see output_grammar.h. */
#include "server/output_grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "server/json_text.h"

void ds_gbnf_literal(ds_sb *b, const char *s, size_t n) {
    ds_sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') ds_sb_puts(b, "\\\"");
        else if (c == '\\') ds_sb_puts(b, "\\\\");
        else if (c == '\n') ds_sb_puts(b, "\\n");
        else if (c == '\r') ds_sb_puts(b, "\\r");
        else if (c == '\t') ds_sb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) ds_sb_printf(b, "\\x%02X", c);
        else ds_sb_append(b, (const char *)&s[i], 1);   /* UTF-8 stays as it is: the grammar reads code points */
    }
    ds_sb_puts(b, "\"");
}

void ds_gbnf_json_rules(ds_sb *b, const char *p, int max_space, int no_close_tag) {
    ds_sb_printf(b, "%s-value ::= %s-object | %s-array | %s-string | %s-number | \"true\" | \"false\" | \"null\"\n", p, p,
                 p, p, p);
    ds_sb_printf(b, "%s-object ::= \"{\" %s-ws ( %s-string %s-ws \":\" %s-ws %s-value %s-ws "
                    "( \",\" %s-ws %s-string %s-ws \":\" %s-ws %s-value %s-ws )* )? \"}\"\n",
                 p, p, p, p, p, p, p, p, p, p, p, p, p);
    ds_sb_printf(b, "%s-array ::= \"[\" %s-ws ( %s-value %s-ws ( \",\" %s-ws %s-value %s-ws )* )? \"]\"\n", p, p, p, p,
                 p, p, p);
    if (no_close_tag) {
        /* no raw "</" (runs of '<' go before anything but '/'): the string cannot end the tag around it */
        ds_sb_printf(b, "%s-string ::= \"\\\"\" ( [^\"\\\\<\\x00-\\x1F] | \"<\"+ ( [^\"\\\\</\\x00-\\x1F] | %s-esc ) | "
                        "%s-esc )* \"<\"* \"\\\"\"\n", p, p, p);
    } else {
        ds_sb_printf(b, "%s-string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | %s-esc )* \"\\\"\"\n", p, p);
    }
    ds_sb_printf(b, "%s-esc ::= \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n", p);
    ds_sb_printf(b, "%s-number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n", p);
    if (max_space > 0) ds_sb_printf(b, "%s-ws ::= [ \\t\\n\\r]{0,%d}\n", p, max_space);
    else ds_sb_printf(b, "%s-ws ::= \"\"\n", p);
}

static ds_status take(ds_sb *b, char **gbnf, size_t *len, ds_err *e) {
    if (b->oom || !b->s) {
        ds_sb_free(b);
        return ds_fail(e, DS_ENOMEM, "out of memory writing a grammar");
    }
    *gbnf = b->s;
    if (len) *len = b->n;
    return DS_OK;
}

ds_status ds_output_gbnf(const ds_oai_output *o, char **gbnf, size_t *len, ds_err *e) {
    ds_sb b = {0};
    *gbnf = NULL;
    switch (o->kind) {
    case DS_OUT_JSON_OBJECT:
        /* the answer is the object: nothing may follow it but the end */
        ds_sb_puts(&b, "root ::= json-ws json-object\n");
        ds_gbnf_json_rules(&b, "json", o->max_space, 0);
        return take(&b, gbnf, len, e);
    case DS_OUT_CHOICE: {
        ds_sb_puts(&b, "root ::= ");
        size_t i;
        const json_t *x;
        json_array_foreach(o->value, i, x) {
            if (i) ds_sb_puts(&b, " | ");
            ds_gbnf_literal(&b, json_string_value(x), json_string_length(x));
        }
        ds_sb_puts(&b, "\n");
        return take(&b, gbnf, len, e);
    }
    case DS_OUT_GRAMMAR:
        ds_sb_append(&b, json_string_value(o->value), json_string_length(o->value));
        return take(&b, gbnf, len, e);
    case DS_OUT_REGEX: {
        ds_status st = ds_regex_to_gbnf(json_string_value(o->value), json_string_length(o->value), "root", 0, gbnf, e);
        if (st == DS_OK && len) *len = strlen(*gbnf);
        return st;
    }
    case DS_OUT_SCHEMA: {
        ds_schema_options so = {.strict = o->strict, .max_space = o->max_space};
        ds_status st = ds_json_schema_to_gbnf(o->value, "root", &so, gbnf, e);
        if (st == DS_OK && len) *len = strlen(*gbnf);
        return st;
    }
    case DS_OUT_NONE: break;
    }
    return ds_fail(e, DS_EINVAL, "no output constraint");
}

char *ds_output_cache_key(const ds_oai_output *o, size_t *len) {
    /* the kind and options, then the value as compact JSON (schemas keep their key order:
     * properties come out in it) */
    ds_sb b = {0};
    ds_sb_printf(&b, "out:%d:%d:%d:", (int)o->kind, o->strict, o->max_space);
    if (o->value) {
        char *t = ds_json_dump(o->value);
        if (!t) {
            ds_sb_free(&b);
            return NULL;
        }
        ds_sb_puts(&b, t);
        free(t);
    }
    if (b.oom) {
        ds_sb_free(&b);
        return NULL;
    }
    *len = b.n;
    return b.s;
}
