/* cmd_serve.c - `deltaserve serve`: the OpenAI-compatible HTTP server (server/server.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/args.h"
#include "cli/cli_model.h"
#include "cli/cli_hub.h"
#include "cli/commands.h"
#include "common/strbuf.h"
#include "common/version.h"
#include "jinja/jinja.h"
#include "server/data_parallel.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: deltaserve serve [PATH | -m PATH | -hf ORG/NAME[:QUANT]] [--host 127.0.0.1] [--port 8080]\n"
            "                        [--api-key KEY] [--served-model-name NAME...] [options]\n"
            "  PATH, -m, --model PATH\n"
            "                         GGUF file or Hugging Face directory (default: models/default.gguf\n"
            "                         next to the deltaserve binary, the model `make` builds)\n"
            DS_CLI_HUB_HELP
            "  --host ADDR            IPv4 or IPv6 address to listen on (default 127.0.0.1; :: is every\n"
            "                         address, IPv4 too; [::1] as in a URL is taken)\n"
            "  --port N               TCP port (default 8080; 0 = any free port, printed at start)\n"
            "  --api-key KEY          require 'Authorization: Bearer KEY' on /v1/* (also $DS_API_KEY)\n"
            "  --served-model-name NAME...\n"
            "                         the model ids clients use (default: the file's base name): the\n"
            "                         words up to the next option (one naming an existing file is the\n"
            "                         model), or the option repeated; the first is the id answers carry\n"
            "  --chat-template T      the chat template instead of the model's: a Jinja file, or the\n"
            "                         template itself when T is no file and holds '{%%'\n"
            "  --allowed-origins L    CORS: origins whose web pages may call the server, a JSON list or a\n"
            "                         comma list ('*': any); OPTIONS preflights are answered without\n"
            "                         the key (default: no CORS headers)\n"
            "  --allowed-methods L    CORS: methods a preflight allows (default: GET, POST, OPTIONS)\n"
            "  --allowed-headers L    CORS: headers a preflight allows (default: those it asks for)\n"
            "  --version              print the version and build, and exit\n"
            "data parallel (README: Data parallel):\n"
            "  --data-parallel, --data-parallel-size N\n"
            "                         N ranks (1..64), each a whole server with its own engine, forked\n"
            "                         by a supervisor that passes SIGTERM/SIGINT on and stops all when\n"
            "                         one dies; rank r listens on --port + r (default 1: one server).\n"
            "                         Every memory budget below (--kv-mb, --state-mb, ...) is per rank;\n"
            "                         --threads too (default: the cores divided among the ranks)\n"
            "  --reuse-port           every rank (or process) listens on --port itself with SO_REUSEPORT:\n"
            "                         the kernel spreads the connections among them\n"
            "  --data-parallel-rank R\n"
            "                         run rank R alone (0..N-1, with --data-parallel N): N processes\n"
            "                         started by hand, on ports of their own or one with --reuse-port;\n"
            "                         its KV events go to the endpoint's port + R\n"
            DS_CLI_LOAD_USAGE
            "images (README: Images; the tower: --mmproj / --no-mmproj above):\n"
            "  --vision-memory X      MiB images being encoded hold at once (default 1024)\n"
            "  --max-image-pixels N   a decoded image's width x height, at most (default 16777216)\n"
            "  --max-image-mb X       an image file's size in MiB, at most (default 20)\n"
            "  --limit-mm-per-prompt N\n"
            "                         images per request, at most (default 16; also vLLM's\n"
            "                         '{\"image\": N}')\n"
            "  --allowed-local-media-path DIR\n"
            "                         file:// image URLs are read under DIR only (default: refused)\n"
            "  --allowed-media-domains L\n"
            "                         http(s) image URLs are fetched from these hosts only, a comma\n"
            "                         list ('*': any; default: none, http(s) refused)\n"
            "  --media-timeout S      an http(s) image fetch's time limit in seconds (default 10)\n"
            "engine:\n"
            "  --kv-mb X              KV page pool in MiB (default 256; fractions allowed)\n"
            "  --state-mb X           DeltaNet state slots of running sequences in MiB (default 256)\n"
            "  --cache-state-mb X     DeltaNet checkpoints kept by the prefix cache in MiB (default 256)\n"
            "  -np, --parallel, --max-running N\n"
            "                         sequences in flight; more wait (default 64)\n"
            "  --step-tokens N        tokens per engine step (default 512)\n"
            "  --state-checkpoint-interval N\n"
            "                         prefill tokens between DeltaNet checkpoints of the prefix cache\n"
            "                         (multiple of 64; 0: at prompt ends only; default 512)\n"
            "  --no-prefix-cache      turn the prefix cache off\n"
            "  --spec-tokens K        MTP drafts per step, at most (default 3; 0 = no speculation;\n"
            "                         models without an MTP head never speculate)\n"
            "  --spec-state-mb N      DeltaNet records kept while drafts are verified (default 256)\n"
            "  --spec-policy P        who drafts how many: batch (default: each step, from the whole\n"
            "                         batch, what pays at the costs the engine measures) or request\n"
            "                         (each request by its own acceptance, whatever the batch)\n"
            "  --spec-max-batch N     a cap: no request drafts while more than N sequences run\n"
            "                         (default 0: none, the policy decides)\n"
            "  --spec-vocab N         MTP drafts over the first N token ids only (the most frequent), so\n"
            "                         a draft reads N rows of the output head; verification is over the\n"
            "                         whole vocabulary, outputs never change (default 32768; 0: all)\n"
            "  --max-queue N          waiting requests accepted before 429 (default 0 = unlimited)\n"
            "  --threads N            compute threads (default: one per core)\n"
            "  -c, --ctx-size, --max-model-len, --ctx N\n"
            "                         longest prompt + completion (default: the model's context:\n"
            "                         context_length, times the factor when the config asks for YaRN;\n"
            "                         more than that is refused unless --allow-long-context)\n"
            "  --allow-long-context   accept a --max-model-len past the model's context (as vLLM's\n"
            "                         VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, also honoured)\n"
            "  --max-body-kb N        request bodies over this get 413 (default 8192)\n"
            "  --max-connections N    open connections kept, each holding a thread (default 256); past\n"
            "                         it the one idle the longest is closed to let a new one in, and 16\n"
            "                         more are kept for /health and /metrics when every one is busy\n"
            "  --idle-timeout S       close a connection that sends nothing for S seconds between or\n"
            "                         during requests (default 60)\n"
            "  --header-timeout S     close a connection whose request headers are not complete S\n"
            "                         seconds after their first byte (default 10; slow clients)\n"
            "  --drain-timeout S      on SIGTERM, seconds running requests get to finish (default 60);\n"
            "                         a second SIGTERM or SIGINT ends them at once, with an error\n"
            "KV events for a prefix-aware router (README: KV events):\n"
            "  --kv-events-endpoint EP\n"
            "                         publish the prefix cache's blocks on a ZeroMQ PUB socket bound\n"
            "                         there, in vLLM's format (e.g. tcp://*:5557; default: off)\n"
            "  --kv-events-replay-endpoint EP\n"
            "                         a ROUTER socket answering [id, \"\", start sequence] with the batches\n"
            "                         kept since then (the last 10000), as vLLM's (e.g. tcp://*:5558)\n"
            "  --kv-events-format F   map (default: events as maps with \"type\") or array (the older\n"
            "                         tagged positional arrays)\n"
            "  --kv-events-queue-mb X\n"
            "                         the engine-to-publisher ring in MiB; events that do not fit are\n"
            "                         dropped and counted in /metrics (default 16)\n"
            "testing:\n"
            "  --fault-after N        the Nth completion request's model call fails (also $DS_FAULT_AFTER)\n"
            "  --fault-every N        every Nth completion request's model call fails (also $DS_FAULT_EVERY)\n"
            "  --fault-at-token K     such a request fails after K generated tokens instead of at its\n"
            "                         first model call (also $DS_FAULT_AT_TOKEN)\n"
            "  --fault-phase P        any, prefill, decode or verify: the failing call is the first one\n"
            "                         of that kind (default any; also $DS_FAULT_PHASE); draft: an MTP\n"
            "                         draft call fails, which fails no request (counted in /metrics)\n");
}

/* <directory of the executable>/models/default.gguf */
static int default_model(char *out, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    return snprintf(out, cap, "%s/models/default.gguf", exe) < (int)cap ? 0 : -1;
}

