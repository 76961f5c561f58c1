/* sampler.c - see sampler.h. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ds_sampling_defaults(ds_sampling_params *p) {
    *p = (ds_sampling_params){.temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .min_p = 0.0f,
                              .repetition_penalty = 1.0f, .seed = 0};
}

int ds_sampler_scratch_init(ds_sampler_scratch *s, int n_vocab) {
    s->n_vocab = n_vocab;
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->ids = malloc((size_t)n_vocab * sizeof *s->ids);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    if (!s->probs || !s->ids || !s->counts) {
        ds_sampler_scratch_free(s);
        return -1;
    }
    return 0;
}

void ds_sampler_scratch_free(ds_sampler_scratch *s) {
    free(s->probs);
    free(s->ids);
    free(s->counts);
    memset(s, 0, sizeof *s);
}

ds_sampler_scratch ds_sampler_scratch_prefix(const ds_sampler_scratch *s, int n) {
    ds_sampler_scratch v = *s;
    if (n > 0 && n < s->n_vocab) v.n_vocab = n;
    return v;
}

void ds_sampler_init(ds_sampler *s, const ds_sampling_params *p) { s->p = *p; }

/* splitmix64's finaliser: a bijection of 64-bit words whose outputs pass as independent */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t position_key(const ds_sampling_params *p, int64_t pos) {
    uint64_t k = mix64(p->seed ^ 0x6A09E667F3BCC909ull);
    k = mix64(k + GOLDEN * ((uint64_t)p->choice + 1));
    return mix64(k + 0xBB67AE8584CAA73Bull * ((uint64_t)pos + 1));
}

static int by_prob_desc(const void *a, const void *b, void *probs) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float px = ((const float *)probs)[x], py = ((const float *)probs)[y];
    if (px != py) return px > py ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* by_prob_desc as a predicate: whether x comes before y (a strict total order,
 * so every selection below picks one set whatever the algorithm) */
static inline int before(const float *z, int32_t x, int32_t y) {
    return z[x] > z[y] || (z[x] == z[y] && x < y);
}

static void swap_ids(int32_t *a, int32_t *b) {
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Partitions ids[lo, hi) (hi - lo >= 3) around a median-of-three pivot:
 * returns p with ids[lo, p) before ids[p], and ids(p, hi) after it. */
static int partition(const float *z, int32_t *ids, int lo, int hi) {
    int mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(z, ids[mid], ids[lo])) swap_ids(&ids[mid], &ids[lo]);
    if (before(z, ids[last], ids[lo])) swap_ids(&ids[last], &ids[lo]);
    if (before(z, ids[last], ids[mid])) swap_ids(&ids[last], &ids[mid]);
    swap_ids(&ids[mid], &ids[last]); /* the median, parked at the end */
    int32_t pv = ids[last];
    int p = lo;
    for (int i = lo; i < last; i++)
        if (before(z, ids[i], pv)) swap_ids(&ids[i], &ids[p++]);
    swap_ids(&ids[p], &ids[last]);
    return p;
}

/* Rounds of partitioning before giving a range to qsort_r, which bounds the
 * worst case (introselect's rule) */
static int round_limit(int n) {
    int r = 8;
    while (n > 1) n >>= 1, r += 2;
    return r;
}

/* Moves the m first (by_prob_desc) of ids[lo, hi) to ids[lo, lo + m), in no order. */
static void select_first(const float *z, int32_t *ids, int lo, int hi, int m) {
    int target = lo + m, rounds = round_limit(hi - lo);
    while (hi - lo > 16 && rounds-- > 0) {
        int p = partition(z, ids, lo, hi);
        if (p == target || p + 1 == target) return;
        if (p > target) hi = p;
        else lo = p + 1;
    }
    if (target > lo && target < hi) qsort_r(ids + lo, (size_t)(hi - lo), sizeof *ids, by_prob_desc, (void *)z);
}

/* Probabilities from 2^-29 up are multiples of 2^-52 (a float has 24
 * significant bits), and so is every partial sum of them below 2: a double
 * holds each such sum exactly, so they add up to the same double in any
 * order. Only smaller ones need the sorted order for a bit-identical sum. */
#define EXACT_MIN 0x1p-29f

/* Moves the probabilities from EXACT_MIN up in ids[0, n) to the front; returns their count. */
static int exact_first(const float *z, int32_t *ids, int n) {
    int b = 0;
    for (int i = 0; i < n; i++)
        if (z[ids[i]] >= EXACT_MIN) swap_ids(&ids[i], &ids[b++]);
    return b;
}

