/* cli_hub.c - see cli_hub.h. */
#include "cli/cli_hub.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"

int ds_cli_hub_option(ds_cli_hub *h, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--offline")) {
        h->offline = 1;
        return 1;
    }
    if (strcmp(a, "-hf") && strcmp(a, "--hf-repo")) return 0;
    const char *v = ds_arg_value(argc, argv, i);
    if (!v) return -1;
    h->spec = v;
    return 1;
}

int ds_cli_hub_model(ds_cli_hub *h, const char *cmd, const char **path) {
    if (!h->spec) return 0;
    if (*path) {
        fprintf(stderr, "deltaserve %s: -m %s and -hf %s both name a model; give one\n", cmd, *path, h->spec);
        return 2;
    }
    ds_hub_opts o;
    ds_err e = {0};
    if (ds_hub_check_spec(h->spec, &e)) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        return 2;
    }
    ds_status s = ds_hub_opts_from_env(&o, &e);
    if (!s) {
        o.offline |= h->offline;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) s = ds_fail(&e, DS_EIO, "libcurl failed to start");
    }
    if (!s) s = ds_hub_resolve(h->spec, &o, &h->res, &e);
    if (s) {
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        return 1;
    }
    if (h->res.note[0]) fprintf(stderr, "deltaserve %s: %s\n", cmd, h->res.note);
    if (!h->res.model) {
        fprintf(stderr, "deltaserve %s: %s holds only an MTP file (%s), no model\n", cmd, h->spec, h->res.mtp);
        ds_hub_result_free(&h->res);
        return 1;
    }
    fprintf(stderr, "deltaserve %s: %s: %s (%d of %d files downloaded)\n", cmd, h->spec, h->res.model,
            h->res.n_downloaded, h->res.n_files);
    if (h->res.mmproj)
        fprintf(stderr, "deltaserve %s: the multimodal projector %s is not used (deltaserve reads text only)\n", cmd,
                h->res.mmproj);
    if (h->res.mtp)
        fprintf(stderr, "deltaserve %s: the repository's separate MTP head is at %s\n", cmd, h->res.mtp);
    *path = h->res.model;
    return 0;
}

void ds_cli_hub_free(ds_cli_hub *h) { ds_hub_result_free(&h->res); }