static int mib(const char *opt, const char *v, double lo, size_t *bytes) {
    double x;
    if (ds_arg_float(opt, v, lo, (double)(1L << 22), &x)) return -1;
    *bytes = (size_t)llround(x * (double)(1 << 20));
    return 0;
}

static int fault_phase(const char *what, const char *v, ds_fault_phase *out) {
    static const char *const NAMES[] = {"any", "prefill", "decode", "verify", "draft"};
    static const ds_fault_phase PHASES[] = {DS_FAULT_ANY, DS_FAULT_PREFILL, DS_FAULT_DECODE, DS_FAULT_VERIFY,
                                            DS_FAULT_DRAFT};
    for (int i = 0; i < 5; i++)
        if (!strcmp(v, NAMES[i])) {
            *out = PHASES[i];
            return 0;
        }
    fprintf(stderr, "deltaserve serve: %s must be any, prefill, decode, verify or draft, got '%s'\n", what, v);
    return -1;
}

/* --limit-mm-per-prompt: N, or vLLM's JSON '{"image": N}' (other modalities: none here, so 0 only) */
static int image_limit(const char *opt, const char *v, int *out) {
    long n;
    if (v[0] != '{') {
        if (ds_arg_int(opt, v, 0, 4096, &n)) return -1;
        *out = (int)n;
        return 0;
    }
    json_error_t je;
    json_t *o = json_loads(v, 0, &je), *img = json_object_get(o, "image");
    const char *k;
    json_t *x;
    int bad = !json_is_object(o) || (img && (!json_is_integer(img) || json_integer_value(img) < 0 ||
                                             json_integer_value(img) > 4096));
    json_object_foreach(o, k, x) bad |= strcmp(k, "image") && !(json_is_integer(x) && json_integer_value(x) == 0);
    if (!bad && img) *out = (int)json_integer_value(img);
    json_decref(o);
    if (bad) {
        fprintf(stderr, "deltaserve serve: %s must be N or '{\"image\": N}' (0..4096; this server takes no other "
                "media), got '%s'\n", opt, v);
        return -1;
    }
    return 0;
}

