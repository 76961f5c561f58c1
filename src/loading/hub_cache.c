/* hub_cache.c - the hub's cache folder, laid out as the hub's own client
 * lays it out so that other tools find the same files (see hub.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loading/hub_int.h"

void ds_hub_listing_free(ds_hub_listing *l) {
    for (int i = 0; i < l->n; i++) free(l->files[i].path);
    free(l->files);
    memset(l, 0, sizeof *l);
}

ds_status ds_hub_listing_add(ds_hub_listing *l, const char *path, ds_err *e) {
    if ((l->n & (l->n - 1)) == 0) { /* grow at powers of two */
        ds_hub_file *f = realloc(l->files, (size_t)(l->n ? 2 * l->n : 8) * sizeof *f);
        if (!f) return ds_fail(e, DS_ENOMEM, "out of memory");
        l->files = f;
    }
    ds_hub_file *f = &l->files[l->n];
    memset(f, 0, sizeof *f);
    f->size = -1;
    if (!(f->path = strdup(path))) return ds_fail(e, DS_ENOMEM, "out of memory");
    l->n++;
    return DS_OK;
}

int ds_hub_path_ok(const char *path) {
    if (!path[0] || path[0] == '/') return 0;
    for (const char *p = path; *p; p++)
        if (*p == '\\' || (unsigned char)*p < 0x20) return 0;
    for (const char *s = path;;) {
        const char *end = strchr(s, '/');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
        if (!end) return 1;
        s = end + 1;
    }
}

char *ds_hub_repo_dir(const ds_hub_opts *o, const char *repo) {
    const char *slash = strchr(repo, '/');
    size_t cap = strlen(o->cache) + strlen(repo) + 16;
    char *d = malloc(cap);
    if (d) snprintf(d, cap, "%s/models--%.*s--%s", o->cache, (int)(slash - repo), repo, slash + 1);
    return d;
}

ds_status ds_hub_mkdirs(const char *dir, ds_err *e) {
    char buf[4096 + 512];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return ds_fail(e, DS_EINVAL, "%s: path too long", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return ds_fail(e, DS_EIO, "%s: cannot create the folder: %s", buf, strerror(errno));
            if (!c) return DS_OK;
            *p = c;
        }
    }
}

static int is_commit(const char *s) {
    size_t n = strlen(s);
    if (n != 40) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return 0;
    return 1;
}

/* Adds every file under dir/rel (links that lead to a file) to l. */
static ds_status walk(const char *dir, const char *rel, int depth, ds_hub_listing *l, ds_err *e) {
    char here[8192];
    snprintf(here, sizeof here, "%s%s%s", dir, rel[0] ? "/" : "", rel);
    DIR *d = opendir(here);
    if (!d) return ds_fail(e, DS_EIO, "%s: cannot read the folder: %s", here, strerror(errno));
    ds_status s = DS_OK;
    struct dirent *de;
    while (!s && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char sub[4096], full[8192 + 256];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >= (int)sizeof sub) continue;
        snprintf(full, sizeof full, "%s/%s", dir, sub);
        struct stat st;
        if (stat(full, &st) != 0) continue; /* a link to a blob that is not there */
        if (S_ISDIR(st.st_mode)) {
            if (depth < 16) s = walk(dir, sub, depth + 1, l, e);
        } else if (S_ISREG(st.st_mode)) {
            s = ds_hub_listing_add(l, sub, e);
            if (!s) l->files[l->n - 1].size = st.st_size;
        }
    }
    closedir(d);
    return s;
}

static int cmp_path(const void *a, const void *b) {
    return strcmp(((const ds_hub_file *)a)->path, ((const ds_hub_file *)b)->path);
}

ds_status ds_hub_list_cached(const ds_hub_opts *o, const char *repo, ds_hub_listing *l, ds_err *e) {
    memset(l, 0, sizeof *l);
    char *rd = ds_hub_repo_dir(o, repo);
    if (!rd) return ds_fail(e, DS_ENOMEM, "out of memory");
    char path[8192];
    struct stat st;
    ds_status s = DS_OK;
    snprintf(path, sizeof path, "%s/snapshots/%s", rd, o->revision);
    if (is_commit(o->revision) && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(l->commit, sizeof l->commit, "%s", o->revision);
    } else {
        snprintf(path, sizeof path, "%s/refs/%s", rd, o->revision);
        FILE *f = fopen(path, "r");
        char line[128] = "";
        if (f) {
            if (!fgets(line, sizeof line, f)) line[0] = 0;
            fclose(f);
        }
        line[strcspn(line, " \r\n")] = 0;
        if (!f) s = ds_fail(e, DS_ENOTFOUND, "%s is not in the hub cache: %s does not exist", repo, path);
        else if (!is_commit(line)) s = ds_fail(e, DS_ECORRUPT, "%s: not a commit hash: '%.60s'", path, line);
        else snprintf(l->commit, sizeof l->commit, "%.64s", line);
    }
    if (!s) {
        snprintf(path, sizeof path, "%s/snapshots/%s", rd, l->commit);
        if (stat(path, &st) != 0)
            s = ds_fail(e, DS_ENOTFOUND, "%s is not in the hub cache: %s does not exist", repo, path);
        else
            s = walk(path, "", 0, l, e);
    }
    free(rd);
    if (s) ds_hub_listing_free(l);
    else if (l->n) qsort(l->files, (size_t)l->n, sizeof *l->files, cmp_path);
    return s;
}

/* Writes text to path through a temporary file and a rename, so that a reader
 * never sees half of it. */
static ds_status write_atomic(const char *path, const char *text, ds_err *e) {
    char tmp[8300];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return ds_fail(e, DS_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return ds_fail(e, DS_EIO, "%s: cannot write: %s", path, strerror(err));
    }
    return DS_OK;
}

ds_status ds_hub_write_ref(const ds_hub_opts *o, const char *repo, const char *commit, ds_err *e) {
    if (!strcmp(o->revision, commit)) return DS_OK;
    char *rd = ds_hub_repo_dir(o, repo);
    if (!rd) return ds_fail(e, DS_ENOMEM, "out of memory");
    char path[8192];
    snprintf(path, sizeof path, "%s/refs/%s", rd, o->revision);
    free(rd);
    *strrchr(path, '/') = 0; /* a branch name may hold '/': refs/ nests */
    ds_status s = ds_hub_mkdirs(path, e);
    path[strlen(path)] = '/';
    return s ? s : write_atomic(path, commit, e);
}

ds_status ds_hub_link(const char *repo_dir, const char *commit, const char *path, const char *blob, ds_err *e) {
    char link[8192], target[8192];
    snprintf(link, sizeof link, "%s/snapshots/%s/%s", repo_dir, commit, path);
    *strrchr(link, '/') = 0;
    ds_status s = ds_hub_mkdirs(link, e);
    if (s) return s;
    link[strlen(link)] = '/';
    /* from snapshots/COMMIT/DIRS.../NAME up to the repository folder */
    size_t n = 0;
    target[0] = 0;
    for (int up = 2; up > 0; up--) n += (size_t)snprintf(target + n, sizeof target - n, "../");
    for (const char *p = path; (p = strchr(p, '/')); p++) n += (size_t)snprintf(target + n, sizeof target - n, "../");
    snprintf(target + n, sizeof target - n, "blobs/%s", blob);
    if (unlink(link) != 0 && errno != ENOENT)
        return ds_fail(e, DS_EIO, "%s: cannot replace: %s", link, strerror(errno));
    if (symlink(target, link) != 0)
        return ds_fail(e, DS_EIO, "%s: cannot link to %s: %s", link, target, strerror(errno));
    return DS_OK;
}
