/* jinja_eval.c - the interpreter: @huggingface/jinja's Interpreter over our tree.
 *
 * Behaviour kept from HF because chat templates are written against it (and
 * because the reference test compares byte for byte):
 *   - undefined prints as nothing, and so does none; `x.y` of undefined or none
 *     is undefined, but `x[0]` of them is an error, as are `+`, `~`, `<`... with
 *     undefined or none on either side (`x in undefined` is false);
 *   - `==` is JavaScript's loose `==` on the underlying values: 1 == "1",
 *     none == undefined, and lists or dicts are equal only to themselves;
 *   - {% set %} binds in the current scope: a loop body or a macro call has its
 *     own, an if block does not; macros see the variables of where they are
 *     called from (not of where they were defined);
 *   - in a loop, the output of an iteration that ends in {% break %} or
 *     {% continue %} is dropped, and such an iteration does not count for
 *     {% else %} (HF builds each iteration's text apart and throws it away).
 * Known differences: function values cannot be printed (JavaScript would print
 * their source); `*args` / `**kwargs` unpacking in calls is refused at compile
 * time; case mapping covers one-to-one mappings plus the common special
 * cases; sort_keys=true orders keys by a simple stand-in for localeCompare.
 *
 * Every evaluation counts a step and a level of depth against the limits. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja/jinja_int.h"

static int exec_block(jr *r, const jlist *body, jscope *s, jbuf *out);
static int eval_expr(jr *r, const jnode *n, jscope *s, jv *out);

static int new_scope(jr *r, uint32_t pos, jscope *parent, jscope **out) {
    jscope *c = ds_jinja_arena_zalloc(&r->arena, sizeof *c);
    jv vars;
    if (!c || ds_jinja_value_new_object(r, pos, 0, JV_OBJECT, &vars)) return ds_jinja_fail_oom(r, pos);
    c->parent = parent;
    c->vars = vars.u.o;
    *out = c;
    return J_OK;
}

static int scope_set(jr *r, uint32_t pos, jscope *s, jstr name, jv v) { return ds_jinja_obj_set(r, pos, s->vars, name, v); }

/* Each HF Environment declares its own `namespace`, so that name resolves in
 * the innermost scope that has not assigned it; the other globals live in
 * the outermost scope only. */
static int lookup(jr *r, uint32_t pos, jscope *s, jstr name, jv *out) {
    for (jscope *c = s; c; c = c->parent) {
        const jv *v = ds_jinja_obj_get(c->vars, name.p, name.n);
        if (v) {
            *out = *v;
            return J_OK;
        }
        if (jstr_eq(name, "namespace") || !c->parent) {
            int found = ds_jinja_builtin_global(r, pos, name.p, name.n, out);
            if (found < 0) return J_ERR;
            if (found) return J_OK;
        }
    }
    *out = jv_undef();
    return J_OK;
}

static int enter(jr *r, uint32_t pos) {
    if (++r->steps > r->lim.max_steps) {
        r->depth++;
        return ds_jinja_fail(r, pos, DS_ENOMEM, "more than %llu evaluation steps", (unsigned long long)r->lim.max_steps);
    }
    if (++r->depth > r->lim.max_depth)
        return ds_jinja_fail(r, pos, DS_ENOMEM, "evaluation nested more than %d deep", r->lim.max_depth);
    return J_OK;
}

/* --- calls --- */

int ds_jinja_eval_call_args(jr *r, const jlist *args, jscope *s, jv **out, int *n_out, jobj **kw_out) {
    int n_pos = 0, n_kw = 0;
    for (int i = 0; i < args->n; i++) {
        if (args->v[i]->kind == N_KWARG) n_kw++;
        else n_pos++;
    }
    jv *v = ds_jinja_arena_alloc(&r->arena, (size_t)(n_pos + 1) * sizeof *v);   /* room for the kwargs object */
    if (!v) return ds_jinja_fail_oom(r, args->n ? args->v[0]->pos : 0);
    int k = 0;
    for (int i = 0; i < args->n; i++)   /* positional first, as runtime.ts evaluates them */
        if (args->v[i]->kind != N_KWARG) JTRY(eval_expr(r, args->v[i], s, &v[k++]));
    jobj *kw = NULL;
    if (n_kw) {
        jv o;
        JTRY(ds_jinja_value_new_object(r, args->v[0]->pos, (size_t)n_kw, JV_OBJECT, &o));
        kw = o.u.o;
        kw->kwargs = 1;
        for (int i = 0; i < args->n; i++) {
            const jnode *a = args->v[i];
            if (a->kind != N_KWARG) continue;
            if (ds_jinja_obj_get(kw, a->s.p, a->s.n))
                return ds_jinja_fail(r, a->pos, DS_EINVAL, "keyword argument '%.*s' given twice", (int)a->s.n, a->s.p);
            jv val;
            JTRY(eval_expr(r, a->a, s, &val));
            JTRY(ds_jinja_obj_set(r, a->pos, kw, a->s, val));
        }
    }
    *out = v;
    *n_out = n_pos;
    *kw_out = kw;
    return J_OK;
}

