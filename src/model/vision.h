/* vision.h - the Qwen3-VL / Qwen3.5 vision tower: image patches in, one
 * embedding per merged 2x2 patch group out, in the text model's width.
 *
 * For an image of grid (t, h, w) patches (image_prep.h's order):
 *   x = PatchEmbed(patches) + bias + bilinear(pos_embd, to h x w)   [n][D]
 *   per block: x += Attn(LN1(x)) with 2D rotary (row, column of the patch),
 *              attention over every patch of the same image;
 *              x += Down(GELU(Up(LN2(x))))
 *              after a DeepStack block k: ds_k = DSMerger_k(x)
 *   out = Merger(x) = fc2(GELU(fc1(flatten4(post_ln(x)))))          [n/4][E]
 * Each output row is [E * (1 + n_deepstack)]: the merger's output, then each
 * DeepStack merger's, which the text model adds to the hidden state after
 * its first n_deepstack layers at the image's positions (model.h).
 *
 * Encoding is cut by blocks so the engine can run it a few blocks per step
 * beside other requests' decodes (a 1024x1024 image is 4096 patches through
 * every block): a job holds one image's activations between calls, and one
 * call advances several jobs through their next blocks, within a budget of
 * arithmetic, batching the jobs' matrix products.
 *
 * Threads: like the model, used by one thread at a time (the engine loop). */
#ifndef DS_VISION_H
#define DS_VISION_H

#include <stdint.h>

#include "common/status.h"
#include "image/image_prep.h"
#include "loading/vision_file.h"
#include "model/model.h"

typedef struct ds_vision ds_vision;
typedef struct ds_vision_job ds_vision_job;

/* Binds the tower's tensors (the file is borrowed: keep it open) on the text
 * model's backend. Fails, naming both files, when the tower's out_embd is not
 * the model's n_embd. */
ds_status ds_vision_new(ds_model *text, const ds_vision_file *f, ds_vision **out, ds_err *e);
void ds_vision_free(ds_vision *v);
const ds_vision_config *ds_vision_cfg(const ds_vision *v);

/* A job for one image. Its memory (activations of every patch between calls)
 * is taken here; ds_vision_job_bytes says how much before it is made. */
size_t ds_vision_job_bytes(const ds_vision *v, const ds_image_patches *p);
ds_status ds_vision_job_new(ds_vision *v, const ds_image_patches *p, ds_vision_job **out, ds_err *e);
void ds_vision_job_free(ds_vision_job *j);

/* Multiply-adds the job's remaining work costs (its blocks and merger). */
int64_t ds_vision_job_remaining_flops(const ds_vision_job *j);
/* Advances the jobs: each job goes through whole blocks (the patch
 * embedding, a block, or the mergers at the end) while the multiply-adds
 * done in this call stay within flop_budget; every unfinished job advances
 * by at least one piece, so the call always makes progress. Outputs are the
 * same bits however the work is cut and batched. */
ds_status ds_vision_run(ds_vision *v, ds_vision_job *const *jobs, int n_jobs, int64_t flop_budget, ds_err *e);
int ds_vision_job_done(const ds_vision_job *j);
/* Once done: the image's text-side embeddings, [n_tokens][E * (1 + n_deepstack)]. */
const float *ds_vision_job_output(const ds_vision_job *j, int *n_tokens);

/* One call: the whole tower for one image (tests, generate, bench). out has
 * n_tokens x E x (1 + n_deepstack) floats. */
ds_status ds_vision_encode(ds_vision *v, const ds_image_patches *p, float *out, ds_err *e);

#endif
