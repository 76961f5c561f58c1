/* jinja_int.h - what the files of the Jinja engine share: the arena, values,
 * tokens, the syntax tree and the render state. Not for use outside
 * src/jinja/jinja*.c; the public interface is jinja/jinja.h. This layer uses
 * only common/ (and jansson, utf8proc): the server, the command line and the
 * fuzz targets include jinja/jinja.h.
 *
 *   jinja_lex.c       template text -> tokens (with HF's trim/lstrip preprocessing)
 *   jinja_parse.c     tokens -> syntax tree
 *   jinja_value.c     values: arena, strings as JavaScript sees them, numbers, JSON
 *   jinja_builtins.c  filters, tests, methods and global functions
 *   jinja_eval.c      the interpreter
 *   jinja.c           compile / render / free, limits, error positions
 *
 * Memory: a compiled template owns one arena (tokens are dropped after
 * parsing, the tree stays); a render owns another, from which every value and
 * every piece of text is allocated and which is released in one go at the end.
 * Values therefore never need freeing, and cycles (a namespace holding itself)
 * cost nothing. Strings of the context point into the caller's jansson tree.
 *
 * Names shared between the files carry the project's prefix and a family word
 * (ds_jinja_arena_, _value_, _obj_, _str_, _wtf8_, _buf_, _builtin_, _eval_),
 * so that nothing of the engine can clash with another library at link time;
 * tests/cli/test_symbols.sh keeps it so. */
#ifndef DS_JINJA_INT_H
#define DS_JINJA_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/status.h"
#include "jinja/jinja.h"

/* --- arena --- */

typedef struct ja_chunk ja_chunk;
typedef struct {
    ja_chunk *head;
    size_t total;  /* bytes of all chunks */
    size_t limit;  /* 0: none */
} jarena;

void *ds_jinja_arena_alloc(jarena *a, size_t n);  /* NULL when out of memory or over the limit */
void *ds_jinja_arena_zalloc(jarena *a, size_t n);
/* Grows the most recent allocation in place when it can, else moves it. */
void *ds_jinja_arena_grow(jarena *a, void *p, size_t old_n, size_t new_n);
void ds_jinja_arena_release(jarena *a);

/* --- values --- */

typedef struct {
    const char *p;
    size_t n;
} jstr;

typedef enum {
    JV_UNDEF, JV_NULL, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_ARRAY,   /* also tuples (jarr.tuple) */
    JV_OBJECT,  /* also keyword arguments (jobj.kwargs) */
    JV_NS,      /* namespace(): attributes, but no mapping behaviour */
    JV_FUNC,
} jkind;

typedef struct jarr jarr;
typedef struct jobj jobj;
typedef struct jfunc jfunc;

typedef struct {
    uint8_t k;
    union {
        int b;
        double n;    /* JV_INT holds a double too: JavaScript has no other number */
        jstr s;      /* WTF-8: UTF-8 that may hold lone surrogates, see jinja_value.c */
        jarr *a;
        jobj *o;
        jfunc *f;
    } u;
} jv;

struct jarr {
    size_t n;
    int tuple;
    jv *items;
};

struct jobj {
    size_t n, cap;
    jstr *keys;
    jv *vals;
    uint32_t *index;   /* open addressing over keys, built once n grows past a few */
    size_t index_cap;
    int kwargs;        /* keyword arguments of a call, passed as the last argument */
};

typedef enum { JF_METHOD, JF_MACRO, JF_CALLER, JF_GLOBAL } jfkind;

struct jnode;
struct jscope;
struct jfunc {
    int kind;
    int id;                     /* method or global id (jinja_builtins.c) */
    jv self;                    /* the receiver of a method */
    const struct jnode *node;   /* macro or call block */
    struct jscope *scope;       /* where a call block's body runs */
};

typedef struct jscope {
    struct jscope *parent;
    jobj *vars;
} jscope;

/* --- tokens and syntax tree --- */

typedef enum {
    T_EOF, T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_LPAREN, T_RPAREN, T_OPEN_STMT, T_CLOSE_STMT,
    T_OPEN_EXPR, T_CLOSE_EXPR, T_LBRACKET, T_RBRACKET, T_LBRACE, T_RBRACE, T_COMMA, T_DOT, T_COLON,
    T_PIPE, T_ADD, T_MUL, T_POW, T_CMP, T_UNARY, T_COMMENT,
} jtok_type;

typedef struct {
    uint8_t type;
    uint32_t pos;   /* byte offset in the original template */
    jstr v;         /* text, decoded string literal, or the token's characters */
} jtok;