/* bindMacroArguments, then the body's text. params: N_IDENT or N_KWARG. */
static int call_macro(jr *r, uint32_t pos, const char *what, const jlist *params, const jlist *body, int flags,
                      jscope *parent, jv *args, int n, jv *out) {
    jscope *ms;
    JTRY(new_scope(r, pos, parent, &ms));
    const jobj *kw = NULL;
    if (n > 0 && args[n - 1].k == JV_OBJECT && args[n - 1].u.o->kwargs) kw = args[--n].u.o;
    unsigned char *used = NULL, *have = NULL;
    if (kw && kw->n && !(used = ds_jinja_arena_zalloc(&r->arena, kw->n))) return ds_jinja_fail_oom(r, pos);
    if (params->n && !(have = ds_jinja_arena_zalloc(&r->arena, (size_t)params->n))) return ds_jinja_fail_oom(r, pos);
    for (int i = 0; i < params->n; i++) {
        const jnode *p = params->v[i];
        jv val = jv_undef();
        if (i < n) {
            val = args[i];
            have[i] = 1;
        } else if (kw) {
            for (size_t k = 0; k < kw->n; k++)
                if (!used[k] && jstr_same(kw->keys[k], p->s)) {
                    used[k] = 1;
                    val = kw->vals[k];
                    have[i] = 1;
                }
        }
        JTRY(scope_set(r, pos, ms, p->s, val));
    }
    jv rest_kw;
    JTRY(ds_jinja_value_new_object(r, pos, 0, JV_OBJECT, &rest_kw));
    if (kw)
        for (size_t k = 0; k < kw->n; k++)
            if (!used[k]) JTRY(ds_jinja_obj_set(r, pos, rest_kw.u.o, kw->keys[k], kw->vals[k]));
    if (flags & JN_USES_KWARGS) {
        JTRY(scope_set(r, pos, ms, (jstr){"kwargs", 6}, rest_kw));
    } else if (rest_kw.u.o->n) {
        return ds_jinja_fail(r, pos, DS_EINVAL, "macro %s takes no keyword argument '%.*s'", what,
                       (int)rest_kw.u.o->keys[0].n, rest_kw.u.o->keys[0].p);
    }
    if (flags & JN_USES_VARARGS) {
        jv extra;
        size_t m = n > params->n ? (size_t)(n - params->n) : 0;
        JTRY(ds_jinja_value_new_array(r, pos, m, &extra));
        for (size_t k = 0; k < m; k++) extra.u.a->items[k] = args[params->n + (int)k];
        JTRY(scope_set(r, pos, ms, (jstr){"varargs", 7}, extra));
    } else if (n > params->n) {
        return ds_jinja_fail(r, pos, DS_EINVAL, "macro %s takes at most %d argument(s)", what, params->n);
    }
    for (int i = 0; i < params->n; i++) {   /* defaults see every parameter already bound */
        const jnode *p = params->v[i];
        if (p->kind != N_KWARG || have[i]) continue;
        jv val;
        JTRY(eval_expr(r, p->a, ms, &val));
        JTRY(scope_set(r, pos, ms, p->s, val));
    }
    jbuf b = {0};
    int rc = exec_block(r, body, ms, &b);
    if (rc) return rc;   /* break/continue travel on to the caller's loop, as HF's exceptions do */
    return ds_jinja_value_buf_to_str(r, pos, &b, out);
}

static int call_function(jr *r, uint32_t pos, jv fn, jv *args, int n, jscope *s, jv *out) {
    if (fn.k != JV_FUNC) return ds_jinja_fail(r, pos, DS_EINVAL, "cannot call %s: it is not a function", ds_jinja_value_type_name(fn));
    const jfunc *f = fn.u.f;
    if (f->kind == JF_MACRO) {
        char what[80];
        snprintf(what, sizeof what, "'%.*s'", (int)(f->node->s.n > 60 ? 60 : f->node->s.n), f->node->s.p);
        return call_macro(r, pos, what, &f->node->l1, &f->node->l2, f->node->flag, s, args, n, out);
    }
    if (f->kind == JF_CALLER)
        return call_macro(r, pos, "None", &f->node->l1, &f->node->l2, f->node->flag, f->scope, args, n, out);
    return ds_jinja_builtin_call(r, pos, f, args, n, out);
}

