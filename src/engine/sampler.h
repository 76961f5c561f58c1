/* sampler.h - turning logits into the next token, per request.
 *
 * A sampler belongs to one request and holds its parameters. It has no
 * running random state: the token drawn at a position is a function of the
 * distribution there and of the key (seed, choice, position) alone, so a seed
 * reproduces a completion whatever else shares the batch, however a
 * preempted request is recomputed, and whether or not speculative decoding
 * proposed a draft at that position (speculate.c draws its drafts from the
 * head's distribution with the same key and keeps one only when it equals
 * the model's draw). Sampling is split in two steps: ds_sampler_probs builds
 * the final distribution (penalties, logit bias, temperature, top-k, top-p,
 * min-p applied), ds_sampler_draw draws from it. Every path that picks a
 * token (plain decoding, the greedy shortcut, drafts and their verification)
 * goes through ds_sampler_sample, so the bias changes them all alike. Temperature 0 means greedy (the
 * lowest id among ties). */
#ifndef DS_SAMPLER_H
#define DS_SAMPLER_H

#include <stdint.h>

/* OpenAI's limit on logit_bias entries */
#define DS_MAX_LOGIT_BIAS 300

typedef struct {
    int32_t token;
    float bias;               /* added to the token's logit (OpenAI: -100..100; -100 bans, 100 forces) */
} ds_logit_bias;

typedef struct {
    float temperature;        /* 0: greedy */
    float top_p;              /* 1: off */
    int top_k;                /* 0: off */
    float min_p;              /* 0: off; keeps tokens with p >= min_p * p_max */
    float presence_penalty;   /* OpenAI: subtracted once from the logit of every token seen */
    float frequency_penalty;  /* OpenAI: subtracted per occurrence */
    float repetition_penalty; /* 1: off; divides positive logits (multiplies negative) of seen tokens */
    uint64_t seed;
    uint32_t choice;          /* which of a request's n choices: part of the key of every draw */
    int n_bias;               /* entries of bias in use (tokens outside the vocabulary are skipped) */
    ds_logit_bias bias[DS_MAX_LOGIT_BIAS];  /* a fixed array: the parameters stay a plain value */
} ds_sampling_params;

void ds_sampling_defaults(ds_sampling_params *p);

typedef struct {
    ds_sampling_params p;
} ds_sampler;

/* Scratch for one sampling step: probabilities and candidate lists of n_vocab
 * entries. One is enough for any number of samplers used one after another. */
typedef struct {
    int n_vocab;
    float *probs;
    int32_t *ids;
    int32_t *counts;
} ds_sampler_scratch;

int ds_sampler_scratch_init(ds_sampler_scratch *s, int n_vocab);
void ds_sampler_scratch_free(ds_sampler_scratch *s);
/* s seen as the scratch of a vocabulary of its first n tokens (1..s->n_vocab;
 * it shares s's memory): sampling with it draws from logits over tokens
 * 0..n-1 only, as if the vocabulary ended there (penalties and biases of
 * later tokens skipped, softmax and truncations over the n). A token's noise
 * depends on its id alone, so without truncations such a draw is the whole
 * vocabulary's draw (the same logits) whenever that one falls below n. */
ds_sampler_scratch ds_sampler_scratch_prefix(const ds_sampler_scratch *s, int n);

void ds_sampler_init(ds_sampler *s, const ds_sampling_params *p);

/* Fills sc->probs[n_vocab] with the distribution the next token is drawn from
 * (zeros outside the kept set). history: the tokens the penalties look at.
 * With temperature 0 the distribution is one-hot on the argmax. */
void ds_sampler_probs(const ds_sampler *s, const float *logits, const int32_t *history, int n_history,
                      ds_sampler_scratch *sc);
/* Draws the token at absolute position pos (its index in prompt + completion)
 * from sc->probs by the Gumbel-max trick: the token with the smallest E_t / p_t,
 * where E_t = -log(1 - U_t) and U_t is uniform, a hash of (seed, choice, pos, t).
 * That token is distributed as p; for two distributions p and q drawn from at
 * the same key the draws agree with probability at least o / (2 - o), where
 * o = sum(min(p, q)) is the acceptance of rejection sampling. A pure function
 * of its arguments. */
int32_t ds_sampler_draw(const ds_sampler *s, const ds_sampler_scratch *sc, int64_t pos);
/* Whether the sampler always takes the most likely token (temperature 0 or top_k 1). */
int ds_sampler_is_greedy(const ds_sampler *s);
/* The token a greedy sampler picks, penalties and bias applied: what ds_sampler_probs
 * then ds_sampler_draw give, without building a distribution over the
 * vocabulary (scratch is touched only when penalties or a bias are set). */
int32_t ds_sampler_greedy(const ds_sampler *s, const float *logits, const int32_t *history, int n_history,
                          ds_sampler_scratch *sc);

/* probs + draw at position pos (greedy: the argmax, no distribution built) */
int32_t ds_sampler_sample(const ds_sampler *s, const float *logits, const int32_t *history, int n_history,
                          int64_t pos, ds_sampler_scratch *sc);

/* log-softmax of the raw logits at `token` (for logprobs and perplexity). */
double ds_log_softmax_at(const float *logits, int n_vocab, int32_t token);

#endif
