/* cmd_make_model.c - `deltaserve make-model`: writes a deterministic
 * random-weight model in a real shape, as GGUF or a Hugging Face directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "loading/model_shapes.h"
#include "model/model_make.h"
#include "model/model_make_policy.h"

static void usage(FILE *f) {
    char types[512] = "";
    size_t line = 0; /* characters on the current line of the list */
    for (int i = 0; i < ds_file_type_count(); i++) {
        const char *name = ds_file_type_at(i)->name;
        if (line + strlen(name) + 1 > 72) {
            strncat(types, "\n                     ", sizeof types - strlen(types) - 1);
            line = 0;
        }
        strncat(types, " ", sizeof types - strlen(types) - 1);
        strncat(types, name, sizeof types - strlen(types) - 1);
        line += strlen(name) + 1;
    }
    fprintf(f,
            "usage: deltaserve make-model --shape NAME --out PATH [options]\n"
            "  --shape NAME        model configuration (see below)\n"
            "  --layers N          override the number of decoder layers\n"
            "  --yarn F            YaRN rope scaling with factor F over the shape's context (written as\n"
            "                      Hugging Face's rope_type \"yarn\" / llama.cpp's rope.scaling.* keys)\n"
            "  --dtype T           file type, as llama-quantize names them (any case; default f32): the\n"
            "                      type of each tensor is the one llama-quantize gives it (safetensors:\n"
            "                      f32, f16, bf16). GGUF file types:\n"
            "                     %s\n"
            "  --tensor-type R=T   GGUF: tensors whose name the regex R matches get ggml type T (q4_K,\n"
            "                      iq4_nl, ...) instead; repeatable, the first match decides\n"
            "  --format F          gguf | safetensors (a Hugging Face directory); default gguf\n"
            "                      (safetensors also takes --dtype fp8: float8 e4m3 matrices with 128x128\n"
            "                      block scales, as the official *-FP8 releases)\n"
            "  --seed S            weight seed (default 1)\n"
            "  --scale X           weight scale: matrices get std X/sqrt(fan_in) (default 1)\n"
            "  --tokenizer FILE    use this tokenizer.json instead of a generated vocabulary\n"
            "  --no-mtp            leave out the MTP block\n"
            "  --mtp-out PATH      gguf: write the MTP block to its own file PATH (with the shared embedding\n"
            "                      and head) and --out without it, as llama.cpp's --mtp / --no-mtp do\n"
            "  --hf-flat           safetensors: text-only layout (model.*, no text_config)\n"
            "  --split-experts     safetensors: one tensor per expert instead of fused stacks\n"
            "  --shard-mb N        safetensors: shards of about N MiB with an index\n"
            "  --mtp-agree P       make the MTP head draft what the model says for a fraction P (0..1) of\n"
            "                      tokens, for testing and measuring speculative decoding\n"
            "  --vocab-skew A      scale output-head row v by (1 + v/1024)^-A so that the model's choices\n"
            "                      fall mostly on low ids, as a real model's do on a merge-ranked BPE\n"
            "                      vocabulary (0.11: about 96%% below id 32768 on a 248k vocabulary)\n"
            "  --threads N         quantise on N threads (default: one per core); the file is the same for any N\n"
            "  --mmproj PATH       also write the shape's vision tower (random, the real shapes) as llama.cpp's\n"
            "                      mmproj GGUF file PATH (projector qwen3vl_merger)\n"
            "  --vision            safetensors: put the vision tower in the directory (model.visual.*)\n"
            "  --vision-layers N   the tower's block count (default: the shape's)\n"
            "  --deepstack LIST    DeepStack mergers after these blocks, e.g. 0,1 (Qwen3-VL style; default:\n"
            "                      the shape's, none for Qwen3.5; 'none' for none)\n"
            "  --out PATH          output file (gguf) or directory (safetensors)\n"
            "shapes:\n",
            types);
    for (int i = 0; i < ds_model_shape_count(); i++)
        fprintf(f, "  %-16s %s\n", ds_model_shape_at(i)->name, ds_model_shape_at(i)->description);
}

/* --deepstack 5,11,17 (block indexes, increasing) or none */
static int parse_deepstack(const char *v, ds_make_options *o) {
    o->deepstack_set = 1;
    o->n_deepstack = 0;
    if (!strcmp(v, "none")) return 0;
    const char *p = v;
    for (;;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x >= DS_MAX_LAYERS || o->n_deepstack == DS_MAX_DEEPSTACK ||
            (o->n_deepstack && x <= o->deepstack[o->n_deepstack - 1]) || (*end && *end != ',')) {
            fprintf(stderr, "deltaserve make-model: --deepstack '%s' is not 'none' or up to %d increasing block "
                    "indexes separated by commas\n", v, DS_MAX_DEEPSTACK);
            return 1;
        }
        o->deepstack[o->n_deepstack++] = (int)x;
        if (!*end) return 0;
        p = end + 1;
    }
}