/* --- expressions --- */

static int eval_slice(jr *r, const jnode *n, jv obj, jscope *s, jv *out) {
    if (obj.k != JV_ARRAY && obj.k != JV_STR) return ds_jinja_fail(r, n->pos, DS_EINVAL, "only a list or a string can be sliced");
    jv part[3];
    const jnode *nodes[3] = {n->a, n->b, n->c};
    for (int i = 0; i < 3; i++) {
        part[i] = jv_undef();
        if (nodes[i]) JTRY(eval_expr(r, nodes[i], s, &part[i]));
        if (part[i].k != JV_INT && part[i].k != JV_UNDEF)
            return ds_jinja_fail(r, n->pos, DS_EINVAL, "slice indices must be integers or undefined, got %s",
                           ds_jinja_value_type_name(part[i]));
    }
    /* a string is sliced by code points (Array.from) */
    size_t *cp_at = NULL, len;
    if (obj.k == JV_ARRAY) {
        len = obj.u.a->n;
    } else {
        jstr str = obj.u.s;
        len = 0;
        for (size_t i = 0, k; i < str.n; i += k, len++) ds_jinja_wtf8_decode(str.p + i, str.n - i, &k);
        if (!(cp_at = ds_jinja_arena_alloc(&r->arena, (len + 1) * sizeof *cp_at))) return ds_jinja_fail_oom(r, n->pos);
        size_t c = 0;
        for (size_t i = 0, k; i < str.n; i += k) {
            cp_at[c++] = i;
            ds_jinja_wtf8_decode(str.p + i, str.n - i, &k);
        }
        cp_at[len] = str.n;
    }
    double L = (double)len, step = part[2].k == JV_INT ? part[2].u.n : 1, start, stop;
    int dir = step > 0 ? 1 : step < 0 ? -1 : 0;
    if (dir >= 0) {
        start = part[0].k == JV_UNDEF ? 0 : part[0].u.n < 0 ? fmax(L + part[0].u.n, 0) : fmin(part[0].u.n, L);
        stop = part[1].k == JV_UNDEF ? L : part[1].u.n < 0 ? fmax(L + part[1].u.n, 0) : fmin(part[1].u.n, L);
    } else {
        start = part[0].k == JV_UNDEF ? L - 1 : part[0].u.n < 0 ? fmax(L + part[0].u.n, -1) : fmin(part[0].u.n, L - 1);
        stop = part[1].k == JV_UNDEF ? -1 : part[1].u.n < -1 ? fmax(L + part[1].u.n, -1) : fmin(part[1].u.n, L - 1);
    }
    size_t count = 0;
    if (dir != 0 && dir * start < dir * stop) count = (size_t)ceil((dir * stop - dir * start) / fabs(step));
    if (obj.k == JV_ARRAY) {
        JTRY(ds_jinja_value_new_array(r, n->pos, count, out));
        double i = start;
        for (size_t k = 0; k < count; k++, i += step) out->u.a->items[k] = obj.u.a->items[(size_t)i];
        return J_OK;
    }
    jbuf b = {0};
    double i = start;
    for (size_t k = 0; k < count; k++, i += step) {
        size_t at = (size_t)i;
        JTRY(ds_jinja_buf_put(r, n->pos, &b, obj.u.s.p + cp_at[at], cp_at[at + 1] - cp_at[at]));
    }
    return ds_jinja_value_buf_to_str(r, n->pos, &b, out);
}

static int eval_member(jr *r, const jnode *n, jscope *s, jv *out) {
    jv obj, prop;
    JTRY(eval_expr(r, n->a, s, &obj));
    if (n->flag) {
        if (n->b->kind == N_SLICE) return eval_slice(r, n->b, obj, s, out);
        JTRY(eval_expr(r, n->b, s, &prop));
    } else if (n->b->kind == N_INT) {
        prop = jv_int(n->b->num);
    } else {
        prop = jv_str(n->b->s.p, n->b->s.n);
    }
    return ds_jinja_builtin_member(r, n->pos, obj, prop, out);
}

