/* json_constraint.c - see json_constraint.h.
 *
 * A pushdown automaton over bytes: the stack is one bit per open container,
 * the mode says what may come next. Trying a token copies the state (12
 * bytes) and feeds it the token's bytes; inside a string most tokens are
 * "plain" (no quote, backslash or control byte) and allowed without feeding. */
#include "server/json_constraint.h"

#include <stdlib.h>
#include <string.h>

enum {
    M_START,      /* nothing yet: whitespace, then '{' */
    M_VALUE,      /* a value inside a container */
    M_VALUE_OR_END, /* after '[': a value or ']' */
    M_KEY_OR_END, /* after '{': a key or '}' */
    M_KEY,        /* after ',' in an object: a key */
    M_COLON,      /* after a key */
    M_AFTER,      /* after a value in a container: ',' or its closing bracket */
    M_STRING,     /* sub: 0 characters, 1 after a backslash, 2 + n: n hex digits of \u to come */
    M_NUMBER,     /* sub: one of N_* */
    M_LITERAL,    /* sub: literal * 16 + bytes matched */
    M_DONE,       /* the object is closed */
};

enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static const char *const LITERALS[3] = {"true", "false", "null"};

static int is_space(unsigned char b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
static int is_digit(unsigned char b) { return b >= '0' && b <= '9'; }
static int is_hex(unsigned char b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

static int top_is_object(const ds_json_state *s) { return (s->objects >> (s->depth - 1)) & 1u; }

static int open_container(ds_json_state *s, int object) {
    if (s->depth >= DS_JSON_MAX_DEPTH) return 0;
    if (object) s->objects |= 1u << s->depth;
    else s->objects &= ~(1u << s->depth);
    s->depth++;
    s->mode = object ? M_KEY_OR_END : M_VALUE_OR_END;
    return 1;
}

static int close_container(ds_json_state *s) {
    s->depth--;
    s->mode = s->depth == 0 ? M_DONE : M_AFTER;
    return 1;
}

static int value_start(ds_json_state *s, unsigned char b) {
    switch (b) {
    case '{': return open_container(s, 1);
    case '[': return open_container(s, 0);
    case '"': s->mode = M_STRING, s->sub = 0, s->key = 0; return 1;
    case '-': s->mode = M_NUMBER, s->sub = N_MINUS; return 1;
    case '0': s->mode = M_NUMBER, s->sub = N_ZERO; return 1;
    case 't': s->mode = M_LITERAL, s->sub = 0 * 16 + 1; return 1;
    case 'f': s->mode = M_LITERAL, s->sub = 1 * 16 + 1; return 1;
    case 'n': s->mode = M_LITERAL, s->sub = 2 * 16 + 1; return 1;
    default:
        if (b < '1' || b > '9') return 0;
        s->mode = M_NUMBER, s->sub = N_INT;
        return 1;
    }
}

static int string_byte(ds_json_state *s, unsigned char b) {
    if (s->sub == 0) {
        if (b == '"') {
            s->mode = s->key ? M_COLON : M_AFTER;
            s->key = 0;
        } else if (b == '\\') {
            s->sub = 1;
        } else if (b < 0x20) {
            return 0;
        }
        return 1;
    }
    if (s->sub == 1) {
        if (b == 'u') s->sub = 2 + 4;
        else if (strchr("\"\\/bfnrt", b) && b) s->sub = 0;
        else return 0;
        return 1;
    }
    if (!is_hex(b)) return 0;
    if (--s->sub == 2) s->sub = 0;
    return 1;
}

/* 1: consumed; 0: not allowed; -1: the number ended before this byte */
static int number_byte(ds_json_state *s, unsigned char b) {
    int digit = is_digit(b), exp = b == 'e' || b == 'E';
    switch (s->sub) {
    case N_MINUS: if (!digit) return 0; s->sub = b == '0' ? N_ZERO : N_INT; return 1;
    case N_ZERO:
        if (digit) return 0; /* no leading zeros */
        if (b == '.') { s->sub = N_DOT; return 1; }
        if (exp) { s->sub = N_E; return 1; }
        return -1;
    case N_INT:
        if (digit) return 1;
        if (b == '.') { s->sub = N_DOT; return 1; }
        if (exp) { s->sub = N_E; return 1; }
        return -1;
    case N_DOT: if (!digit) return 0; s->sub = N_FRAC; return 1;
    case N_FRAC:
        if (digit) return 1;
        if (exp) { s->sub = N_E; return 1; }
        return -1;
    case N_E:
        if (b == '+' || b == '-') { s->sub = N_ESIGN; return 1; }
        if (!digit) return 0;
        s->sub = N_EXP;
        return 1;
    case N_ESIGN: if (!digit) return 0; s->sub = N_EXP; return 1;
    default: return digit ? 1 : -1; /* N_EXP */
    }
}

static int literal_byte(ds_json_state *s, unsigned char b) {
    const char *lit = LITERALS[s->sub >> 4];
    int at = s->sub & 15;
    if ((unsigned char)lit[at] != b) return 0;
    at++;
    if (lit[at] == '\0') s->mode = M_AFTER;
    else s->sub = (uint8_t)((s->sub & ~15) | at);
    return 1;
}

static int step(ds_json_state *s, unsigned char b) {
    if (s->mode == M_STRING) return string_byte(s, b);
    if (s->mode == M_LITERAL) return literal_byte(s, b);
    if (s->mode == M_NUMBER) {
        int r = number_byte(s, b);
        if (r >= 0) return r;
        s->mode = M_AFTER; /* numbers only stand in containers: what follows is judged there */
    }
    if (is_space(b)) {
        if (s->mode == M_DONE || s->space >= DS_JSON_MAX_SPACE) return 0;
        s->space++;
        return 1;
    }
    s->space = 0;
    switch (s->mode) {
    case M_START: return b == '{' ? open_container(s, 1) : 0;
    case M_VALUE_OR_END:
        if (b == ']') return close_container(s);
        return value_start(s, b);
    case M_VALUE: return value_start(s, b);
    case M_KEY_OR_END:
        if (b == '}') return close_container(s);
        /* fall through */
    case M_KEY:
        if (b != '"') return 0;
        s->mode = M_STRING, s->sub = 0, s->key = 1;
        return 1;
    case M_COLON:
        if (b != ':') return 0;
        s->mode = M_VALUE;
        return 1;
    case M_AFTER:
        if (b == ',') { s->mode = top_is_object(s) ? M_KEY : M_VALUE; return 1; }
        if (b == (top_is_object(s) ? '}' : ']')) return close_container(s);
        return 0;
    default: return 0; /* M_DONE */
    }
}

int ds_json_feed(ds_json_state *s, const char *bytes, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!step(s, (unsigned char)bytes[i])) return 0;
    return 1;
}

int ds_json_complete(const ds_json_state *s) { return s->mode == M_DONE; }

uint8_t *ds_json_plain_tokens(const ds_tokenizer *tok) {
    int n = ds_tokenizer_n_tokens(tok);
    uint8_t *plain = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!plain) return NULL;
    for (int t = 0; t < n; t++) {
        size_t len = 0;
        const unsigned char *b = (const unsigned char *)ds_tokenizer_token_bytes(tok, t, &len);
        int ok = b && len > 0 && !ds_tokenizer_is_special(tok, t);
        for (size_t i = 0; ok && i < len; i++) ok = b[i] >= 0x20 && b[i] != '"' && b[i] != '\\';
        plain[t] = (uint8_t)ok;
    }
    return plain;
}