typedef enum {
    N_STR, N_INT, N_FLOAT, N_IDENT, N_ARRAY, N_TUPLE, N_DICT, N_MEMBER, N_SLICE, N_CALL, N_KWARG,
    N_UNARY, N_BINARY, N_FILTER, N_TEST, N_SELECT, N_TERNARY,
    S_IF, S_FOR, S_SET, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK, S_BREAK, S_CONTINUE, S_COMMENT,
} jnkind;

typedef enum {
    OP_OR, OP_AND, OP_NOT, OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN,
    OP_ADD, OP_SUB, OP_CONCAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_NEG, OP_POS,
} jop;

typedef struct jnode jnode;
typedef struct {
    jnode **v;
    int n;
} jlist;

/* Field use by kind:
 *   N_STR s | N_INT, N_FLOAT num | N_IDENT s | N_ARRAY, N_TUPLE l1 | N_DICT l1 keys, l2 values
 *   N_MEMBER a object, b property, flag computed | N_SLICE a start, b stop, c step (each may be NULL)
 *   N_CALL a callee, l1 arguments (N_KWARG for name=value) | N_KWARG s name, a value
 *   N_UNARY op a | N_BINARY op a b | N_FILTER a operand (NULL in a filter block), s name,
 *   flag 1 when called with l1 arguments | N_TEST a operand, s name, flag negated
 *   N_SELECT a value, b condition | N_TERNARY a condition, b then, c else
 *   S_IF a test, l1 body, l2 else | S_FOR a target, b iterable, l1 body, l2 else
 *   S_SET a target, b value or NULL with l1 body | S_MACRO s name, l1 parameters, l2 body
 *   S_CALLBLOCK a the N_CALL, l1 caller parameters, l2 body | S_FILTERBLOCK a N_FILTER, l1 body
 * S_MACRO and S_CALLBLOCK set flag bits JN_USES_KWARGS / JN_USES_VARARGS. */
struct jnode {
    uint8_t kind, op, flag;
    uint32_t pos;
    jstr s;
    double num;
    jnode *a, *b, *c;
    jlist l1, l2;
};
#define JN_USES_KWARGS 1
#define JN_USES_VARARGS 2

struct ds_jinja {
    jarena arena;
    jlist body;
    char *src;        /* the original text, for line:column */
    size_t src_len;
};

/* Line and column (1-based, columns in characters) of byte offset pos. */
void ds_jinja_line_col(const char *src, size_t n, size_t pos, int *line, int *col);

/* Lexer: tokens into the arena, ending with T_EOF. */
ds_status ds_jinja_lex(jarena *a, const char *src, size_t n, jtok **out, size_t *n_out, ds_err *e);
/* Parser: the template's statements. */
ds_status ds_jinja_parse(jarena *a, const char *src, size_t src_n, const jtok *toks, size_t n_toks, jlist *out,
                      ds_err *e);

/* --- render state --- */

enum { J_OK = 0, J_ERR = -1, J_BREAK = 1, J_CONTINUE = 2 };

typedef struct {
    jarena arena;
    ds_jinja_limits lim;
    uint64_t steps;
    int depth;
    const ds_jinja *t;
    ds_err *e;
} jr;