static const char *op_name(int op) {
    static const char *const NAMES[] = {"or", "and", "not", "==", "!=", "<", ">", "<=", ">=", "in", "not in",
                                        "+",  "-",   "~",   "*",  "/",  "//", "%", "**", "-", "+"};
    return op >= 0 && op < (int)(sizeof NAMES / sizeof NAMES[0]) ? NAMES[op] : "?";
}

static int raw_concat(jr *r, uint32_t pos, jv a, jv b, jv *out) {
    jbuf buf = {0};
    JTRY(ds_jinja_value_raw_string(r, pos, a, &buf));
    JTRY(ds_jinja_value_raw_string(r, pos, b, &buf));
    return ds_jinja_value_buf_to_str(r, pos, &buf, out);
}

static int eval_binary(jr *r, const jnode *n, jscope *s, jv *out) {
    uint32_t pos = n->pos;
    int op = n->op;
    jv l, rt;
    JTRY(eval_expr(r, n->a, s, &l));
    if (op == OP_AND) return ds_jinja_value_truthy(l) ? eval_expr(r, n->b, s, out) : (*out = l, J_OK);
    if (op == OP_OR) return ds_jinja_value_truthy(l) ? (*out = l, J_OK) : eval_expr(r, n->b, s, out);
    JTRY(eval_expr(r, n->b, s, &rt));
    if (op == OP_EQ || op == OP_NE) {
        int eq;
        JTRY(ds_jinja_charge_scan(r, pos, (l.k == JV_STR ? l.u.s.n : 0) + (rt.k == JV_STR ? rt.u.s.n : 0)));
        JTRY(ds_jinja_value_loose_eq(r, pos, l, rt, &eq));
        *out = jv_bool(op == OP_EQ ? eq : !eq);
        return J_OK;
    }
    if (l.k == JV_UNDEF || rt.k == JV_UNDEF) {
        if (rt.k == JV_UNDEF && (op == OP_IN || op == OP_NOTIN)) {
            *out = jv_bool(op == OP_NOTIN);
            return J_OK;
        }
        return ds_jinja_fail(r, pos, DS_EINVAL, "cannot apply '%s' to undefined", op_name(op));
    }
    if (l.k == JV_NULL || rt.k == JV_NULL) return ds_jinja_fail(r, pos, DS_EINVAL, "cannot apply '%s' to none", op_name(op));
    if (op == OP_CONCAT) return raw_concat(r, pos, l, rt, out);
    int lnum = l.k == JV_INT || l.k == JV_FLOAT, rnum = rt.k == JV_INT || rt.k == JV_FLOAT;
    if (op == OP_POW && (lnum || l.k == JV_BOOL) && (rnum || rt.k == JV_BOOL)) {
        double a = l.k == JV_BOOL ? l.u.b : l.u.n, b = rt.k == JV_BOOL ? rt.u.b : rt.u.n;
        if (a == 0 && b < 0) return ds_jinja_fail(r, pos, DS_EINVAL, "0.0 cannot be raised to a negative power");
        double res = pow(a, b);
        if (!isfinite(res)) return ds_jinja_fail(r, pos, DS_EINVAL, "exponentiation result is not a finite real number");
        *out = l.k == JV_FLOAT || rt.k == JV_FLOAT || b < 0 ? jv_float(res) : jv_int(res);
        return J_OK;
    }
    if (lnum && rnum) {
        double a = l.u.n, b = rt.u.n;
        int fl = l.k == JV_FLOAT || rt.k == JV_FLOAT;
        switch (op) {
        case OP_ADD: *out = fl ? jv_float(a + b) : jv_int(a + b); return J_OK;
        case OP_SUB: *out = fl ? jv_float(a - b) : jv_int(a - b); return J_OK;
        case OP_MUL: *out = fl ? jv_float(a * b) : jv_int(a * b); return J_OK;
        case OP_DIV: *out = jv_float(a / b); return J_OK;
        case OP_FLOORDIV: *out = fl ? jv_float(floor(a / b)) : jv_int(floor(a / b)); return J_OK;
        case OP_MOD: *out = fl ? jv_float(fmod(a, b)) : jv_int(fmod(a, b)); return J_OK;
        case OP_LT: *out = jv_bool(a < b); return J_OK;
        case OP_GT: *out = jv_bool(a > b); return J_OK;
        case OP_GE: *out = jv_bool(a >= b); return J_OK;
        case OP_LE: *out = jv_bool(a <= b); return J_OK;
        default: break;
        }
    } else if (l.k == JV_ARRAY && rt.k == JV_ARRAY) {
        if (op == OP_ADD) {
            JTRY(ds_jinja_value_new_array(r, pos, l.u.a->n + rt.u.a->n, out));
            if (l.u.a->n) memcpy(out->u.a->items, l.u.a->items, l.u.a->n * sizeof(jv));
            if (rt.u.a->n) memcpy(out->u.a->items + l.u.a->n, rt.u.a->items, rt.u.a->n * sizeof(jv));
            return J_OK;
        }
    } else if (rt.k == JV_ARRAY) {
        if (op == OP_IN || op == OP_NOTIN) {
            int member = 0;
            JTRY(ds_jinja_charge_scan(r, pos, rt.u.a->n * 8 + (l.k == JV_STR ? l.u.s.n : 0)));
            for (size_t i = 0; i < rt.u.a->n && !member; i++) member = ds_jinja_value_strict_eq(rt.u.a->items[i], l);
            *out = jv_bool(op == OP_IN ? member : !member);
            return J_OK;
        }
    }
    if ((l.k == JV_STR || rt.k == JV_STR) && op == OP_ADD) return raw_concat(r, pos, l, rt, out);
    if (l.k == JV_STR && rt.k == JV_STR && (op == OP_IN || op == OP_NOTIN)) {
        JTRY(ds_jinja_charge_scan(r, pos, rt.u.s.n));
        int found = l.u.s.n == 0 || (l.u.s.n <= rt.u.s.n && memmem(rt.u.s.p, rt.u.s.n, l.u.s.p, l.u.s.n));
        *out = jv_bool(op == OP_IN ? found : !found);
        return J_OK;
    }
    if (l.k == JV_STR && rt.k == JV_OBJECT && (op == OP_IN || op == OP_NOTIN)) {
        int found = ds_jinja_obj_get(rt.u.o, l.u.s.p, l.u.s.n) != NULL;
        *out = jv_bool(op == OP_IN ? found : !found);
        return J_OK;
    }
    return ds_jinja_fail(r, pos, DS_EINVAL, "cannot apply '%s' to %s and %s", op_name(op), ds_jinja_value_type_name(l), ds_jinja_value_type_name(rt));
}

