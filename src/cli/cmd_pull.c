/* cmd_pull.c - `deltaserve pull ORG/NAME[:QUANT]`: a GGUF (and the mmproj
 * and MTP files next to it) from the Hugging Face hub into the hub cache,
 * as llama.cpp's `-hf` chooses it; prints the model file's path. */
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "loading/hub.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: deltaserve pull ORG/NAME[:QUANT] [--offline] [--revision REV]\n"
            "  QUANT           the quantization in the GGUF file's name, any case (default Q4_K_M, then Q8_0,\n"
            "                  then the first GGUF); every shard of a split GGUF is fetched, and the mmproj and\n"
            "                  MTP files next to it\n"
            "  --offline       look only in the cache, never on the network (also HF_HUB_OFFLINE=1)\n"
            "  --revision REV  branch, tag or commit (default main)\n"
            "Prints the model file's path (in the cache's snapshots/ folder) on stdout.\n"
            "Environment: HF_HUB_CACHE or HF_HOME (the cache is $HF_HOME/hub, default ~/.cache/huggingface/hub),\n"
            "HF_TOKEN (for gated and private repositories), HF_ENDPOINT (the hub's address).\n");
}

int ds_cmd_pull(int argc, char **argv) {
    const char *spec = NULL, *revision = NULL;
    int offline = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--offline")) { offline = 1; continue; }
        if (a[0] != '-') {
            if (spec) { fprintf(stderr, "deltaserve pull: one repository at a time ('%s', then '%s')\n", spec, a); return 2; }
            spec = a;
            continue;
        }
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "--revision")) revision = v;
        else { fprintf(stderr, "deltaserve pull: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!spec) { usage(stderr); return 2; }
    ds_hub_opts o;
    ds_hub_result r;
    ds_err e = {0};
    if (ds_hub_check_spec(spec, &e)) {
        fprintf(stderr, "deltaserve pull: %s\n", e.msg);
        return 2;
    }
    ds_status s = ds_hub_opts_from_env(&o, &e);
    if (!s) {
        o.offline |= offline;
        if (revision) o.revision = revision;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) s = ds_fail(&e, DS_EIO, "libcurl failed to start");
    }
    if (!s) s = ds_hub_resolve(spec, &o, &r, &e);
    if (s) {
        fprintf(stderr, "deltaserve pull: %s\n", e.msg);
        curl_global_cleanup();
        return 1;
    }
    if (r.note[0]) fprintf(stderr, "deltaserve pull: %s\n", r.note);
    fprintf(stderr, "deltaserve pull: %s at commit %s: %d file%s, %d downloaded, %d already in %s\n", r.repo,
            r.commit, r.n_files, r.n_files == 1 ? "" : "s", r.n_downloaded, r.n_files - r.n_downloaded, o.cache);
    if (r.mmproj) fprintf(stderr, "deltaserve pull: mmproj %s\n", r.mmproj);
    if (r.mtp) fprintf(stderr, "deltaserve pull: mtp %s\n", r.mtp);
    printf("%s\n", r.model ? r.model : r.mtp);
    ds_hub_result_free(&r);
    curl_global_cleanup();
    return 0;
}