/* --chat-template T: the file T, or T itself when it is no file and looks like a template (vLLM
 * takes either). The template is compiled here so that a broken one stops the start with its place
 * (FILE:LINE:COL) before the model loads. Returns 0, or the exit code after one line on stderr. */
static int chat_template(const char *arg, char **text, const char **origin) {
    FILE *f = fopen(arg, "rb");
    if (!f) {
        if (!strstr(arg, "{%")) {
            fprintf(stderr, "deltaserve serve: --chat-template %s: cannot read it: %s\n", arg, strerror(errno));
            return 1;
        }
        *text = strdup(arg);
        *origin = "(inline)";
    } else {
        ds_sb sb = {0};
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) ds_sb_append(&sb, buf, n);
        int bad = ferror(f);
        fclose(f);
        if (bad || sb.oom) {
            fprintf(stderr, "deltaserve serve: --chat-template %s: cannot read it%s\n", arg, sb.oom ? ": out of memory" : "");
            ds_sb_free(&sb);
            return 1;
        }
        *text = sb.s ? sb.s : strdup("");
        *origin = arg;
    }
    if (!*text) {
        fprintf(stderr, "deltaserve serve: --chat-template: out of memory\n");
        return 1;
    }
    ds_jinja *t = NULL;
    ds_err e = {0};
    if (ds_jinja_compile(*text, &t, &e) != DS_OK) {
        /* "template:LINE:COL: what" names the place; the file stands for "template" */
        const char *m = strncmp(e.msg, "template:", 9) ? e.msg : e.msg + 9;
        fprintf(stderr, "deltaserve serve: --chat-template %s%s%s\n", *origin, m == e.msg ? ": " : ":", m);
        free(*text);
        *text = NULL;
        return 1;
    }
    ds_jinja_free(t);
    return 0;
}