static int eval_unary(jr *r, const jnode *n, jscope *s, jv *out) {
    jv v;
    JTRY(eval_expr(r, n->a, s, &v));
    if (n->op == OP_NOT) {
        *out = jv_bool(!ds_jinja_value_truthy(v));
        return J_OK;
    }
    if (v.k != JV_INT && v.k != JV_FLOAT && v.k != JV_BOOL)
        return ds_jinja_fail(r, n->pos, DS_EINVAL, "cannot apply unary '%s' to %s", op_name(n->op), ds_jinja_value_type_name(v));
    double x = v.k == JV_BOOL ? v.u.b : v.u.n, sign = n->op == OP_NEG ? -1 : 1;
    *out = v.k == JV_FLOAT ? jv_float(sign * x) : jv_int(sign * x);
    return J_OK;
}

static int eval_node(jr *r, const jnode *n, jscope *s, jv *out) {
    switch (n->kind) {
    case N_STR: *out = jv_str(n->s.p, n->s.n); return J_OK;
    case N_INT: *out = jv_int(n->num); return J_OK;
    case N_FLOAT: *out = jv_float(n->num); return J_OK;
    case N_IDENT: return lookup(r, n->pos, s, n->s, out);
    case N_ARRAY:
    case N_TUPLE:
        JTRY(ds_jinja_value_new_array(r, n->pos, (size_t)n->l1.n, out));
        out->u.a->tuple = n->kind == N_TUPLE;
        for (int i = 0; i < n->l1.n; i++) JTRY(eval_expr(r, n->l1.v[i], s, &out->u.a->items[i]));
        return J_OK;
    case N_DICT:
        JTRY(ds_jinja_value_new_object(r, n->pos, (size_t)n->l1.n, JV_OBJECT, out));
        for (int i = 0; i < n->l1.n; i++) {
            jv k, v;
            JTRY(eval_expr(r, n->l1.v[i], s, &k));
            if (k.k != JV_STR) return ds_jinja_fail(r, n->l1.v[i]->pos, DS_EINVAL, "dict keys must be strings, got %s", ds_jinja_value_type_name(k));
            JTRY(eval_expr(r, n->l2.v[i], s, &v));
            JTRY(ds_jinja_obj_set(r, n->pos, out->u.o, k.u.s, v));
        }
        return J_OK;
    case N_MEMBER: return eval_member(r, n, s, out);
    case N_CALL: {
        jv *args, fn;
        int na;
        jobj *kw;
        JTRY(ds_jinja_eval_call_args(r, &n->l1, s, &args, &na, &kw));
        if (kw) {   /* the call passes its keyword arguments as one last argument */
            args[na].k = JV_OBJECT;
            args[na++].u.o = kw;
        }
        JTRY(eval_expr(r, n->a, s, &fn));
        return call_function(r, n->pos, fn, args, na, s, out);
    }
    case N_UNARY: return eval_unary(r, n, s, out);
    case N_BINARY: return eval_binary(r, n, s, out);
    case N_FILTER: {
        jv v;
        JTRY(eval_expr(r, n->a, s, &v));
        return ds_jinja_builtin_filter(r, n, v, s, out);
    }
    case N_TEST: {
        jv v;
        int res;
        JTRY(eval_expr(r, n->a, s, &v));
        JTRY(ds_jinja_builtin_test(r, n, n->s.p, n->s.n, &v, 1, &res));
        *out = jv_bool(n->flag ? !res : res);
        return J_OK;
    }
    case N_SELECT: {
        jv t;
        JTRY(eval_expr(r, n->b, s, &t));
        if (!ds_jinja_value_truthy(t)) {
            *out = jv_undef();
            return J_OK;
        }
        return eval_expr(r, n->a, s, out);
    }
    case N_TERNARY: {
        jv t;
        JTRY(eval_expr(r, n->a, s, &t));
        return eval_expr(r, ds_jinja_value_truthy(t) ? n->b : n->c, s, out);
    }
    default: return ds_jinja_fail(r, n->pos, DS_EINVAL, "this is not an expression");
    }
}