void ds_json_constraint_init(ds_json_constraint *c, const ds_tokenizer *tok, const uint8_t *plain,
                             const int32_t *end_ids, int n_end, int in_reasoning) {
    memset(c, 0, sizeof *c);
    c->tok = tok;
    c->plain = plain;
    c->end_ids = end_ids;
    c->n_end = n_end;
    ds_reasoning_gate_init(&c->reasoning, in_reasoning);
    c->st.mode = M_START;
}

ds_filter_result ds_json_constraint_filter(void *user, const int32_t *generated, int n_generated, uint32_t *allowed,
                                           int n_vocab) {
    ds_json_constraint *c = user;
    for (; c->n_seen < n_generated && !c->broken; c->n_seen++) {
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(c->tok, generated[c->n_seen], &len);
        if (!b) continue;
        size_t used = ds_reasoning_gate_feed(&c->reasoning, b, len);
        if (!c->reasoning.open && !ds_json_feed(&c->st, b + used, len - used)) c->broken = 1;
    }
    if (c->broken) return DS_FILTER_DONE;
    int any = 0;
    if (c->reasoning.open) {
        /* free text, but the end token would end the answer before its JSON began: only </think>
         * leads out of the reasoning */
        memset(allowed, 0xff, DS_MASK_WORDS(n_vocab) * sizeof *allowed);
        for (int i = 0; i < c->n_end; i++)
            if (c->end_ids[i] >= 0 && c->end_ids[i] < n_vocab) allowed[c->end_ids[i] >> 5] &= ~(1u << (c->end_ids[i] & 31)), any = 1;
        return any ? DS_FILTER_MASK : DS_FILTER_FREE;
    }
    if (c->st.mode == M_DONE) {
        for (int i = 0; i < c->n_end; i++)
            if (c->end_ids[i] >= 0 && c->end_ids[i] < n_vocab) DS_MASK_SET(allowed, c->end_ids[i]), any = 1;
        if (!any) { c->broken = 1; return DS_FILTER_DONE; }
        return DS_FILTER_MASK;
    }
    int in_text = c->st.mode == M_STRING && c->st.sub == 0, n_plain = ds_tokenizer_n_tokens(c->tok);
    for (int32_t t = 0; t < n_vocab; t++) {
        if (in_text && t < n_plain && c->plain[t]) { /* stays inside the string, changes nothing */
            DS_MASK_SET(allowed, t), any = 1;
            continue;
        }
        size_t len = 0;
        const char *b = ds_tokenizer_token_bytes(c->tok, t, &len);
        /* control tokens (the end tokens among them) are not text, whatever they are spelt */
        if (!b || len == 0 || ds_tokenizer_is_special(c->tok, t)) continue;
        ds_json_state k = c->st;
        if (ds_json_feed(&k, b, len)) DS_MASK_SET(allowed, t), any = 1;
    }
    if (!any) { /* a byte-level vocabulary always has a way on: this needs an odd tokenizer */
        c->broken = 1;
        return DS_FILTER_DONE;
    }
    return DS_FILTER_MASK;
}