/* top-p on ids[0, n), whose exact probabilities are ids[0, b): the length of
 * the shortest prefix of by_prob_desc order whose cumulative sum (added in that
 * order, as a double) reaches top_p, or n. On return the prefix is ids[0,
 * length), and its entries from b on are in order. Within the exact part, a
 * partition's head is summed in any order and the search goes on in one side,
 * as quickselect; past it, the order is built by slices, growing by 4. */
static int top_p_length(const float *z, int32_t *ids, int n, int b, float top_p) {
    double cum = 0.0; /* < top_p all along */
    int lo = 0, hi = b, rounds = round_limit(b);
    while (hi - lo > 16 && rounds-- > 0) {
        int p = partition(z, ids, lo, hi);
        double s = 0.0;
        for (int i = lo; i <= p; i++) s += z[ids[i]];
        if (cum + s >= top_p) hi = p + 1;
        else cum += s, lo = p + 1;
    }
    qsort_r(ids + lo, (size_t)(hi - lo), sizeof *ids, by_prob_desc, (void *)z);
    for (int i = lo; i < hi; i++)
        if ((cum += z[ids[i]]) >= top_p) return i + 1;
    for (int pos = b, m = 64; pos < n; pos += m, m = m > n / 4 ? n : m * 4) {
        if (m > n - pos) m = n - pos;
        select_first(z, ids, pos, n, m);
        qsort_r(ids + pos, (size_t)m, sizeof *ids, by_prob_desc, (void *)z);
        for (int i = pos; i < pos + m; i++)
            if ((cum += z[ids[i]]) >= top_p) return i + 1;
    }
    return n;
}

void ds_sampler_probs(const ds_sampler *s, const float *logits, const int32_t *history, int n_history,
                      ds_sampler_scratch *sc) {
    const ds_sampling_params *p = &s->p;
    int V = sc->n_vocab;
    float *z = sc->probs; /* logits first, probabilities in the end */
    memcpy(z, logits, (size_t)V * sizeof *z);
    int penalties = p->presence_penalty != 0 || p->frequency_penalty != 0 || p->repetition_penalty != 1.0f;
    if (penalties && n_history > 0) {
        for (int i = 0; i < n_history; i++)
            if (history[i] >= 0 && history[i] < V) sc->counts[history[i]]++;
        for (int i = 0; i < n_history; i++) {
            int32_t t = history[i];
            if (t < 0 || t >= V || sc->counts[t] == 0) continue;
            float r = p->repetition_penalty;
            if (r != 1.0f) z[t] = z[t] > 0 ? z[t] / r : z[t] * r;
            z[t] -= p->presence_penalty + p->frequency_penalty * (float)sc->counts[t];
            sc->counts[t] = 0; /* each seen token once, and the table is clean for the next call */
        }
    }
    /* after the penalties, before the temperature, as OpenAI and vLLM apply it; a masked token
     * (-inf) stays masked whatever its bias */
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].token >= 0 && p->bias[i].token < V) z[p->bias[i].token] += p->bias[i].bias;
    int best = 0;
    for (int i = 1; i < V; i++)
        if (z[i] > z[best]) best = i;
    if (p->temperature <= 0.0f || p->top_k == 1) {
        memset(z, 0, (size_t)V * sizeof *z);
        z[best] = 1.0f;
        return;
    }
    /* softmax over the whole vocabulary, then the truncations */
    float mx = z[best], inv_t = 1.0f / p->temperature;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += z[i] = expf((z[i] - mx) * inv_t);
    for (int i = 0; i < V; i++) z[i] = (float)(z[i] / sum);
    int truncate = p->top_k > 0 || p->top_p < 1.0f || p->min_p > 0.0f;
    if (!truncate) return;
    /* The kept set is a prefix of by_prob_desc order (the most likely first,
     * ties to the lower id) over the candidates: tokens within 1e-12 of the
     * best, which can only matter to top-p past 0.9999999. Sorting them all
     * took 42 ms a token on a flat 248,320-token distribution; instead min-p
     * filters, top-k selects and top-p searches, and only what a sum needs in
     * order gets sorted. The result is the full sort's, bit for bit. */
    float floor_p = z[best] * 1e-12f;
    if (!(z[best] >= floor_p)) return; /* NaN everywhere: no candidates, left as is */
    float min_keep = p->min_p > 0.0f ? p->min_p * z[best] : 0.0f;
    int n = 0;
    for (int i = 0; i < V; i++)
        if (z[i] >= floor_p && z[i] >= min_keep) sc->ids[n++] = i;
    if (n == 0) sc->ids[n++] = best; /* min_p above 1: the best stays */
    if (p->top_k > 0 && p->top_k < n) {
        select_first(z, sc->ids, 0, n, p->top_k);
        n = p->top_k;
    }
    int b = exact_first(z, sc->ids, n), keep = n;
    if (p->top_p < 1.0f) keep = top_p_length(z, sc->ids, n, b, p->top_p);
    else qsort_r(sc->ids + b, (size_t)(n - b), sizeof *sc->ids, by_prob_desc, z);
    /* summed as in by_prob_desc order: the exact part first, in any order */
    double kept = 0.0;
    int32_t last = sc->ids[0]; /* the kept token latest in the order */
    for (int i = 0; i < keep; i++) {
        kept += z[sc->ids[i]];
        if (before(z, last, sc->ids[i])) last = sc->ids[i];
    }
    float z_last = z[last];
    for (int i = 0; i < V; i++)
        z[i] = z[i] > z_last || (z[i] == z_last && i <= last) ? (float)(z[i] / kept) : 0.0f;
}

