/* bench_roofline.c - see bench_roofline.h. */
#include "cli/bench_roofline.h"

#include <math.h>
#include <string.h>

static const char *prec_name[DS_RF_N_PREC] = {"int8", "bf16", "f32"};

/* The precision a product with weights of type t runs in, and how many such multiply-adds one of
 * the model's takes. */
static ds_rf_prec prec_of(ds_dtype t, ds_isa level, double *times) {
    *times = 1;
    if (t == DS_F32 || t == DS_F16) return DS_RF_F32;
    if (t == DS_BF16 || t == DS_NVFP4) /* nvfp4 is widened to BF16 at load */
        return level == DS_ISA_AVX512 && ds_cpu()->avx512bf16 ? DS_RF_BF16 : DS_RF_F32;
    if (t == DS_Q8_0 && level != DS_ISA_REF) *times = 2; /* the activations' residual term */
    return DS_RF_INT8;
}

void ds_roofline_count(const ds_model_file *f, int b, double keys, int kv_elem_bytes, int state_elem_bytes,
                       ds_isa level, ds_roofline_counts *out) {
    const ds_model_config *c = ds_model_config_of(f);
    memset(out, 0, sizeof *out);
    out->b = b;
    out->keys = keys;
    if (c->n_expert > 0) /* each expert is missed by one token with probability 1 - k/E */
        out->experts_touched = c->n_expert * (1.0 - pow(1.0 - (double)c->n_expert_used / c->n_expert, b));
    char mtp[32];
    snprintf(mtp, sizeof mtp, "blk.%d.", c->n_layer);
    for (int i = 0; i < ds_model_n_tensors(f); i++) {
        const ds_tensor *t = ds_model_tensor_at(f, i);
        if (t->n_dims < 2 || !strncmp(t->name, mtp, strlen(mtp))) continue;
        int head = !strcmp(t->name, "output.weight") || (c->tied_embeddings && !strcmp(t->name, "token_embd.weight"));
        if (!strcmp(t->name, "token_embd.weight") && !head) continue; /* a lookup, one row per token */
        double rows = (double)t->ne[1], row_bytes = (double)ds_dtype_row_bytes(t->type, t->ne[0]);
        double mats = t->n_dims > 2 ? (double)t->ne[2] : 1, used = mats;
        if (t->n_dims > 2 && c->n_expert > 0) {
            mats = out->experts_touched;  /* read: the experts some token of the batch uses */
            used = c->n_expert_used;      /* computed: k per token */
        }
        out->bytes_weights += row_bytes * rows * mats;
        if (strstr(t->name, "ssm_conv1d")) continue; /* not a product: counted with DeltaNet below */
        double mac = (double)b * (double)t->ne[0] * rows * used, times;
        ds_rf_prec p = prec_of(t->type, level, &times);
        out->mac_exec[p] += mac * times;
        if (head) out->mac_head += mac;
        else out->mac_weights += mac;
    }
    int n_attn = 0, n_gdn = 0;
    for (int l = 0; l < c->n_layer; l++) c->layer_full[l] ? n_attn++ : n_gdn++;
    /* attention: Q.K and P.V per query head over the cached positions; K and V read once per kv head */
    out->mac_attn = (double)b * n_attn * 2.0 * c->n_head * c->head_dim * keys;
    out->bytes_kv = (double)b * n_attn * keys * 2.0 * c->n_head_kv * c->head_dim * kv_elem_bytes;
    if (n_gdn) {
        double conv_dim = 2.0 * c->lin_k_heads * c->lin_k_dim + (double)c->lin_v_heads * c->lin_v_dim;
        double state = (double)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
        out->mac_gdn = (double)b * n_gdn * (4.0 * state + conv_dim * c->conv_kernel);
        out->bytes_state = 2.0 * b * n_gdn * (state + (c->conv_kernel - 1) * conv_dim) * state_elem_bytes;
    }
    out->mac_exec[DS_RF_F32] += out->mac_attn + out->mac_gdn;
}

void ds_roofline_eval(const ds_roofline_counts *c, double step_s, double read_gb_s, const ds_bench_peak *pk,
                      ds_roofline_row *r) {
    memset(r, 0, sizeof *r);
    r->c = *c;
    r->step_s = step_s;
    double bytes = c->bytes_weights + c->bytes_kv + c->bytes_state;
    double mac = c->mac_weights + c->mac_head + c->mac_attn + c->mac_gdn;
    double peak[DS_RF_N_PREC] = {pk->int8_gops, pk->bf16_gops > 0 ? pk->bf16_gops : pk->f32_gops, pk->f32_gops};
    r->gb_s = step_s > 0 ? bytes / step_s / 1e9 : 0;
    r->gop_s = step_s > 0 ? 2 * mac / step_s / 1e9 : 0;
    r->t_mem_s = read_gb_s > 0 ? bytes / (read_gb_s * 1e9) : 0;
    for (int p = 0; p < DS_RF_N_PREC; p++) {
        double t = peak[p] > 0 ? 2 * c->mac_exec[p] / (peak[p] * 1e9) : 0;
        r->t_compute_s += t;
        r->prec_frac[p] = step_s > 0 ? t / step_s : 0;
    }
    r->bw_frac = step_s > 0 ? r->t_mem_s / step_s : 0;
    r->compute_frac = step_s > 0 ? r->t_compute_s / step_s : 0;
    r->bound = r->t_mem_s >= r->t_compute_s ? "memory" : "compute";
}