/* Records an error at template position pos and returns J_ERR. */
int ds_jinja_fail(jr *r, uint32_t pos, ds_status code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int ds_jinja_fail_oom(jr *r, uint32_t pos);
/* Charges work that allocates nothing (scanning a string, walking a list)
 * to the step budget: one step per 16 bytes or items. */
int ds_jinja_charge_scan(jr *r, uint32_t pos, size_t units);

typedef struct {
    char *p;
    size_t n, cap;
} jbuf;

int ds_jinja_buf_put(jr *r, uint32_t pos, jbuf *b, const char *p, size_t n);
int ds_jinja_buf_putc(jr *r, uint32_t pos, jbuf *b, char c);

/* constructors */
static inline jv jv_undef(void) { jv v = {.k = JV_UNDEF}; return v; }
static inline jv jv_null(void) { jv v = {.k = JV_NULL}; return v; }
static inline jv jv_bool(int b) { jv v = {.k = JV_BOOL, .u.b = b != 0}; return v; }
static inline jv jv_int(double n) { jv v = {.k = JV_INT, .u.n = n}; return v; }
static inline jv jv_float(double n) { jv v = {.k = JV_FLOAT, .u.n = n}; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v = {.k = JV_STR, .u.s = {p, n}}; return v; }
static inline int jstr_eq(jstr a, const char *z) {
    size_t n = 0;
    while (z[n]) n++;
    return a.n == n && (n == 0 || memcmp(a.p, z, n) == 0);
}
static inline int jstr_same(jstr a, jstr b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }

/* jinja_value.c */
const char *ds_jinja_value_type_name(jv v);  /* @huggingface/jinja's names: "StringValue", ... */
int ds_jinja_value_truthy(jv v);
int ds_jinja_value_new_array(jr *r, uint32_t pos, size_t n, jv *out);  /* items zeroed (undefined) */
int ds_jinja_value_new_object(jr *r, uint32_t pos, size_t cap, int kind, jv *out);  /* kind: JV_OBJECT or JV_NS */
const jv *ds_jinja_obj_get(const jobj *o, const char *k, size_t kn);
int ds_jinja_obj_set(jr *r, uint32_t pos, jobj *o, jstr key, jv val);
int ds_jinja_value_new_func(jr *r, uint32_t pos, int kind, int id, jv self, const jnode *node, jscope *scope, jv *out);
int ds_jinja_value_concat(jr *r, uint32_t pos, jstr a, jstr b, jv *out);
int ds_jinja_value_from_json(jr *r, const json_t *j, jv *out, int depth);

/* Text forms (see jinja_value.c for which JavaScript conversion each mirrors). */
int ds_jinja_value_render(jr *r, uint32_t pos, jv v, jbuf *b);  /* RuntimeValue.toString(), as output */
int ds_jinja_value_raw_string(jr *r, uint32_t pos, jv v, jbuf *b);  /* value.toString(), as `+` and `~` use */
int ds_jinja_value_join_item(jr *r, uint32_t pos, jv v, jbuf *b);  /* Array.prototype.join's view of a value */
int ds_jinja_value_buf_to_str(jr *r, uint32_t pos, jbuf *b, jv *out);
int ds_jinja_value_to_rendered_str(jr *r, uint32_t pos, jv v, jv *out);

typedef struct {
    int indent;               /* 0: none */
    int ensure_ascii, sort_keys;
    jstr item_sep, key_sep;   /* p NULL: the defaults */
    int undefined_as_null;
} jjson_opts;
int ds_jinja_value_tojson(jr *r, uint32_t pos, jv v, const jjson_opts *o, int depth, jbuf *b);

int ds_jinja_value_loose_eq(jr *r, uint32_t pos, jv a, jv b, int *eq);  /* JavaScript `a.value == b.value` */
int ds_jinja_value_strict_eq(jv a, jv b);  /* JavaScript `a.value === b.value` */
int ds_jinja_value_same_value_zero(jv a, jv b);  /* Set membership of .value */

/* Strings as JavaScript sees them (UTF-16 code units). */
uint32_t ds_jinja_wtf8_decode(const char *p, size_t n, size_t *len);  /* one code point; bad bytes give U+FFFD */
size_t ds_jinja_wtf8_encode(uint32_t cp, char *out);  /* 1..4 bytes */
size_t ds_jinja_str_utf16_len(jstr s);
size_t ds_jinja_str_ws_at(const char *p, const char *end);  /* bytes of a JS whitespace char at p, or 0 */
jstr ds_jinja_str_trim(jstr s, int left, int right);
int ds_jinja_str_case_map(jr *r, uint32_t pos, jstr s, int upper, jv *out);
int ds_jinja_str_compare(jstr a, jstr b);  /* by UTF-16 code units */
/* Normalises rendered WTF-8 to UTF-8 (surrogate pairs joined, lone ones
 * U+FFFD) into a malloc'd NUL-terminated string. */
char *ds_jinja_wtf8_to_utf8(const char *p, size_t n, size_t *out_n);

/* jinja_builtins.c */
int ds_jinja_builtin_filter(jr *r, const jnode *f, jv operand, jscope *s, jv *out);
int ds_jinja_builtin_test(jr *r, const jnode *n, const char *name, size_t name_n, const jv *args, int n_args,
                          int *result);
int ds_jinja_builtin_member(jr *r, uint32_t pos, jv obj, jv prop, jv *out);
int ds_jinja_builtin_call(jr *r, uint32_t pos, const jfunc *f, jv *args, int n_args, jv *out);
int ds_jinja_builtin_global(jr *r, uint32_t pos, const char *name, size_t n, jv *out);  /* 1: found */
int ds_jinja_builtin_is_global_name(const char *name, size_t n);

/* jinja_eval.c */
int ds_jinja_eval_call_args(jr *r, const jlist *args, jscope *s, jv **out, int *n_out, jobj **kw_out);
int ds_jinja_eval_template(jr *r, const ds_jinja *t, const json_t *ctx, jbuf *out);

#define JTRY(x)                       \
    do {                              \
        int jtry_rc_ = (x);           \
        if (jtry_rc_) return jtry_rc_; \
    } while (0)

#endif
