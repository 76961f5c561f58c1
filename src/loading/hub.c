/* hub.c - see hub.h: `ORG/NAME[:QUANT]` to files in the hub cache. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loading/hub_int.h"

#define DEFAULT_ENDPOINT "https://huggingface.co"

static int env_true(const char *v) {
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

ds_status ds_hub_opts_from_env(ds_hub_opts *o, ds_err *e) {
    memset(o, 0, sizeof *o);
    const char *ep = env("HF_ENDPOINT");
    snprintf(o->endpoint, sizeof o->endpoint, "%s", ep ? ep : DEFAULT_ENDPOINT);
    for (size_t n = strlen(o->endpoint); n > 0 && o->endpoint[n - 1] == '/'; n--) o->endpoint[n - 1] = 0;
    const char *v;
    int n;
    if ((v = env("HF_HUB_CACHE")) || (v = env("HUGGINGFACE_HUB_CACHE"))) n = snprintf(o->cache, sizeof o->cache, "%s", v);
    else if ((v = env("HF_HOME"))) n = snprintf(o->cache, sizeof o->cache, "%s/hub", v);
    else if ((v = env("XDG_CACHE_HOME"))) n = snprintf(o->cache, sizeof o->cache, "%s/huggingface/hub", v);
    else if ((v = env("HOME"))) n = snprintf(o->cache, sizeof o->cache, "%s/.cache/huggingface/hub", v);
    else return ds_fail(e, DS_EINVAL, "no hub cache folder: set HF_HOME (or HF_HUB_CACHE, or HOME)");
    if (n >= (int)sizeof o->cache) return ds_fail(e, DS_EINVAL, "the hub cache path is too long: %.200s...", o->cache);
    o->token = env("HF_TOKEN");
    o->revision = "main";
    o->offline = env_true(getenv("HF_HUB_OFFLINE"));
    o->progress = 1;
    return DS_OK;
}

/* ORG/NAME: letters, digits, '-', '_', '.'; neither part empty, "." or "..". */
static int repo_ok(const char *r, size_t n) {
    const char *slash = memchr(r, '/', n);
    if (!slash || slash == r || slash == r + n - 1 || memchr(slash + 1, '/', n - (size_t)(slash + 1 - r))) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)r[i]) && !strchr("-_./", r[i])) return 0;
    if (r[0] == '.' || slash[1] == '.' || strstr(r, "..")) return 0;
    return 1;
}

static ds_status parse_spec(const char *spec, char **repo, char **quant, ds_err *e) {
    *repo = *quant = NULL;
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (!repo_ok(spec, n))
        return ds_fail(e, DS_EINVAL, "'%s' is not a hub repository: expected ORG/NAME[:QUANT] (e.g. unsloth/Qwen3.5-4B-GGUF:Q4_K_M)",
                       spec);
    if (colon) {
        const char *q = colon + 1;
        if (!q[0] || strlen(q) > 64) return ds_fail(e, DS_EINVAL, "'%s': the quantization after ':' must be 1 to 64 characters", spec);
        for (const char *p = q; *p; p++)
            if (!isalnum((unsigned char)*p) && !strchr("-_.", *p))
                return ds_fail(e, DS_EINVAL, "'%s': the quantization after ':' may hold letters, digits, '-', '_', '.'",
                               spec);
        if (!(*quant = strdup(q))) return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    if (!(*repo = strndup(spec, n))) {
        free(*quant);
        *quant = NULL;
        return ds_fail(e, DS_ENOMEM, "out of memory");
    }
    return DS_OK;
}

ds_status ds_hub_check_spec(const char *spec, ds_err *e) {
    char *repo, *quant;
    ds_status s = parse_spec(spec, &repo, &quant, e);
    if (!s) {
        free(repo);
        free(quant);
    }
    return s;
}

static int whole_file(const char *path, int64_t size) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (size < 0 || st.st_size == size);
}

/* Makes snapshots/COMMIT/PATH of f exist, from its blob or, when that is
 * missing, a download into the blob (one process at a time per blob: a lock
 * file next to it). */
static ds_status ensure_file(const ds_hub_opts *o, const char *repo, const char *repo_dir, const char *commit,
                             const ds_hub_file *f, char **out, int *downloaded, ds_err *e) {
    size_t cap = strlen(repo_dir) + strlen(commit) + strlen(f->path) + 16;
    char *snap = malloc(cap);
    if (!snap) return ds_fail(e, DS_ENOMEM, "out of memory");
    snprintf(snap, cap, "%s/snapshots/%s/%s", repo_dir, commit, f->path);
    if (whole_file(snap, f->size)) {
        *out = snap;
        return DS_OK;
    }
    if (!f->oid[0]) {
        free(snap);
        return ds_fail(e, DS_ECORRUPT, "%s/%s: the hub lists no checksum or blob id for it", repo, f->path);
    }
    char blobs[8192], blob[8300], part[8400], locks[8192], lock[8400];
    snprintf(blobs, sizeof blobs, "%s/blobs", repo_dir);
    snprintf(blob, sizeof blob, "%s/%s", blobs, f->oid);
    snprintf(part, sizeof part, "%s.incomplete", blob);
    /* the lock files stay (removing one could let two processes hold
     * different locks of the same name), in .locks/ as the hub's client keeps them */
    snprintf(locks, sizeof locks, "%s/.locks/%s", o->cache, strrchr(repo_dir, '/') + 1);
    snprintf(lock, sizeof lock, "%s/%s.lock", locks, f->oid);
    ds_status s = ds_hub_mkdirs(blobs, e);
    if (!s) s = ds_hub_mkdirs(locks, e);
    int lk = s ? -1 : open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (!s && (lk < 0 || flock(lk, LOCK_EX) != 0))
        s = ds_fail(e, DS_EIO, "%s: cannot lock: %s", lock, strerror(errno));
    if (!s && !whole_file(blob, f->size)) {
        s = ds_hub_download(o, repo, commit, f, part, e);
        if (!s && rename(part, blob) != 0) s = ds_fail(e, DS_EIO, "%s: cannot rename to %s: %s", part, blob, strerror(errno));
        if (!s) (*downloaded)++;
    }
    if (lk >= 0) close(lk);
    if (!s) s = ds_hub_link(repo_dir, commit, f->path, f->oid, e);
    if (s) {
        free(snap);
        return s;
    }
    *out = snap;
    return DS_OK;
}