/* tensor_types: room for the --tensor-type values (one per argument at most) */
static int make_model(int argc, char **argv, const char **tensor_types) {
    ds_make_options o = {.dtype = "f32", .format = DS_FORMAT_GGUF, .seed = 1, .scale = 1.0f,
                         .tensor_types = tensor_types};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        double x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-mtp")) {
            o.no_mtp = 1;
        } else if (!strcmp(a, "--hf-flat")) {
            o.hf_flat = 1;
        } else if (!strcmp(a, "--split-experts")) {
            o.split_experts = 1;
        } else if (!strcmp(a, "--vision")) {
            o.vision = 1;
        } else if (!(v = ds_arg_value(argc, argv, &i))) {
            return 2;
        } else if (!strcmp(a, "--shape")) {
            o.shape = v;
        } else if (!strcmp(a, "--layers")) {
            if (ds_arg_int(a, v, 1, DS_MAX_LAYERS - 1, &n)) return 2;
            o.n_layers = (int)n;
        } else if (!strcmp(a, "--dtype")) {
            o.dtype = v;
        } else if (!strcmp(a, "--tensor-type")) {
            tensor_types[o.n_tensor_types++] = v;
        } else if (!strcmp(a, "--format")) {
            if (!strcmp(v, "gguf")) o.format = DS_FORMAT_GGUF;
            else if (!strcmp(v, "safetensors") || !strcmp(v, "hf")) o.format = DS_FORMAT_SAFETENSORS;
            else {
                fprintf(stderr, "deltaserve: --format '%s' is not gguf or safetensors\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            if (ds_arg_u64(a, v, &o.seed)) return 2;
        } else if (!strcmp(a, "--scale")) {
            if (ds_arg_float(a, v, 1e-6, 1e6, &x)) return 2;
            o.scale = (float)x;
        } else if (!strcmp(a, "--tokenizer")) {
            o.tokenizer_json = v;
        } else if (!strcmp(a, "--shard-mb")) {
            if (ds_arg_int(a, v, 1, 1 << 20, &n)) return 2;
            o.shard_bytes = (size_t)n << 20;
        } else if (!strcmp(a, "--yarn")) {
            if (ds_arg_float(a, v, 1, 1e6, &x)) return 2;
            o.yarn_factor = (float)x;
        } else if (!strcmp(a, "--mtp-agree")) {
            if (ds_arg_float(a, v, 0, 1, &x)) return 2;
            o.mtp_agree_set = 1;
            o.mtp_agree = (float)x;
        } else if (!strcmp(a, "--vocab-skew")) {
            if (ds_arg_float(a, v, 0, 10, &x)) return 2;
            o.vocab_skew = (float)x;
        } else if (!strcmp(a, "--threads")) {
            if (ds_arg_int(a, v, 0, 1024, &n)) return 2;
            o.n_threads = (int)n;
        } else if (!strcmp(a, "--out")) {
            o.out = v;
        } else if (!strcmp(a, "--mtp-out")) {
            o.mtp_out = v;
        } else if (!strcmp(a, "--mmproj")) {
            o.mmproj_out = v;
        } else if (!strcmp(a, "--vision-layers")) {
            if (ds_arg_int(a, v, 1, DS_MAX_LAYERS - 1, &n)) return 2;
            o.vision_layers = (int)n;
        } else if (!strcmp(a, "--deepstack")) {
            if (parse_deepstack(v, &o)) return 2;
        } else {
            fprintf(stderr, "deltaserve make-model: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o.shape || !o.out) {
        fprintf(stderr, "deltaserve make-model: --shape and --out are required\n");
        usage(stderr);
        return 2;
    }
    if (!ds_model_shape_find(o.shape)) { /* a usage error, like a bad --dtype */
        fprintf(stderr, "deltaserve make-model: unknown shape '%s' (known:", o.shape);
        for (int i = 0; i < ds_model_shape_count(); i++)
            fprintf(stderr, "%s %s", i ? "," : "", ds_model_shape_at(i)->name);
        fprintf(stderr, ")\n");
        return 2;
    }
    int fp8 = o.format == DS_FORMAT_SAFETENSORS && !strcasecmp(o.dtype, "fp8"); /* FP8 checkpoints are Hugging Face's */
    const ds_file_type *ft = ds_file_type_find(fp8 ? "bf16" : o.dtype);
    if (!ft) {
        fprintf(stderr, "deltaserve make-model: --dtype '%s' is not a file type (known:", o.dtype);
        for (int i = 0; i < ds_file_type_count(); i++) fprintf(stderr, "%s %s", i ? "," : "", ds_file_type_at(i)->name);
        fprintf(stderr, ")\n");
        return 2;
    }
    ds_err e = {0};
    ds_type_overrides *ov;
    if (ds_type_overrides_new(o.tensor_types, o.n_tensor_types, &ov, &e) != DS_OK) {
        fprintf(stderr, "deltaserve make-model: %s\n", e.msg);
        return 2;
    }
    ds_type_overrides_free(ov);
    if (o.format == DS_FORMAT_SAFETENSORS && (!ds_file_type_is_float(ft) || o.n_tensor_types)) {
        fprintf(stderr, "deltaserve make-model: safetensors checkpoints hold f32, f16, bf16 or fp8 (--dtype %s%s)\n", o.dtype,
                o.n_tensor_types ? ", --tensor-type" : "");
        return 2;
    }
    if (ds_make_model(&o, &e) != DS_OK) {
        fprintf(stderr, "deltaserve make-model: %s\n", e.msg);
        return 1;
    }
    return 0;
}

int ds_cmd_make_model(int argc, char **argv) {
    const char **tensor_types = calloc((size_t)argc, sizeof *tensor_types);
    if (!tensor_types) {
        fprintf(stderr, "deltaserve make-model: out of memory\n");
        return 1;
    }
    int rc = make_model(argc, argv, tensor_types);
    free(tensor_types);
    return rc;
}
