/* media_fetch.h - the bytes behind an image URL a client sent, under the
 * server's policy:
 *   data:image/TYPE;base64,...  always (decoded with nettle's base64);
 *   file://PATH                 only under --allowed-local-media-path DIR, the
 *                               path resolved (realpath) first, so that '..'
 *                               and symbolic links cannot leave DIR;
 *   http://, https://           only for hosts in --allowed-media-domains
 *                               (off by default: a server that fetches any
 *                               URL a client names can be made to probe its
 *                               own network), fetched with libcurl without
 *                               redirects, within a size and a time limit.
 * Every refusal says why in e (DS_EINVAL: the URL or the bytes are wrong,
 * DS_EUNSUPPORTED: the policy refuses it, DS_EIO: the fetch failed,
 * DS_ENOMEM: past the size limit), for a 400 that names the part. */
#ifndef DS_MEDIA_FETCH_H
#define DS_MEDIA_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct {
    const char *local_dir;   /* resolved directory file:// URLs must be under (NULL: file:// refused) */
    const char *domains;     /* comma list of hosts http(s) may fetch from, "*" any (NULL: refused) */
    size_t max_bytes;        /* encoded image size, at most */
    double timeout_s;        /* a whole http(s) fetch, at most */
} ds_media_policy;

/* Fills *data (malloc'd, caller frees) and *n. */
ds_status ds_media_fetch(const ds_media_policy *p, const char *url, size_t url_len, uint8_t **data, size_t *n,
                         ds_err *e);
/* A data: URL's payload alone (the part of ds_media_fetch that needs no policy). */
ds_status ds_media_data_url(const char *url, size_t url_len, size_t max_bytes, uint8_t **data, size_t *n, ds_err *e);

#endif
