/* hub_int.h - the parts of the hub client (hub.h): a repository's file
 * listing, the choice of files in it, the cache and the HTTP transfers. */
#ifndef DS_HUB_INT_H
#define DS_HUB_INT_H

#include <stdint.h>

#include "loading/hub.h"

typedef struct {
    char *path;   /* relative to the repository root, '/'-separated */
    char oid[65]; /* LFS files: their sha256; others: the git blob id; "" unknown */
    int lfs;      /* oid is a sha256 the download is checked against */
    int64_t size; /* bytes; -1 unknown */
} ds_hub_file;

typedef struct {
    char commit[65];
    ds_hub_file *files;
    int n;
} ds_hub_listing;

void ds_hub_listing_free(ds_hub_listing *l);
ds_status ds_hub_listing_add(ds_hub_listing *l, const char *path, ds_err *e);
/* A path from a listing that stays inside the snapshot: relative, no empty,
 * "." or ".." parts, no backslash or control characters. */
int ds_hub_path_ok(const char *path);

/* hub_select.c: which files of a listing `REPO:QUANT` means. */
typedef struct {
    int *model;   /* listing indices of the model's shards, in order (one when not split) */
    int n_model;  /* 0: the repository holds only an MTP file */
    int mmproj;   /* listing index, or -1 */
    int mtp;      /* listing index, or -1 */
} ds_hub_choice;

/* where names the listing in messages ("REPO" or "the cached snapshot of REPO"). */
ds_status ds_hub_choose(const ds_hub_listing *l, const char *where, const char *quant, ds_hub_choice *c, ds_err *e);
void ds_hub_choice_free(ds_hub_choice *c);

/* hub_cache.c */
/* CACHE/models--ORG--NAME (malloc'd), or NULL when out of memory. */
char *ds_hub_repo_dir(const ds_hub_opts *o, const char *repo);
ds_status ds_hub_mkdirs(const char *dir, ds_err *e);
/* The snapshot o->revision points at, from refs/ (or the revision itself when
 * it is a commit with a snapshot), listing the files present in it. */
ds_status ds_hub_list_cached(const ds_hub_opts *o, const char *repo, ds_hub_listing *l, ds_err *e);
/* refs/REVISION := commit (nothing when the revision is the commit). */
ds_status ds_hub_write_ref(const ds_hub_opts *o, const char *repo, const char *commit, ds_err *e);
/* snapshots/COMMIT/PATH -> ../../blobs/BLOB, as a relative link. */
ds_status ds_hub_link(const char *repo_dir, const char *commit, const char *path, const char *blob, ds_err *e);

/* hub_http.c */
/* The file listing of repo at o->revision from the hub's model info API.
 * *unreachable is set when no HTTP answer came (the caller may use the cache). */
ds_status ds_hub_list_remote(const ds_hub_opts *o, const char *repo, ds_hub_listing *l, int *unreachable, ds_err *e);
/* Downloads f of repo at commit into dest, resuming what dest already holds
 * (a Range request) and retrying a transfer cut short; checks the size and,
 * for LFS files, the sha256. A file that fails the check is deleted. */
ds_status ds_hub_download(const ds_hub_opts *o, const char *repo, const char *commit, const ds_hub_file *f,
                          const char *dest, ds_err *e);

#endif