static int eval_expr(jr *r, const jnode *n, jscope *s, jv *out) {
    int rc = enter(r, n->pos);
    if (!rc) rc = eval_node(r, n, s, out);
    r->depth--;
    return rc;
}

/* --- statements --- */

/* Binds a loop or set target (a name, or names to unpack a list into). */
static int bind_target(jr *r, const jnode *target, jv v, jscope *s, const char *what) {
    if (target->kind == N_IDENT) return scope_set(r, target->pos, s, target->s, v);
    for (int j = 0; j < target->l1.n; j++) {
        const jnode *t = target->l1.v[j];
        if (t->kind != N_IDENT) return ds_jinja_fail(r, t->pos, DS_EINVAL, "can only unpack %s into names", what);
        JTRY(scope_set(r, t->pos, s, t->s, v.u.a->items[j]));
    }
    return J_OK;
}

static int check_unpack(jr *r, const jnode *target, jv v, int allow_tuple) {
    if (target->kind != N_TUPLE) return J_OK;
    if (v.k != JV_ARRAY || (!allow_tuple && v.u.a->tuple))
        return ds_jinja_fail(r, target->pos, DS_EINVAL, "cannot unpack %s", ds_jinja_value_type_name(v));
    if ((size_t)target->l1.n != v.u.a->n)
        return ds_jinja_fail(r, target->pos, DS_EINVAL, "too %s items to unpack (%d names, %zu items)",
                       (size_t)target->l1.n > v.u.a->n ? "few" : "many", target->l1.n, v.u.a->n);
    return J_OK;
}

static const jstr LOOP_KEYS[9] = {{"index", 5},  {"index0", 6}, {"revindex", 8}, {"revindex0", 9}, {"first", 5},
                                  {"last", 4},   {"length", 6}, {"previtem", 8}, {"nextitem", 8}};