int ds_cmd_serve(int argc, char **argv) {
    ds_server_config c;
    ds_server_defaults(&c);
    char model_buf[PATH_MAX + 32];
    const char *env;
    long n;
    double x;
    int r;
    ds_cli_hub hub = {0};
    const char *template_arg = NULL;
    char *template_text = NULL;
    if ((env = getenv("DS_API_KEY")) && env[0]) c.api_key = env;
    /* vLLM's switch for a max model length past the model's: "1" or "true" */
    if ((env = getenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN")) && (!strcmp(env, "1") || !strcasecmp(env, "true")))
        c.engine.allow_long_context = 1;
    if ((env = getenv("DS_FAULT_AFTER")) && ds_arg_int("DS_FAULT_AFTER", env, 0, 1L << 30, &n) == 0) c.fault_after = (int)n;
    if ((env = getenv("DS_FAULT_EVERY")) && ds_arg_int("DS_FAULT_EVERY", env, 0, 1L << 30, &n) == 0) c.fault_every = (int)n;
    if ((env = getenv("DS_FAULT_AT_TOKEN")) && ds_arg_int("DS_FAULT_AT_TOKEN", env, 0, 1L << 30, &n) == 0) c.fault_at_token = (int)n;
    if ((env = getenv("DS_FAULT_PHASE")) && env[0] && fault_phase("DS_FAULT_PHASE", env, &c.fault_phase)) return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--version")) { ds_version_print(stdout); return 0; }
        if (!strcmp(a, "--no-prefix-cache")) { c.engine.prefix_cache = 0; continue; }
        if (!strcmp(a, "--reuse-port")) { c.reuse_port = 1; continue; }
        if (!strcmp(a, "--allow-long-context")) { c.engine.allow_long_context = 1; continue; }
        if (a[0] != '-') {   /* the model, as `vllm serve MODEL` takes it */
            if (c.model_path) {
                fprintf(stderr, "deltaserve serve: '%s': the model is already '%s'\n", a, c.model_path);
                return 2;
            }
            c.model_path = a;
            continue;
        }
        int hf = ds_cli_hub_option(&hub, argc, argv, &i);
        if (hf) { if (hf < 0) return 2; continue; }
        if (ds_cli_load_flag(a, &c.load)) continue;
        if (!(v = ds_arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (c.model_path) {
                fprintf(stderr, "deltaserve serve: %s %s: the model is already '%s'\n", a, v, c.model_path);
                return 2;
            }
            c.model_path = v;
        }
        else if (!strcmp(a, "--host")) c.host = v;
        else if (!strcmp(a, "--port")) { if (ds_arg_int(a, v, 0, 65535, &n)) return 2; c.port = (int)n; }
        else if (!strcmp(a, "--api-key")) c.api_key = v;
        else if (!strcmp(a, "--data-parallel") || !strcmp(a, "--data-parallel-size")) {
            if (ds_arg_int(a, v, 1, DS_DP_MAX_RANKS, &n)) return 2;
            c.data_parallel_size = (int)n;
        }
        else if (!strcmp(a, "--data-parallel-rank")) {
            if (ds_arg_int(a, v, 0, DS_DP_MAX_RANKS - 1, &n)) return 2;
            c.data_parallel_rank = (int)n;
        }
        else if (!strcmp(a, "--served-model-name")) {
            /* vLLM's list (--served-model-name a b) and the repeated option both add names */
            for (;;) {
                if (c.n_served_model_names == DS_MAX_MODEL_NAMES) {
                    fprintf(stderr, "deltaserve serve: --served-model-name: more than %d names\n", DS_MAX_MODEL_NAMES);
                    return 2;
                }
                if (!v[0]) {
                    fprintf(stderr, "deltaserve serve: --served-model-name: an empty name\n");
                    return 2;
                }
                c.served_model_names[c.n_served_model_names++] = v;
                if (i + 1 >= argc || argv[i + 1][0] == '-' || access(argv[i + 1], F_OK) == 0) break;
                v = argv[++i];
            }
        }
        else if (!strcmp(a, "--chat-template")) template_arg = v;
        else if (!strcmp(a, "--allowed-origins")) c.allowed_origins = v;
        else if (!strcmp(a, "--allowed-methods")) c.allowed_methods = v;
        else if (!strcmp(a, "--allowed-headers")) c.allowed_headers = v;
        /* budgets in MiB with fractions: small test models need less than 1 MiB to be tight */
        else if (!strcmp(a, "--kv-mb")) { if (mib(a, v, 1e-6, &c.engine.kv_bytes)) return 2; }
        else if (!strcmp(a, "--state-mb")) { if (mib(a, v, 1e-6, &c.engine.state_bytes)) return 2; }
        else if (!strcmp(a, "--cache-state-mb")) { if (mib(a, v, 0, &c.engine.cache_state_bytes)) return 2; }
        /* llama-server's -np / --parallel: the same running limit */
        else if (!strcmp(a, "--max-running") || !strcmp(a, "--parallel") || !strcmp(a, "-np")) {
            if (ds_arg_int(a, v, 1, 4096, &n)) return 2;
            c.engine.max_running = (int)n;
        }
        else if (!strcmp(a, "--state-checkpoint-interval")) {
            if (ds_arg_int(a, v, 0, 1 << 20, &n)) return 2;
            if (n % DS_DELTANET_CHUNK) {
                fprintf(stderr, "deltaserve serve: --state-checkpoint-interval %ld is not a multiple of %d\n", n,
                        DS_DELTANET_CHUNK);
                return 2;
            }
            c.engine.checkpoint_interval = (int)n;
        }
        else if (!strcmp(a, "--step-tokens")) { if (ds_arg_int(a, v, DS_DELTANET_CHUNK, 1 << 16, &n)) return 2; c.engine.step_tokens = (int)n; }
        else if (!strcmp(a, "--spec-tokens")) { if (ds_arg_int(a, v, 0, DS_MAX_SPEC, &n)) return 2; c.engine.spec_tokens = (int)n; }
        else if (!strcmp(a, "--spec-policy")) {
            if (!strcmp(v, "batch")) c.engine.spec_policy = DS_SPEC_POLICY_BATCH;
            else if (!strcmp(v, "request")) c.engine.spec_policy = DS_SPEC_POLICY_REQUEST;
            else { fprintf(stderr, "deltaserve serve: --spec-policy '%s' is not batch or request\n", v); return 2; }
        }
        else if (!strcmp(a, "--spec-max-batch")) { if (ds_arg_int(a, v, 0, 1 << 16, &n)) return 2; c.engine.spec_max_batch = (int)n; }
        else if (!strcmp(a, "--spec-state-mb")) { if (ds_arg_int(a, v, 0, 1L << 22, &n)) return 2; c.engine.spec_state_bytes = (size_t)n << 20; }
        else if (!strcmp(a, "--spec-vocab")) { if (ds_arg_int(a, v, 0, INT_MAX, &n)) return 2; c.engine.spec_vocab = (int)n; }
        else if (!strcmp(a, "--max-queue")) { if (ds_arg_int(a, v, 0, 1 << 20, &n)) return 2; c.engine.max_queue = (int)n; }
        else if (!strcmp(a, "--threads")) { if (ds_arg_int(a, v, 0, 1024, &n)) return 2; c.n_threads = (int)n; }
        /* llama-server's -c / --ctx-size, vLLM's --max-model-len */
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c") || !strcmp(a, "--ctx-size") || !strcmp(a, "--max-model-len")) {
            if (ds_arg_int(a, v, 16, 1 << 24, &n)) return 2;
            c.ctx = (int)n;
        }
        else if (!strcmp(a, "--max-body-kb")) { if (ds_arg_int(a, v, 1, 1L << 22, &n)) return 2; c.max_body_bytes = (size_t)n << 10; }
        else if (!strcmp(a, "--max-connections")) { if (ds_arg_int(a, v, 1, 65536, &n)) return 2; c.max_connections = (int)n; }
        else if (!strcmp(a, "--idle-timeout")) { if (ds_arg_int(a, v, 1, 86400, &n)) return 2; c.idle_timeout_s = (int)n; }
        else if (!strcmp(a, "--header-timeout")) { if (ds_arg_float(a, v, 0.1, 3600, &x)) return 2; c.header_timeout_s = x; }
        else if (!strcmp(a, "--drain-timeout")) { if (ds_arg_float(a, v, 0, 86400, &x)) return 2; c.drain_timeout_s = x; }
        else if (!strcmp(a, "--fault-after")) { if (ds_arg_int(a, v, 0, 1L << 30, &n)) return 2; c.fault_after = (int)n; }
        else if (!strcmp(a, "--fault-at-token")) { if (ds_arg_int(a, v, 0, 1L << 30, &n)) return 2; c.fault_at_token = (int)n; }
        else if (!strcmp(a, "--fault-every")) { if (ds_arg_int(a, v, 0, 1L << 30, &n)) return 2; c.fault_every = (int)n; }
        else if (!strcmp(a, "--fault-phase")) { if (fault_phase(a, v, &c.fault_phase)) return 2; }
        else if (!strcmp(a, "--vision-memory")) { if (mib(a, v, 1e-6, &c.vision_bytes)) return 2; }
        else if (!strcmp(a, "--max-image-pixels")) { if (ds_arg_int(a, v, 1, 1L << 40, &n)) return 2; c.max_image_pixels = n; }
        else if (!strcmp(a, "--max-image-mb")) { if (mib(a, v, 1e-6, &c.max_image_bytes)) return 2; }
        else if (!strcmp(a, "--limit-mm-per-prompt")) { if (image_limit(a, v, &c.max_images)) return 2; }
        else if (!strcmp(a, "--allowed-local-media-path")) c.allowed_local_media_path = v;
        else if (!strcmp(a, "--allowed-media-domains")) c.allowed_media_domains = v;
        else if (!strcmp(a, "--media-timeout")) { if (ds_arg_float(a, v, 0.1, 3600, &x)) return 2; c.media_timeout_s = x; }
        else if (!strcmp(a, "--kv-events-endpoint")) c.kv_events_endpoint = v;
        else if (!strcmp(a, "--kv-events-replay-endpoint")) c.kv_events_replay_endpoint = v;
        else if (!strcmp(a, "--kv-events-format")) {
            if (strcmp(v, "map") && strcmp(v, "array")) {
                fprintf(stderr, "deltaserve serve: --kv-events-format must be map or array, got '%s'\n", v);
                return 2;
            }
            c.kv_events_array = !strcmp(v, "array");
        }
        else if (!strcmp(a, "--kv-events-queue-mb")) { if (mib(a, v, 1e-3, &c.kv_events_queue_bytes)) return 2; }
        else if ((r = ds_cli_load_arg("serve", a, v, &c.load))) { if (r < 0) return 2; }
        else { fprintf(stderr, "deltaserve serve: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    ds_err e = {0};
    if (ds_dp_check(&c, &e) != DS_OK) {   /* before a model is looked for or fetched */
        fprintf(stderr, "deltaserve serve: %s\n", e.msg);
        return 2;
    }
    int rc = ds_cli_hub_model(&hub, "serve", &c.model_path);
    if (rc) return rc;
    if (hub.res.mtp && !c.load.mtp_path) c.load.mtp_path = hub.res.mtp; /* the head file beside it */
    if (hub.spec && !c.n_served_model_names) c.served_model_names[c.n_served_model_names++] = hub.spec; /* as llama-server names it */
    if ((c.allowed_methods || c.allowed_headers) && !c.allowed_origins) {
        fprintf(stderr, "deltaserve serve: --allowed-methods and --allowed-headers need --allowed-origins\n");
        ds_cli_hub_free(&hub);
        return 2;
    }
    if (c.kv_events_replay_endpoint && !c.kv_events_endpoint) {
        fprintf(stderr, "deltaserve serve: --kv-events-replay-endpoint needs --kv-events-endpoint\n");
        ds_cli_hub_free(&hub);
        return 2;
    }
    if (template_arg && (rc = chat_template(template_arg, &template_text, &c.chat_template_origin))) {
        ds_cli_hub_free(&hub);
        return rc;
    }
    c.chat_template = template_text;
    if (!c.model_path) {
        if (default_model(model_buf, sizeof model_buf) != 0 || access(model_buf, R_OK) != 0) {
            fprintf(stderr, "deltaserve serve: no -m PATH and no default model next to the binary (%s); run `make`\n",
                    model_buf);
            return 2;
        }
        c.model_path = model_buf;
    }
    c.load.n_threads = c.n_threads;
    rc = ds_serve(&c);   /* one server, or the ranks of --data-parallel */
    ds_cli_hub_free(&hub);
    free(template_text);
    return rc;
}
