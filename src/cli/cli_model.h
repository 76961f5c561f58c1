/* cli_model.h - what the one-sequence commands (generate, perplexity) share:
 * a model file with its tokenizer, the forward pass, and caches sized for one
 * sequence of a given length. */
#ifndef DS_CLI_MODEL_H
#define DS_CLI_MODEL_H

#include "loading/model_file.h"
#include "loading/vision_file.h"
#include "model/model.h"
#include "model/vision.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    ds_model_file *file;
    ds_tokenizer *tok;
    ds_model *model;
    ds_vision_file *vision_file;  /* the vision tower (--mmproj, or found beside the model); NULL: none */
    ds_vision *vision;
    ds_kv_pool kv;
    ds_state_pool st;
    int32_t *pages;        /* the sequence's page table: 0, 1, 2, ... */
    int n_pages;
    int max_tokens;        /* positions the caches hold */
    int batch;             /* tokens per forward call */
} ds_cli_model;

/* Loads the model and its tokenizer; prints the loader's (or tokenizer's)
 * error and returns non-zero on failure. */
int ds_cli_model_open(ds_cli_model *cm, const char *cmd, const char *path, int batch);
/* The same with loading options (NULL: the defaults). */
int ds_cli_model_open_ex(ds_cli_model *cm, const char *cmd, const char *path, int batch, const ds_load_options *lo);

/* The loading options the model commands share (serve, generate, bench,
 * logits, perplexity): option a with value v. Returns 1 when a is one of
 * them, 0 when it is not, -1 (after a message) when its value is wrong. */
int ds_cli_load_arg(const char *cmd, const char *a, const char *v, ds_load_options *lo);
/* The loading options that take no value (--no-mmproj): 1 when a is one. */
int ds_cli_load_flag(const char *a, ds_load_options *lo);
/* The vision tower of the model at model_path (text: its file, for the width
 * check; may be NULL): lo->mmproj_path, else the one ds_vision_find sees,
 * none with lo->no_mmproj. *out is NULL when there is none. A tower that does
 * not load (named by --mmproj or found beside the model) is an error: prints
 * it, naming the file, and returns non-zero. */
int ds_cli_open_vision(const char *cmd, const char *model_path, const ds_model_file *text, const ds_load_options *lo,
                       ds_vision_file **out);
#define DS_CLI_LOAD_USAGE                                                                                     \
    "  --mtp-model PATH       the MTP head (speculative drafts) from this GGUF file, as llama.cpp's\n"           \
    "                         converter writes it with --mtp (mtp-*.gguf); the main file must have none\n"     \
    "  --fp8-as T             q8_0 | bf16: what an FP8 Hugging Face checkpoint's weights become at\n"          \
    "                         load (default q8_0: the FP8 file's memory, the 8-bit kernels)\n"          \
    "  --mmproj PATH          the vision tower from this file (llama.cpp's mmproj GGUF) or Hugging Face\n"    \
    "                         directory; default: the mmproj*.gguf beside a GGUF model, the tower of a\n"    \
    "                         Hugging Face directory\n"                                                      \
    "  --no-mmproj            load no vision tower (text only)\n"
/* Sizes the caches for one sequence of max_tokens positions (capped at the
 * trained context); prints the error and returns non-zero on failure. */
int ds_cli_model_reserve(ds_cli_model *cm, const char *cmd, int max_tokens);
void ds_cli_model_close(ds_cli_model *cm);
/* Forgets the sequence: the next run starts at position 0. */
void ds_cli_model_reset(ds_cli_model *cm);
/* Runs tokens at positions [pos, pos+n) in calls of cm->batch tokens; logits of
 * every position into logits[n][V] when all_logits, else of the last one only
 * into logits[V]. */
ds_status ds_cli_model_run(ds_cli_model *cm, const int32_t *tokens, int n, int pos, int all_logits, float *logits,
                           ds_err *e);
/* The same with image inputs for those tokens (model.h): rope_pos [n][3]
 * (NULL: pos), embd [n] (NULL: none), n_deepstack. */
typedef struct {
    const int32_t *rope_pos;
    const float *const *embd;
    int n_deepstack;
} ds_cli_image_inputs;
ds_status ds_cli_model_run_ex(ds_cli_model *cm, const int32_t *tokens, int n, int pos, const ds_cli_image_inputs *im,
                              int all_logits, float *logits, ds_err *e);

double ds_now(void);

#endif
