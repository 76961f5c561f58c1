/* rope_freqs.h - the rotary frequency of each rotated pair and the factor on
 * cos and sin, from a model's config: plain RoPE, or YaRN as Hugging Face's
 * _compute_yarn_parameters gives them. */
#ifndef DS_ROPE_FREQS_H
#define DS_ROPE_FREQS_H

#include "loading/model_file.h"

/* Fills inv_freq[rope_dim / 2] (radians per position of each pair) and
 * *mscale (1 without YaRN). Without YaRN inv_freq[i] = theta^(-2i/rope_dim)
 * computed in double, the value the attention's angles always used. */
void ds_rope_freqs(const ds_model_config *c, double *inv_freq, float *mscale);

#endif