void ds_roofline_print(FILE *o, const ds_roofline_row *rows, int n, double read_gb_s, const ds_bench_peak *pk,
                       int n_threads) {
    char bf16[48];
    if (pk->bf16_gops > 0) snprintf(bf16, sizeof bf16, "%.0f GOP/s", pk->bf16_gops);
    else snprintf(bf16, sizeof bf16, "none (BF16 runs as f32)");
    fprintf(o, "\nroofline (%s kernels, %d threads): read %.1f GB/s (probe); int8 %.0f GOP/s, bf16 %s, "
               "f32 %.0f GFLOP/s (dot-product and FMA loops on every thread)\n",
            ds_isa_name(pk->level), n_threads, read_gb_s, pk->int8_gops, bf16, pk->f32_gops);
    fprintf(o, "per decode step, multiply-adds in millions and MB moved (counted from the model's shapes):\n");
    fprintf(o, "| %-18s | %3s | %6s | %9s | %8s | %8s | %8s | %9s | %7s | %8s | %8s | %7s | %6s | %7s | %7s | %7s |\n",
            "test", "B", "keys", "M weights", "M head", "M attn", "M DNet", "MB weight", "MB KV", "MB state", "experts",
            "GB/s", "GOP/s", "% read", "% comp", "bound");
    fprintf(o, "|--------------------|----:|-------:|----------:|---------:|---------:|---------:|----------:|--------:|---------:|"
               "---------:|--------:|-------:|--------:|--------:|--------:|\n");
    for (int i = 0; i < n; i++) {
        const ds_roofline_row *r = &rows[i];
        char ex[16];
        if (r->c.experts_touched > 0) snprintf(ex, sizeof ex, "%.1f", r->c.experts_touched);
        else snprintf(ex, sizeof ex, "-");
        fprintf(o, "| %-18s | %3d | %6.1f | %9.1f | %8.1f | %8.2f | %8.2f | %9.1f | %7.2f | %8.2f | %8s | %7.1f | %6.1f | "
                   "%6.0f%% | %6.0f%% | %7s |\n",
                r->test, r->c.b, r->c.keys, r->c.mac_weights / 1e6, r->c.mac_head / 1e6, r->c.mac_attn / 1e6,
                r->c.mac_gdn / 1e6, r->c.bytes_weights / 1e6, r->c.bytes_kv / 1e6, r->c.bytes_state / 1e6, ex, r->gb_s,
                r->gop_s, 100 * r->bw_frac, 100 * r->compute_frac, r->bound);
    }
    fprintf(o, "(%% read: the probe's time for the bytes over the step's; %% comp: the peaks' time for the executed\n"
               " multiply-adds (int8 %s) over the step's; bound: the larger of the two)\n",
            "Q8_0 counted twice for its residual term");
}

void ds_roofline_json(FILE *o, const ds_roofline_row *rows, int n, double read_gb_s, const ds_bench_peak *pk) {
    fprintf(o, ", \"roofline\": {\"level\": \"%s\", \"read_gb_s\": %.2f, \"int8_gop_s\": %.1f, \"bf16_gop_s\": %.1f, "
               "\"f32_gop_s\": %.1f, \"steps\": [",
            ds_isa_name(pk->level), read_gb_s, pk->int8_gops, pk->bf16_gops, pk->f32_gops);
    for (int i = 0; i < n; i++) {
        const ds_roofline_row *r = &rows[i];
        fprintf(o, "%s{\"test\": \"%s\", \"b\": %d, \"keys\": %.2f, \"mac\": {\"weights\": %.0f, \"head\": %.0f, "
                   "\"attention\": %.0f, \"deltanet\": %.0f}, \"mac_executed\": {",
                i ? ", " : "", r->test, r->c.b, r->c.keys, r->c.mac_weights, r->c.mac_head, r->c.mac_attn, r->c.mac_gdn);
        for (int p = 0; p < DS_RF_N_PREC; p++) fprintf(o, "%s\"%s\": %.0f", p ? ", " : "", prec_name[p], r->c.mac_exec[p]);
        fprintf(o, "}, \"bytes\": {\"weights\": %.0f, \"kv\": %.0f, \"state\": %.0f}, \"experts_touched\": %.3f, "
                   "\"step_s\": %.6g, \"gb_s\": %.3f, \"gop_s\": %.3f, \"t_mem_s\": %.6g, \"t_compute_s\": %.6g, "
                   "\"bw_frac\": %.4f, \"compute_frac\": %.4f, \"frac_by_precision\": {",
                r->c.bytes_weights, r->c.bytes_kv, r->c.bytes_state, r->c.experts_touched, r->step_s, r->gb_s, r->gop_s,
                r->t_mem_s, r->t_compute_s, r->bw_frac, r->compute_frac);
        for (int p = 0; p < DS_RF_N_PREC; p++) fprintf(o, "%s\"%s\": %.4f", p ? ", " : "", prec_name[p], r->prec_frac[p]);
        fprintf(o, "}, \"bound\": \"%s\"}", r->bound);
    }
    fprintf(o, "]}");
}