static int exec_for(jr *r, const jnode *n, jscope *outer, jbuf *out) {
    uint32_t pos = n->pos;
    jscope *s;
    JTRY(new_scope(r, pos, outer, &s));
    const jnode *iter_node = n->b, *test = NULL;
    if (iter_node->kind == N_SELECT) {
        test = iter_node->b;
        iter_node = iter_node->a;
    }
    jv it;
    JTRY(eval_expr(r, iter_node, s, &it));
    if (it.k == JV_OBJECT) {
        jv keys;
        JTRY(ds_jinja_value_new_array(r, pos, it.u.o->n, &keys));
        for (size_t i = 0; i < it.u.o->n; i++) keys.u.a->items[i] = jv_str(it.u.o->keys[i].p, it.u.o->keys[i].n);
        it = keys;
    } else if (it.k != JV_ARRAY) {
        return ds_jinja_fail(r, pos, DS_EINVAL, "cannot loop over %s", ds_jinja_value_type_name(it));
    }
    jarr *src = it.u.a;
    jv *items = src->items;
    size_t n_items = src->n;
    if (test || n->a->kind == N_TUPLE) {
        if (n_items && !(items = ds_jinja_arena_alloc(&r->arena, n_items * sizeof *items))) return ds_jinja_fail_oom(r, pos);
        size_t m = 0;
        for (size_t i = 0; i < src->n; i++) {
            jv cur = src->items[i];
            JTRY(check_unpack(r, n->a, cur, 0));
            if (test) {
                jscope *ls;
                JTRY(new_scope(r, pos, s, &ls));
                JTRY(bind_target(r, n->a, cur, ls, "a loop item"));
                jv t;
                JTRY(eval_expr(r, test, ls, &t));
                if (!ds_jinja_value_truthy(t)) continue;
            }
            items[m++] = cur;
        }
        n_items = m;
    }
    int none = 1;
    for (size_t i = 0; i < n_items; i++) {
        if (++r->steps > r->lim.max_steps)
            return ds_jinja_fail(r, pos, DS_ENOMEM, "more than %llu evaluation steps", (unsigned long long)r->lim.max_steps);
        /* a fresh loop object per iteration, as HF makes one (a template may
         * keep it); all of them share one key table, and nothing ever adds
         * keys to a dict that is not a namespace */
        jobj *lo = ds_jinja_arena_zalloc(&r->arena, sizeof *lo);
        jv *vals = ds_jinja_arena_alloc(&r->arena, 9 * sizeof *vals);
        if (!lo || !vals) return ds_jinja_fail_oom(r, pos);
        double len = (double)n_items, k = (double)i;
        vals[0] = jv_int(k + 1);
        vals[1] = jv_int(k);
        vals[2] = jv_int(len - k);
        vals[3] = jv_int(len - k - 1);
        vals[4] = jv_bool(i == 0);
        vals[5] = jv_bool(i + 1 == n_items);
        vals[6] = jv_int(len);
        vals[7] = i > 0 ? items[i - 1] : jv_undef();
        vals[8] = i + 1 < n_items ? items[i + 1] : jv_undef();
        lo->keys = (jstr *)LOOP_KEYS;
        lo->vals = vals;
        lo->n = lo->cap = 9;
        jv loop = {.k = JV_OBJECT, .u.o = lo};
        JTRY(scope_set(r, pos, s, (jstr){"loop", 4}, loop));
        JTRY(bind_target(r, n->a, items[i], s, "a loop item"));
        size_t mark = out->n;
        int rc = exec_block(r, &n->l1, s, out);
        if (rc == J_CONTINUE || rc == J_BREAK) {
            out->n = mark;
            if (rc == J_BREAK) break;
            continue;
        }
        if (rc) return rc;
        none = 0;
    }
    if (none) return exec_block(r, &n->l2, s, out);
    return J_OK;
}

static int exec_set(jr *r, const jnode *n, jscope *s) {
    jv v;
    if (n->b) {
        JTRY(eval_expr(r, n->b, s, &v));
    } else {
        jbuf b = {0};
        JTRY(exec_block(r, &n->l1, s, &b));
        JTRY(ds_jinja_value_buf_to_str(r, n->pos, &b, &v));
    }
    const jnode *t = n->a;
    if (t->kind == N_IDENT) return scope_set(r, t->pos, s, t->s, v);
    if (t->kind == N_TUPLE) {
        JTRY(check_unpack(r, t, v, 1));
        return bind_target(r, t, v, s, "a value");
    }
    if (t->kind != N_MEMBER)   /* checked here, not when compiling, as HF does */
        return ds_jinja_fail(r, t->pos, DS_EINVAL, "can only assign to a name, names or a namespace attribute");
    jv obj;
    JTRY(eval_expr(r, t->a, s, &obj));
    if (obj.k != JV_NS) return ds_jinja_fail(r, t->pos, DS_EINVAL, "can only assign attributes of a namespace(), not of %s", ds_jinja_value_type_name(obj));
    if (t->b->kind != N_IDENT) return ds_jinja_fail(r, t->pos, DS_EINVAL, "can only assign to a named attribute");
    return ds_jinja_obj_set(r, t->pos, obj.u.o, t->b->s, v);
}

