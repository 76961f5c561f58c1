/* hub.h - models from the Hugging Face hub, as llama.cpp's `-hf` takes them:
 * `ORG/NAME[:QUANT]` names a repository and the GGUF file in it whose name
 * carries QUANT (default Q4_K_M, then Q8_0, then the first GGUF). The files
 * (every shard of a split GGUF, and the mmproj and MTP files found next to
 * it) are kept in the hub's own cache, shared with other tools:
 *
 *   CACHE/models--ORG--NAME/blobs/SHA256            the bytes, named by checksum
 *   CACHE/models--ORG--NAME/snapshots/COMMIT/PATH   links to the blobs
 *   CACHE/models--ORG--NAME/refs/REVISION           the commit REVISION was at
 *
 * CACHE is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
 * Files already there are not downloaded again; a download resumes a partial
 * one and is checked against the checksum the hub lists. */
#ifndef DS_HUB_H
#define DS_HUB_H

#include "common/status.h"

typedef struct {
    char endpoint[512];   /* $HF_ENDPOINT, default the public hub; no trailing '/' */
    char cache[4096];     /* the hub cache folder (see above) */
    const char *token;    /* $HF_TOKEN, sent as a Bearer token; NULL: none */
    const char *revision; /* branch, tag or commit (default "main") */
    int offline;          /* $HF_HUB_OFFLINE=1: the cache only, no network */
    int progress;         /* draw a progress bar per download (on a terminal) */
} ds_hub_opts;

/* Fills o from the environment (HF_ENDPOINT, HF_HUB_CACHE, HF_HOME,
 * XDG_CACHE_HOME, HOME, HF_TOKEN, HF_HUB_OFFLINE). */
ds_status ds_hub_opts_from_env(ds_hub_opts *o, ds_err *e);

typedef struct {
    char *repo;         /* ORG/NAME */
    char *model;        /* the GGUF file (its first shard when split) in snapshots/COMMIT/; NULL when the
                           repository holds only an MTP file */
    char *mmproj;       /* the multimodal projector next to it, or NULL */
    char *mtp;          /* the separate MTP head file next to it, or NULL */
    char commit[65];
    int n_files;        /* files chosen */
    int n_downloaded;   /* of which this call downloaded */
    char note[640];     /* a warning for the user, "" when none (the hub was unreachable: the cache was used) */
} ds_hub_result;

/* Whether spec has the form ORG/NAME[:QUANT] (the message says what is wrong). */
ds_status ds_hub_check_spec(const char *spec, ds_err *e);
/* Resolves spec (ORG/NAME[:QUANT]) to local files, downloading what the cache
 * lacks (unless o->offline). On failure r holds nothing to free. */
ds_status ds_hub_resolve(const char *spec, const ds_hub_opts *o, ds_hub_result *r, ds_err *e);
void ds_hub_result_free(ds_hub_result *r);

#endif