void ds_hub_result_free(ds_hub_result *r) {
    free(r->repo);
    free(r->model);
    free(r->mmproj);
    free(r->mtp);
    memset(r, 0, sizeof *r);
}

/* The chosen files of listing l made present in the cache. */
static ds_status place(const ds_hub_opts *o, const char *repo, const ds_hub_listing *l, const ds_hub_choice *c,
                       ds_hub_result *r, ds_err *e) {
    char *rd = ds_hub_repo_dir(o, repo);
    if (!rd) return ds_fail(e, DS_ENOMEM, "out of memory");
    ds_status s = DS_OK;
    for (int k = 0; !s && k < c->n_model; k++) {
        char *p = NULL;
        s = ensure_file(o, repo, rd, l->commit, &l->files[c->model[k]], &p, &r->n_downloaded, e);
        if (!s && k == 0) r->model = p;
        else free(p);
        r->n_files++;
    }
    if (!s && c->mmproj >= 0) {
        s = ensure_file(o, repo, rd, l->commit, &l->files[c->mmproj], &r->mmproj, &r->n_downloaded, e);
        r->n_files++;
    }
    if (!s && c->mtp >= 0) {
        s = ensure_file(o, repo, rd, l->commit, &l->files[c->mtp], &r->mtp, &r->n_downloaded, e);
        r->n_files++;
    }
    free(rd);
    return s;
}

/* The cached snapshot: every chosen file must be there already. */
static ds_status from_cache(const ds_hub_opts *o, const char *repo, const char *quant, ds_hub_result *r, ds_err *e) {
    ds_hub_listing l;
    ds_status s = ds_hub_list_cached(o, repo, &l, e);
    if (s) return s;
    char where[600];
    snprintf(where, sizeof where, "the cached snapshot %.12s of %s (%.400s)", l.commit, repo, o->cache);
    ds_hub_choice c;
    s = ds_hub_choose(&l, where, quant, &c, e);
    if (!s) {
        snprintf(r->commit, sizeof r->commit, "%s", l.commit);
        s = place(o, repo, &l, &c, r, e); /* only links to what is there: the listing holds present files */
        ds_hub_choice_free(&c);
    }
    ds_hub_listing_free(&l);
    return s;
}

ds_status ds_hub_resolve(const char *spec, const ds_hub_opts *o, ds_hub_result *r, ds_err *e) {
    memset(r, 0, sizeof *r);
    char *repo, *quant;
    if (!ds_hub_path_ok(o->revision) || strlen(o->revision) > 200)
        return ds_fail(e, DS_EINVAL, "'%.200s' is not a revision name (a branch, tag or commit)", o->revision);
    if (o->token)
        for (const char *p = o->token; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                return ds_fail(e, DS_EINVAL, "HF_TOKEN holds a control character (byte %d)", (int)(p - o->token));
    ds_status s = parse_spec(spec, &repo, &quant, e);
    if (s) return s;
    if (o->offline) {
        s = from_cache(o, repo, quant, r, e);
        if (s) {
            ds_err_prefix(e, "offline (--offline or HF_HUB_OFFLINE)");
            size_t n = strlen(e->msg);
            snprintf(e->msg + n, sizeof e->msg - n, "; `deltaserve pull %s` without --offline fetches it", spec);
        }
    } else {
        ds_hub_listing l;
        int unreachable = 0;
        s = ds_hub_list_remote(o, repo, &l, &unreachable, e);
        if (s && unreachable) {
            /* no network: what the cache holds is still good */
            ds_err ce = {0};
            if (!from_cache(o, repo, quant, r, &ce)) {
                snprintf(r->note, sizeof r->note, "%.400s; using the cached snapshot %.12s", e->msg, r->commit);
                s = DS_OK;
            }
        } else if (!s) {
            snprintf(r->commit, sizeof r->commit, "%s", l.commit);
            ds_hub_choice c;
            s = ds_hub_write_ref(o, repo, l.commit, e);
            if (!s) s = ds_hub_choose(&l, repo, quant, &c, e);
            if (!s) {
                s = place(o, repo, &l, &c, r, e);
                ds_hub_choice_free(&c);
            }
            ds_hub_listing_free(&l);
        }
    }
    free(quant);
    if (s) {
        ds_hub_result_free(r);
        free(repo);
    } else {
        r->repo = repo;
    }
    return s;
}