static int exec_callblock(jr *r, const jnode *n, jscope *s, jv *out) {
    jv caller, fn, *args;
    JTRY(ds_jinja_value_new_func(r, n->pos, JF_CALLER, 0, jv_undef(), n, s, &caller));
    int na;
    jobj *kw;
    const jnode *call = n->a;
    JTRY(ds_jinja_eval_call_args(r, &call->l1, s, &args, &na, &kw));
    jv kwv;
    if (!kw) {   /* the call always passes a (maybe empty) keyword object here */
        JTRY(ds_jinja_value_new_object(r, n->pos, 0, JV_OBJECT, &kwv));
        kwv.u.o->kwargs = 1;
    } else {
        kwv.k = JV_OBJECT;
        kwv.u.o = kw;
    }
    args[na++] = kwv;
    JTRY(eval_expr(r, call->a, s, &fn));
    if (fn.k != JV_FUNC) return ds_jinja_fail(r, n->pos, DS_EINVAL, "cannot call %s: it is not a function", ds_jinja_value_type_name(fn));
    jscope *env;
    JTRY(new_scope(r, n->pos, s, &env));
    JTRY(scope_set(r, n->pos, env, (jstr){"caller", 6}, caller));
    return call_function(r, n->pos, fn, args, na, env, out);
}

static int emit(jr *r, uint32_t pos, jv v, jbuf *out) {
    if (v.k == JV_NULL || v.k == JV_UNDEF) return J_OK;
    return ds_jinja_value_render(r, pos, v, out);
}

static int exec_stmt(jr *r, const jnode *n, jscope *s, jbuf *out) {
    switch (n->kind) {
    case S_COMMENT: return J_OK;
    case S_BREAK: return J_BREAK;
    case S_CONTINUE: return J_CONTINUE;
    case S_IF: {
        jv t;
        JTRY(eval_expr(r, n->a, s, &t));
        return exec_block(r, ds_jinja_value_truthy(t) ? &n->l1 : &n->l2, s, out);
    }
    case S_FOR: return exec_for(r, n, s, out);
    case S_SET: return exec_set(r, n, s);
    case S_MACRO: {
        jv f;
        JTRY(ds_jinja_value_new_func(r, n->pos, JF_MACRO, 0, jv_undef(), n, NULL, &f));
        return scope_set(r, n->pos, s, n->s, f);
    }
    case S_CALLBLOCK: {
        jv v;
        JTRY(exec_callblock(r, n, s, &v));
        return emit(r, n->pos, v, out);
    }
    case S_FILTERBLOCK: {
        jbuf b = {0};
        jv text, v;
        JTRY(exec_block(r, &n->l1, s, &b));
        JTRY(ds_jinja_value_buf_to_str(r, n->pos, &b, &text));
        JTRY(ds_jinja_builtin_filter(r, n->a, text, s, &v));
        return emit(r, n->pos, v, out);
    }
    default: {
        jv v;
        JTRY(eval_expr(r, n, s, &v));
        return emit(r, n->pos, v, out);
    }
    }
}

static int exec_block(jr *r, const jlist *body, jscope *s, jbuf *out) {
    for (int i = 0; i < body->n; i++) {
        const jnode *n = body->v[i];
        int rc = enter(r, n->pos);
        if (!rc) rc = exec_stmt(r, n, s, out);
        r->depth--;
        if (rc) return rc;
    }
    return J_OK;
}

int ds_jinja_eval_template(jr *r, const ds_jinja *t, const json_t *ctx, jbuf *out) {
    jscope *g;
    JTRY(new_scope(r, UINT32_MAX, NULL, &g));
    if (ctx && !json_is_object(ctx)) return ds_jinja_fail(r, UINT32_MAX, DS_EINVAL, "the render context must be a JSON object");
    const char *k;
    size_t kn;
    json_t *c;
    if (ctx) json_object_keylen_foreach((json_t *)ctx, k, kn, c) {
        if (ds_jinja_builtin_is_global_name(k, kn))   /* HF refuses to declare these twice */
            return ds_jinja_fail(r, UINT32_MAX, DS_EINVAL, "context variable '%s' is a built-in name", k);
        jv v;
        JTRY(ds_jinja_value_from_json(r, c, &v, 0));
        JTRY(scope_set(r, UINT32_MAX, g, (jstr){k, kn}, v));
    }
    int rc = exec_block(r, &t->body, g, out);
    if (rc == J_BREAK || rc == J_CONTINUE) return ds_jinja_fail(r, UINT32_MAX, DS_EINVAL, "{%% break %%} or {%% continue %%} outside a loop");
    return rc;
}