/* U_t of token i at a position's key: uniform in (0, 1), never 0 */
static double uniform_at(uint64_t key, int32_t i) {
    uint64_t h = mix64(key + GOLDEN * ((uint64_t)i + 1));
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Exponential race: token t "arrives" at E_t / p_t with E_t = -log(1 - U_t)
 * ~ Exp(1), and the first to arrive is distributed as p (the Gumbel-max trick
 * in another form). The most likely token's arrival is timed first; after
 * it, as E_t >= U_t, a token whose U_t / p_t already comes later needs no
 * logarithm, so a draw costs one hash per token with mass and a handful of
 * logarithms (measured on a 248,320-token vocabulary: 0.55 ms against 2.2 ms
 * for ds_sampler_probs; skipping the hash where p_t is too small to win cost
 * more in mispredicted branches than it saved). The result is exactly the
 * race's. Ties (practically impossible) go to the lower id, whatever the
 * order of the scan. */
int32_t ds_sampler_draw(const ds_sampler *s, const ds_sampler_scratch *sc, int64_t pos) {
    const float *p = sc->probs;
    int32_t best_id = 0;
    for (int i = 1; i < sc->n_vocab; i++)
        if (p[i] > p[best_id]) best_id = i;
    if (!(p[best_id] > 0.0f)) return best_id; /* no mass at all: cannot happen after ds_sampler_probs */
    uint64_t key = position_key(&s->p, pos);
    double best = -log1p(-uniform_at(key, best_id)) / (double)p[best_id];
    for (int i = 0; i < sc->n_vocab; i++) {
        if (!(p[i] > 0.0f) || i == best_id) continue;
        double pi = (double)p[i], u = uniform_at(key, i);
        if (u > best * pi * (1.0 + 1e-9)) continue; /* the margin covers rounding */
        double t = -log1p(-u) / pi;
        if (t < best || (t == best && i < best_id)) {
            best = t;
            best_id = i;
        }
    }
    return best_id;
}

int ds_sampler_is_greedy(const ds_sampler *s) { return s->p.temperature <= 0.0f || s->p.top_k == 1; }

/* the first index of the largest value, as ds_sampler_probs chooses it */
static int32_t first_max(const float *z, int n) {
    int32_t best = 0;
    float bv = z[0];
    for (int i = 1; i < n; i++)
        if (z[i] > bv) bv = z[i], best = i;
    return best;
}

int32_t ds_sampler_greedy(const ds_sampler *s, const float *logits, const int32_t *history, int n_history,
                          ds_sampler_scratch *sc) {
    const ds_sampling_params *p = &s->p;
    int penalties = p->presence_penalty != 0 || p->frequency_penalty != 0 || p->repetition_penalty != 1.0f;
    if ((!penalties || n_history <= 0) && p->n_bias == 0) return first_max(logits, sc->n_vocab);
    ds_sampler_probs(s, logits, history, n_history, sc); /* one-hot */
    return first_max(sc->probs, sc->n_vocab);
}

int32_t ds_sampler_sample(const ds_sampler *s, const float *logits, const int32_t *history, int n_history,
                          int64_t pos, ds_sampler_scratch *sc) {
    if (ds_sampler_is_greedy(s)) return ds_sampler_greedy(s, logits, history, n_history, sc);
    ds_sampler_probs(s, logits, history, n_history, sc);
    return ds_sampler_draw(s, sc, pos);
}

double ds_log_softmax_at(const float *logits, int n_vocab, int32_t token) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return (double)logits[token] - mx - log(sum);
}
