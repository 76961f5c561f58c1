/* jinja_parse.c - tokens to a syntax tree, with @huggingface/jinja's grammar.
 *
 * The precedence, loosest first, is parser.ts's (which is not quite Python
 * Jinja's: tests bind tighter than * and +, and a sign binds tighter than a
 * filter, so -x|abs is (-x)|abs):
 *   a if c else b  |  or  |  and  |  not  |  == != < > <= >= in, not in
 *   + - ~  |  * / // %  |  **  |  x is [not] test  |  x | filter  |  - + (sign)
 *   x.y  x[i]  x[a:b:c]  f(...)  |  literals, names, ( ), [ ], { }
 * Recursion is bounded (MAX_NESTING) so that a template of a million "(" is
 * an error, not a stack overflow. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

#define MAX_NESTING 200

typedef struct {
    jarena *a;
    const char *src;
    size_t src_n;
    const jtok *t;
    size_t n, i;
    int depth;
    ds_err *e;
    int failed;
    ds_status code;
} parser;

static int fail_at(parser *P, uint32_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *P, uint32_t pos, const char *fmt, ...) {
    if (P->failed) return -1;
    int line, col;
    ds_jinja_line_col(P->src, P->src_n, pos, &line, &col);
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ds_fail(P->e, DS_ECORRUPT, "template:%d:%d: %s", line, col, what);
    P->failed = 1;
    P->code = DS_ECORRUPT;
    return -1;
}

static const jtok *cur(parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static const jtok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static int is(parser *P, int type) { return cur(P)->type == type; }
static int is_ident(parser *P, size_t k, const char *name) {
    const jtok *t = peek(P, k);
    return t->type == T_IDENT && jstr_eq(t->v, name);
}
static int is_op(parser *P, const char *op) { return jstr_eq(cur(P)->v, op); }

static const char *tok_desc(const jtok *t) {
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_TEXT: return "text";
    case T_NUM: return "a number";
    case T_STR: return "a string";
    case T_IDENT: return "a name";
    case T_OPEN_STMT: return "'{%'";
    case T_CLOSE_STMT: return "'%}'";
    case T_OPEN_EXPR: return "'{{'";
    case T_CLOSE_EXPR: return "'}}'";
    case T_COMMENT: return "a comment";
    default: return "an operator";
    }
}

static int expect(parser *P, int type, const char *what) {
    if (is(P, type)) {
        P->i++;
        return 0;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "expected %s, found %s", what, tok_desc(cur(P)));
    return fail_at(P, cur(P)->pos, "%s", msg);
}

static jnode *node(parser *P, int kind, uint32_t pos) {
    jnode *n = ds_jinja_arena_zalloc(P->a, sizeof *n);
    if (!n) {
        if (!P->failed) ds_fail(P->e, DS_ENOMEM, "template: out of memory");
        P->failed = 1;
        P->code = DS_ENOMEM;
        return NULL;
    }
    n->kind = (uint8_t)kind;
    n->pos = pos;
    return n;
}

/* A growing list of nodes in the arena. */
typedef struct {
    jnode **v;
    int n, cap;
} nlist;

static int nlist_push(parser *P, nlist *l, jnode *x) {
    if (!x) return -1;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        jnode **v = ds_jinja_arena_grow(P->a, l->v, (size_t)l->cap * sizeof *v, (size_t)cap * sizeof *v);
        if (!v) {
            if (!P->failed) ds_fail(P->e, DS_ENOMEM, "template: out of memory");
            P->failed = 1;
            P->code = DS_ENOMEM;
            return -1;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static jlist as_list(nlist l) {
    jlist r = {l.v, l.n};
    return r;
}

static jnode *parse_expression(parser *P);
static jnode *parse_primary(parser *P);
static jnode *parse_any(parser *P);

static int enter(parser *P) {
    if (++P->depth > MAX_NESTING) {
        fail_at(P, cur(P)->pos, "%s", "nesting too deep");
        return -1;
    }
    return 0;
}

/* --- expressions --- */

/* Arguments of a call ("call") or parameters of a macro ("params"). */
static int parse_args(parser *P, int params, jlist *out) {
    if (expect(P, T_LPAREN, "'('")) return -1;
    nlist l = {0};
    int saw_kw = 0;
    while (!is(P, T_RPAREN)) {
        if (is(P, T_EOF)) return expect(P, T_RPAREN, "')'");
        if (is(P, T_POW) || (is(P, T_MUL) && is_op(P, "*")))
            return fail_at(P, cur(P)->pos, "%s", "argument unpacking (* and **) is not supported");
        jnode *arg = parse_expression(P);
        if (!arg) return -1;
        if (is(P, T_EQUALS)) {
            P->i++;
            if (arg->kind != N_IDENT)
                return fail_at(P, arg->pos, "%s",
                               params ? "expected a name for the parameter" : "expected a name for the keyword argument");
            jnode *kw = node(P, N_KWARG, arg->pos);
            if (!kw) return -1;
            kw->s = arg->s;
            if (!(kw->a = parse_expression(P))) return -1;
            arg = kw;
        }
        if (params) {
            if (arg->kind != N_IDENT && arg->kind != N_KWARG)
                return fail_at(P, arg->pos, "%s", "expected a name for the parameter");
            for (int k = 0; k < l.n; k++)
                if (jstr_same(l.v[k]->s, arg->s)) return fail_at(P, arg->pos, "%s", "duplicate parameter name");
        }
        if (arg->kind == N_KWARG) saw_kw = 1;
        else if (saw_kw)
            return fail_at(P, arg->pos, "%s",
                           params ? "a parameter without a default follows one with a default"
                                  : "a positional argument follows a keyword argument");
        if (nlist_push(P, &l, arg)) return -1;
        if (is(P, T_COMMA)) P->i++;
    }
    P->i++;
    *out = as_list(l);
    return 0;
}

static jnode *parse_call(parser *P, jnode *callee);

/* x.name, x.0, x[expr], x[a:b:c] */
static jnode *parse_member(parser *P, jnode *obj) {
    while (obj && (is(P, T_DOT) || is(P, T_LBRACKET))) {
        const jtok *op = cur(P);
        P->i++;
        jnode *m = node(P, N_MEMBER, op->pos);
        if (!m) return NULL;
        m->a = obj;
        if (op->type == T_LBRACKET) {
            m->flag = 1;
            jnode *parts[3] = {0};
            int n_parts = 0, slice = 0;
            while (!is(P, T_RBRACKET)) {
                if (is(P, T_EOF)) {
                    expect(P, T_RBRACKET, "']'");
                    return NULL;
                }
                if (n_parts == 3) {
                    fail_at(P, cur(P)->pos, "%s", "a slice takes at most 3 parts");
                    return NULL;
                }
                if (is(P, T_COLON)) {
                    parts[n_parts++] = NULL;
                    P->i++;
                    slice = 1;
                } else {
                    if (!(parts[n_parts++] = parse_expression(P))) return NULL;
                    if (is(P, T_COLON)) {
                        P->i++;
                        slice = 1;
                    }
                }
            }
            if (n_parts == 0) {
                fail_at(P, cur(P)->pos, "%s", "expected an index or a slice");
                return NULL;
            }
            P->i++;
            if (slice) {
                jnode *sl = node(P, N_SLICE, op->pos);
                if (!sl) return NULL;
                sl->a = parts[0];
                sl->b = parts[1];
                sl->c = parts[2];
                m->b = sl;
            } else {
                m->b = parts[0];
            }
        } else {
            jnode *prop = parse_primary(P);
            if (!prop) return NULL;
            if (prop->kind != N_IDENT && prop->kind != N_INT) {
                fail_at(P, prop->pos, "%s", "expected a name or an integer after '.'");
                return NULL;
            }
            m->b = prop;
        }
        obj = m;
    }
    return obj;
}

static jnode *parse_call(parser *P, jnode *callee) {
    while (callee && is(P, T_LPAREN)) {
        jnode *c = node(P, N_CALL, cur(P)->pos);
        if (!c) return NULL;
        c->a = callee;
        if (parse_args(P, 0, &c->l1)) return NULL;
        callee = parse_member(P, c);
    }
    return callee;
}

static jnode *parse_sequence(parser *P, int primary);

static jnode *parse_primary(parser *P) {
    const jtok *t = cur(P);
    P->i++;
    switch (t->type) {
    case T_NUM: {
        int is_float = memchr(t->v.p, '.', t->v.n) != NULL;
        jnode *n = node(P, is_float ? N_FLOAT : N_INT, t->pos);
        if (!n) return NULL;
        char buf[64];
        size_t k = t->v.n < sizeof buf - 1 ? t->v.n : sizeof buf - 1;
        memcpy(buf, t->v.p, k);
        buf[k] = '\0';
        n->num = t->v.n < sizeof buf - 1 ? strtod(buf, NULL) : (buf[0] == '-' ? -1.0 / 0.0 : 1.0 / 0.0);
        return n;
    }
    case T_STR: {
        jnode *n = node(P, N_STR, t->pos);
        if (!n) return NULL;
        n->s = t->v;
        if (is(P, T_STR)) {   /* 'a' 'b' is 'ab' */
            size_t total = t->v.n;
            for (size_t k = P->i; k < P->n && P->t[k].type == T_STR; k++) total += P->t[k].v.n;
            char *p = ds_jinja_arena_alloc(P->a, total + 1);
            if (!p) {
                fail_at(P, t->pos, "%s", "out of memory");
                return NULL;
            }
            memcpy(p, t->v.p, t->v.n);
            size_t at = t->v.n;
            while (is(P, T_STR)) {
                memcpy(p + at, cur(P)->v.p, cur(P)->v.n);
                at += cur(P)->v.n;
                P->i++;
            }
            p[at] = '\0';
            n->s.p = p;
            n->s.n = at;
        }
        return n;
    }
    case T_IDENT: {
        jnode *n = node(P, N_IDENT, t->pos);
        if (n) n->s = t->v;
        return n;
    }
    case T_LPAREN: {
        if (enter(P)) return NULL;
        jnode *e = parse_sequence(P, 0);
        P->depth--;
        if (!e || expect(P, T_RPAREN, "')'")) return NULL;
        return e;
    }
    case T_LBRACKET: {
        if (enter(P)) return NULL;
        nlist l = {0};
        while (!is(P, T_RBRACKET)) {
            if (is(P, T_EOF)) {
                expect(P, T_RBRACKET, "']'");
                return NULL;
            }
            if (nlist_push(P, &l, parse_expression(P))) return NULL;
            if (is(P, T_COMMA)) P->i++;
        }
        P->i++;
        P->depth--;
        jnode *n = node(P, N_ARRAY, t->pos);
        if (n) n->l1 = as_list(l);
        return n;
    }
    case T_LBRACE: {
        if (enter(P)) return NULL;
        nlist keys = {0}, vals = {0};
        while (!is(P, T_RBRACE)) {
            if (is(P, T_EOF)) {
                expect(P, T_RBRACE, "'}'");
                return NULL;
            }
            if (nlist_push(P, &keys, parse_expression(P))) return NULL;
            if (expect(P, T_COLON, "':' between key and value")) return NULL;
            if (nlist_push(P, &vals, parse_expression(P))) return NULL;
            if (is(P, T_COMMA)) P->i++;
        }
        P->i++;
        P->depth--;
        jnode *n = node(P, N_DICT, t->pos);
        if (n) {
            n->l1 = as_list(keys);
            n->l2 = as_list(vals);
        }
        return n;
    }
    default: {
        char msg[80];
        snprintf(msg, sizeof msg, "unexpected %s", tok_desc(t));
        fail_at(P, t->pos, "%s", msg);
        return NULL;
    }
    }
}

static jnode *parse_unary_sign(parser *P) {
    const jtok *t = cur(P);
    if ((t->type == T_UNARY || t->type == T_ADD) && (jstr_eq(t->v, "-") || jstr_eq(t->v, "+"))) {
        P->i++;
        if (enter(P)) return NULL;
        jnode *n = node(P, N_UNARY, t->pos);
        if (n) {
            n->op = jstr_eq(t->v, "-") ? OP_NEG : OP_POS;
            n->a = parse_unary_sign(P);
        }
        P->depth--;
        return n && n->a ? n : NULL;
    }
    return parse_call(P, parse_member(P, parse_primary(P)));
}

static jnode *parse_filter(parser *P) {
    jnode *operand = parse_unary_sign(P);
    while (operand && is(P, T_PIPE)) {
        P->i++;
        const jtok *name = cur(P);
        if (name->type != T_IDENT) {
            fail_at(P, name->pos, "%s", "expected a filter name");
            return NULL;
        }
        P->i++;
        jnode *f = node(P, N_FILTER, name->pos);
        if (!f) return NULL;
        f->a = operand;
        f->s = name->v;
        if (is(P, T_LPAREN)) {
            f->flag = 1;
            if (parse_args(P, 0, &f->l1)) return NULL;
            if (is(P, T_DOT) || is(P, T_LBRACKET) || is(P, T_LPAREN)) {
                fail_at(P, cur(P)->pos, "%s", "a filter call cannot be followed by '.', '[' or '('");
                return NULL;
            }
        }
        operand = f;
    }
    return operand;
}

static jnode *parse_test(parser *P) {
    jnode *operand = parse_filter(P);
    while (operand && is_ident(P, 0, "is")) {
        P->i++;
        int negate = is_ident(P, 0, "not");
        if (negate) P->i++;
        const jtok *name = cur(P);
        if (name->type != T_IDENT) {
            fail_at(P, name->pos, "%s", "expected a test name after 'is'");
            return NULL;
        }
        P->i++;
        jnode *t = node(P, N_TEST, name->pos);
        if (!t) return NULL;
        t->a = operand;
        t->s = name->v;
        t->flag = (uint8_t)negate;
        operand = t;
    }
    return operand;
}

static jnode *binary(parser *P, const jtok *op, int code, jnode *l, jnode *r) {
    if (!l || !r) return NULL;
    jnode *n = node(P, N_BINARY, op->pos);
    if (!n) return NULL;
    n->op = (uint8_t)code;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_power(parser *P) {
    jnode *l = parse_test(P);
    while (l && is(P, T_POW)) {
        const jtok *op = cur(P);
        P->i++;
        l = binary(P, op, OP_POW, l, parse_test(P));
    }
    return l;
}

static jnode *parse_multiplicative(parser *P) {
    jnode *l = parse_power(P);
    while (l && is(P, T_MUL)) {
        const jtok *op = cur(P);
        P->i++;
        int code = jstr_eq(op->v, "*") ? OP_MUL : jstr_eq(op->v, "/") ? OP_DIV : jstr_eq(op->v, "//") ? OP_FLOORDIV : OP_MOD;
        l = binary(P, op, code, l, parse_power(P));
    }
    return l;
}

static jnode *parse_additive(parser *P) {
    jnode *l = parse_multiplicative(P);
    while (l && is(P, T_ADD)) {
        const jtok *op = cur(P);
        P->i++;
        int code = jstr_eq(op->v, "+") ? OP_ADD : jstr_eq(op->v, "-") ? OP_SUB : OP_CONCAT;
        l = binary(P, op, code, l, parse_multiplicative(P));
    }
    return l;
}

static jnode *parse_comparison(parser *P) {
    jnode *l = parse_additive(P);
    while (l) {
        const jtok *op = cur(P);
        int code;
        if (is_ident(P, 0, "not") && is_ident(P, 1, "in")) {
            code = OP_NOTIN;
            P->i += 2;
        } else if (is_ident(P, 0, "in")) {
            code = OP_IN;
            P->i++;
        } else if (is(P, T_CMP)) {
            code = jstr_eq(op->v, "==") ? OP_EQ : jstr_eq(op->v, "!=") ? OP_NE : jstr_eq(op->v, "<") ? OP_LT
                 : jstr_eq(op->v, ">") ? OP_GT : jstr_eq(op->v, "<=") ? OP_LE : OP_GE;
            P->i++;
        } else {
            break;
        }
        l = binary(P, op, code, l, parse_additive(P));
    }
    return l;
}

static jnode *parse_not(parser *P) {
    if (is_ident(P, 0, "not")) {
        const jtok *op = cur(P);
        P->i++;
        if (enter(P)) return NULL;
        jnode *n = node(P, N_UNARY, op->pos);
        if (n) {
            n->op = OP_NOT;
            n->a = parse_not(P);
        }
        P->depth--;
        return n && n->a ? n : NULL;
    }
    return parse_comparison(P);
}

static jnode *parse_and(parser *P) {
    jnode *l = parse_not(P);
    while (l && is_ident(P, 0, "and")) {
        const jtok *op = cur(P);
        P->i++;
        l = binary(P, op, OP_AND, l, parse_not(P));
    }
    return l;
}

static jnode *parse_or(parser *P) {
    jnode *l = parse_and(P);
    while (l && is_ident(P, 0, "or")) {
        const jtok *op = cur(P);
        P->i++;
        l = binary(P, op, OP_OR, l, parse_and(P));
    }
    return l;
}

static jnode *parse_if_expr(parser *P) {
    jnode *a = parse_or(P);
    if (a && is_ident(P, 0, "if")) {
        const jtok *op = cur(P);
        P->i++;
        jnode *test = parse_or(P);
        if (!test) return NULL;
        if (is_ident(P, 0, "else")) {
            P->i++;
            if (enter(P)) return NULL;
            jnode *n = node(P, N_TERNARY, op->pos);
            if (n) {
                n->a = test;
                n->b = a;
                n->c = parse_if_expr(P);
            }
            P->depth--;
            return n && n->c ? n : NULL;
        }
        jnode *n = node(P, N_SELECT, op->pos);
        if (n) {
            n->a = a;
            n->b = test;
        }
        return n;
    }
    return a;
}

static jnode *parse_expression(parser *P) {
    if (enter(P)) return NULL;
    jnode *n = parse_if_expr(P);
    P->depth--;
    return n;
}

/* a, b, c as a tuple; a single expression as itself. */
static jnode *parse_sequence(parser *P, int primary) {
    uint32_t pos = cur(P)->pos;
    jnode *first = primary ? parse_primary(P) : parse_expression(P);
    if (!first || !is(P, T_COMMA)) return first;
    nlist l = {0};
    if (nlist_push(P, &l, first)) return NULL;
    while (is(P, T_COMMA)) {
        P->i++;
        if (nlist_push(P, &l, primary ? parse_primary(P) : parse_expression(P))) return NULL;
    }
    jnode *t = node(P, N_TUPLE, pos);
    if (t) t->l1 = as_list(l);
    return t;
}

/* --- statements --- */

static int is_statement(parser *P, const char *a, const char *b, const char *c) {
    if (!is(P, T_OPEN_STMT)) return 0;
    const jtok *t = peek(P, 1);
    if (t->type != T_IDENT) return 0;
    return jstr_eq(t->v, a) || (b && jstr_eq(t->v, b)) || (c && jstr_eq(t->v, c));
}

/* Statements up to one of the given {% names %} (left unconsumed). */
static int parse_body(parser *P, const jtok *opener, const char *a, const char *b, const char *c, jlist *out) {
    nlist l = {0};
    while (!is_statement(P, a, b, c)) {
        if (is(P, T_EOF)) {
            int line, col;
            ds_jinja_line_col(P->src, P->src_n, opener->pos, &line, &col);
            char msg[160];
            snprintf(msg, sizeof msg, "unexpected end of template: the '%.*s' opened at %d:%d needs {%% %s %%}",
                     (int)opener->v.n, opener->v.p, line, col, a);
            return fail_at(P, cur(P)->pos, "%s", msg);
        }
        if (nlist_push(P, &l, parse_any(P))) return -1;
    }
    *out = as_list(l);
    return 0;
}

/* {% NAME %} closing a block. */
static int expect_end(parser *P, const char *name) {
    if (expect(P, T_OPEN_STMT, "'{%'")) return -1;
    if (!is_ident(P, 0, name)) {
        char msg[80];
        snprintf(msg, sizeof msg, "expected '%s'", name);
        return fail_at(P, cur(P)->pos, "%s", msg);
    }
    P->i++;
    return expect(P, T_CLOSE_STMT, "'%}'");
}

static void mark_special_args(const jnode *n, int *flags, int depth);

static void mark_list(const jlist *l, int *flags, int depth) {
    for (int i = 0; i < l->n; i++) mark_special_args(l->v[i], flags, depth);
}

/* Whether a macro body reads `kwargs` or `varargs` (then extra arguments are
 * collected instead of refused). Simpler than HF's scan, which also skips
 * names assigned before use. Trees deeper than MAX_NESTING (long left-leaning
 * chains such as a + b + c + ...) are not searched further: they cannot
 * render anyway, as evaluation has a depth limit too. */
static void mark_special_args(const jnode *n, int *flags, int depth) {
    if (!n || depth > MAX_NESTING) return;
    if (n->kind == N_IDENT) {
        if (jstr_eq(n->s, "kwargs")) *flags |= JN_USES_KWARGS;
        if (jstr_eq(n->s, "varargs")) *flags |= JN_USES_VARARGS;
        return;
    }
    if (n->kind == N_MEMBER && !n->flag) {
        mark_special_args(n->a, flags, depth + 1);
        return;
    }
    mark_special_args(n->a, flags, depth + 1);
    mark_special_args(n->b, flags, depth + 1);
    mark_special_args(n->c, flags, depth + 1);
    mark_list(&n->l1, flags, depth + 1);
    mark_list(&n->l2, flags, depth + 1);
}

static jnode *parse_if(parser *P, const jtok *opener) {
    jnode *n = node(P, S_IF, opener->pos);
    if (!n || !(n->a = parse_expression(P)) || expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    if (parse_body(P, opener, "endif", "elif", "else", &n->l1)) return NULL;
    if (is_statement(P, "elif", NULL, NULL)) {
        const jtok *elif = peek(P, 1);
        P->i += 2;
        nlist alt = {0};
        if (nlist_push(P, &alt, parse_if(P, elif))) return NULL;
        n->l2 = as_list(alt);
    } else if (is_statement(P, "else", NULL, NULL)) {
        P->i += 2;
        if (expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
        if (parse_body(P, opener, "endif", NULL, NULL, &n->l2)) return NULL;
    }
    return n;
}

static jnode *parse_statement(parser *P) {
    if (expect(P, T_OPEN_STMT, "'{%'")) return NULL;
    const jtok *kw = cur(P);
    if (kw->type != T_IDENT) {
        fail_at(P, kw->pos, "%s", "expected a statement name after '{%'");
        return NULL;
    }
    P->i++;
    jnode *n = NULL;
    if (jstr_eq(kw->v, "set")) {
        n = node(P, S_SET, kw->pos);
        if (!n || !(n->a = parse_sequence(P, 0))) return NULL;
        if (is(P, T_EQUALS)) {
            P->i++;
            if (!(n->b = parse_sequence(P, 0))) return NULL;
        } else {
            if (expect(P, T_CLOSE_STMT, "'=' or '%}'")) return NULL;
            if (parse_body(P, kw, "endset", NULL, NULL, &n->l1)) return NULL;
            if (expect(P, T_OPEN_STMT, "'{%'")) return NULL;
            P->i++;   /* endset */
        }
        if (expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    } else if (jstr_eq(kw->v, "if")) {
        if (!(n = parse_if(P, kw)) || expect_end(P, "endif")) return NULL;
    } else if (jstr_eq(kw->v, "for")) {
        n = node(P, S_FOR, kw->pos);
        if (!n || !(n->a = parse_sequence(P, 1))) return NULL;
        if (n->a->kind != N_IDENT && n->a->kind != N_TUPLE) {
            fail_at(P, n->a->pos, "%s", "expected a name or names for the loop variable");
            return NULL;
        }
        if (!is_ident(P, 0, "in")) {
            fail_at(P, cur(P)->pos, "%s", "expected 'in' after the loop variable");
            return NULL;
        }
        P->i++;
        if (!(n->b = parse_expression(P)) || expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
        if (parse_body(P, kw, "endfor", "else", NULL, &n->l1)) return NULL;
        if (is_statement(P, "else", NULL, NULL)) {
            P->i += 2;
            if (expect(P, T_CLOSE_STMT, "'%}'") || parse_body(P, kw, "endfor", NULL, NULL, &n->l2)) return NULL;
        }
        if (expect_end(P, "endfor")) return NULL;
    } else if (jstr_eq(kw->v, "macro")) {
        n = node(P, S_MACRO, kw->pos);
        if (!n) return NULL;
        if (!is(P, T_IDENT)) {
            fail_at(P, cur(P)->pos, "%s", "expected the macro's name");
            return NULL;
        }
        n->s = cur(P)->v;
        P->i++;
        if (parse_args(P, 1, &n->l1) || expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
        if (parse_body(P, kw, "endmacro", NULL, NULL, &n->l2) || expect_end(P, "endmacro")) return NULL;
        int flags = 0;
        mark_list(&n->l2, &flags, 0);
        n->flag = (uint8_t)flags;
    } else if (jstr_eq(kw->v, "call")) {
        n = node(P, S_CALLBLOCK, kw->pos);
        if (!n) return NULL;
        if (is(P, T_LPAREN) && parse_args(P, 1, &n->l1)) return NULL;
        if (!is(P, T_IDENT)) {
            fail_at(P, cur(P)->pos, "%s", "expected a macro name after 'call'");
            return NULL;
        }
        jnode *callee = node(P, N_IDENT, cur(P)->pos);
        if (!callee) return NULL;
        callee->s = cur(P)->v;
        P->i++;
        jnode *call = node(P, N_CALL, cur(P)->pos);
        if (!call) return NULL;
        call->a = callee;
        if (parse_args(P, 0, &call->l1) || expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
        n->a = call;
        if (parse_body(P, kw, "endcall", NULL, NULL, &n->l2) || expect_end(P, "endcall")) return NULL;
        int flags = 0;
        mark_list(&n->l2, &flags, 0);
        n->flag = (uint8_t)flags;
    } else if (jstr_eq(kw->v, "filter")) {
        n = node(P, S_FILTERBLOCK, kw->pos);
        if (!n) return NULL;
        if (!is(P, T_IDENT)) {
            fail_at(P, cur(P)->pos, "%s", "expected a filter name");
            return NULL;
        }
        jnode *f = node(P, N_FILTER, cur(P)->pos);
        if (!f) return NULL;
        f->s = cur(P)->v;
        P->i++;
        if (is(P, T_LPAREN)) {
            f->flag = 1;
            if (parse_args(P, 0, &f->l1)) return NULL;
        }
        n->a = f;
        if (expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
        if (parse_body(P, kw, "endfilter", NULL, NULL, &n->l1) || expect_end(P, "endfilter")) return NULL;
    } else if (jstr_eq(kw->v, "break") || jstr_eq(kw->v, "continue")) {
        n = node(P, jstr_eq(kw->v, "break") ? S_BREAK : S_CONTINUE, kw->pos);
        if (!n || expect(P, T_CLOSE_STMT, "'%}'")) return NULL;
    } else {
        char msg[120];
        snprintf(msg, sizeof msg, "unknown or unexpected statement '%.*s'", (int)(kw->v.n > 40 ? 40 : kw->v.n), kw->v.p);
        fail_at(P, kw->pos, "%s", msg);
        return NULL;
    }
    return n;
}

static jnode *parse_any(parser *P) {
    const jtok *t = cur(P);
    switch (t->type) {
    case T_COMMENT: {
        P->i++;
        return node(P, S_COMMENT, t->pos);
    }
    case T_TEXT: {
        P->i++;
        jnode *n = node(P, N_STR, t->pos);
        if (n) n->s = t->v;
        return n;
    }
    case T_OPEN_STMT: {
        if (enter(P)) return NULL;
        jnode *n = parse_statement(P);
        P->depth--;
        return n;
    }
    case T_OPEN_EXPR: {
        P->i++;
        jnode *n = parse_expression(P);
        if (!n || expect(P, T_CLOSE_EXPR, "'}}'")) return NULL;
        return n;
    }
    default: {
        char msg[80];
        snprintf(msg, sizeof msg, "unexpected %s", tok_desc(t));
        fail_at(P, t->pos, "%s", msg);
        return NULL;
    }
    }
}

ds_status ds_jinja_parse(jarena *a, const char *src, size_t src_n, const jtok *toks, size_t n_toks, jlist *out,
                      ds_err *e) {
    parser P = {.a = a, .src = src, .src_n = src_n, .t = toks, .n = n_toks, .e = e};
    nlist body = {0};
    while (!is(&P, T_EOF)) {
        if (nlist_push(&P, &body, parse_any(&P))) {
            if (!P.failed) return ds_fail(e, DS_ECORRUPT, "template: syntax error");
            return P.code;
        }
    }
    *out = as_list(body);
    return DS_OK;
}
