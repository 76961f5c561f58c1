/* test_data_parallel.c - the settings of `serve --data-parallel N` (data_parallel.h) and the
 * lines /metrics gives the routers per rank (metrics.h): each rank's KV event endpoints, the
 * settings refused before anything starts, the engine label, vllm:cache_config_info and
 * vllm:lora_requests_info. The processes themselves: tests/cli/test_data_parallel.sh. */
#include "testing.h"

#include "server/data_parallel.h"
#include "server/metrics.h"

static void test_endpoint_moves_by_rank(void) {
    char out[256];
    ds_err e = {0};
    static const struct { const char *in; int rank; const char *want; } CASES[] = {
        {"tcp://*:5557", 0, "tcp://*:5557"},
        {"tcp://*:5557", -1, "tcp://*:5557"},
        {"tcp://*:5557", 3, "tcp://*:5560"},
        {"tcp://10.0.0.7:5557", 1, "tcp://10.0.0.7:5558"},
        {"tcp://[::1]:5557", 2, "tcp://[::1]:5559"},
        {"tcp://*:65534", 1, "tcp://*:65535"},
        {"ipc:///tmp/kv", 2, "ipc:///tmp/kv_dp2"},
        {"inproc://kv", 1, "inproc://kv_dp1"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        ds_status st = ds_dp_endpoint(CASES[i].in, CASES[i].rank, out, sizeof out, &e);
        CHECK(st == DS_OK && !strcmp(out, CASES[i].want), "%s rank %d: %s (%s)", CASES[i].in, CASES[i].rank,
              st ? e.msg : out, CASES[i].want);
    }
}

static void test_endpoint_refused(void) {
    char out[256], tiny[8];
    ds_err e = {0};
    CHECK(ds_dp_endpoint("tcp://*:65535", 1, out, sizeof out, &e) == DS_EINVAL && strstr(e.msg, "65536") &&
          strstr(e.msg, "past 65535"), "%s", e.msg);
    CHECK(ds_dp_endpoint("tcp://*:*", 1, out, sizeof out, &e) == DS_EINVAL && strstr(e.msg, "tcp://*:*") &&
          strstr(e.msg, "no port"), "%s", e.msg);
    CHECK(ds_dp_endpoint("tcp://[::1]", 1, out, sizeof out, &e) == DS_EINVAL && strstr(e.msg, "no port"), "%s",
          e.msg);
    CHECK(ds_dp_endpoint("tcp://h:", 1, out, sizeof out, &e) == DS_EINVAL, "an empty port");
    CHECK(ds_dp_endpoint("tcp://h:123456", 1, out, sizeof out, &e) == DS_EINVAL, "a port of 6 digits");
    CHECK(ds_dp_endpoint("tcp://*:5557", 1, tiny, sizeof tiny, &e) == DS_EINVAL && strstr(e.msg, "too long"), "%s",
          e.msg);
}

static ds_server_config dp(int n, int rank, int port) {
    ds_server_config c;
    ds_server_defaults(&c);
    c.data_parallel_size = n;
    c.data_parallel_rank = rank;
    c.port = port;
    return c;
}

static void test_check(void) {
    ds_err e = {0};
    ds_server_config c = dp(1, -1, 8080);
    CHECK(ds_dp_check(&c, &e) == DS_OK, "one server: %s", e.msg);
    c = dp(4, -1, 65532);
    CHECK(ds_dp_check(&c, &e) == DS_OK, "ranks on 65532..65535: %s", e.msg);
    c = dp(4, -1, 65533);
    CHECK(ds_dp_check(&c, &e) == DS_EINVAL && strstr(e.msg, "rank 3 would listen on port 65536"), "%s", e.msg);
    c.reuse_port = 1;
    CHECK(ds_dp_check(&c, &e) == DS_OK, "one shared port: %s", e.msg);
    c = dp(2, -1, 0);
    CHECK(ds_dp_check(&c, &e) == DS_OK, "--port 0: a free port each: %s", e.msg);
    c.reuse_port = 1;
    CHECK(ds_dp_check(&c, &e) == DS_EINVAL && strstr(e.msg, "--reuse-port needs a fixed --port"), "%s", e.msg);
    c = dp(2, 2, 8080);
    CHECK(ds_dp_check(&c, &e) == DS_EINVAL && strstr(e.msg, "--data-parallel-rank 2 is not below --data-parallel 2"),
          "%s", e.msg);
    c = dp(2, 1, 65535);   /* a rank started by hand keeps its --port */
    CHECK(ds_dp_check(&c, &e) == DS_OK, "rank 1 by hand: %s", e.msg);
    c = dp(0, -1, 8080);
    CHECK(ds_dp_check(&c, &e) == DS_EINVAL && strstr(e.msg, "1..64"), "%s", e.msg);
    c = dp(65, -1, 8080);
    CHECK(ds_dp_check(&c, &e) == DS_EINVAL, "65 ranks");
}

/* vLLM's defaults put the replay socket on the publisher's port + 1: with two ranks, rank 1
 * would publish where rank 0 answers replays */
static void test_check_endpoints(void) {
    ds_err e = {0};
    ds_server_config c = dp(2, -1, 8000);
    c.kv_events_endpoint = "tcp://*:5557";
    CHECK(ds_dp_check(&c, &e) == DS_OK, "%s", e.msg);
    c.kv_events_replay_endpoint = "tcp://*:5558";
    CHECK(ds_dp_check(&c, &e) == DS_EINVAL && strstr(e.msg, "rank 1 would publish KV events on tcp://*:5558") &&
          strstr(e.msg, "rank 0 answers replays"), "%s", e.msg);
    c.kv_events_replay_endpoint = "tcp://*:5567";
    CHECK(ds_dp_check(&c, &e) == DS_OK, "%s", e.msg);
    c = dp(1, -1, 8000);   /* one server: its own two ports only */
    c.kv_events_endpoint = "tcp://*:5557";
    c.kv_events_replay_endpoint = "tcp://*:5558";
    CHECK(ds_dp_check(&c, &e) == DS_OK, "%s", e.msg);
    c.kv_events_endpoint = "tcp://127.0.0.1:*";   /* ports zmq picks when it binds never collide */
    c.kv_events_replay_endpoint = "tcp://127.0.0.1:*";
    CHECK(ds_dp_check(&c, &e) == DS_OK, "%s", e.msg);
    c = dp(3, 1, 8000);    /* a rank by hand: the others' ports are known too */
    c.kv_events_endpoint = "tcp://*:65534";
    CHECK(ds_dp_check(&c, &e) == DS_EINVAL && strstr(e.msg, "--kv-events-endpoint") && strstr(e.msg, "65536"), "%s",
          e.msg);
}

/* the number after the sample line that starts with prefix, or -1 */
static double sample(const char *text, const char *prefix) {
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, prefix, strlen(prefix))) {
            const char *sp = strchr(p, '}');
            return sp ? strtod(sp + 1, NULL) : -1;
        }
    return -1;
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static void test_metrics_engine_and_cache(void) {
    ds_metrics m;
    ds_metrics_init(&m);
    ds_sb o = {0};
    ds_metrics_render(&m, NULL, "tiny", &o);
    REQUIRE(o.s != NULL, "rendered");
    /* one server: engine "0", as vLLM labels its one engine; no cache line while loading */
    CHECK(strstr(o.s, "\nvllm:num_requests_running{model_name=\"tiny\",engine=\"0\"} 0\n") != NULL, "engine 0");
    CHECK(!strstr(o.s, "vllm:cache_config_info"), "no cache_config_info before the engine exists");
    CHECK(strstr(o.s, "\nvllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} ")
          != NULL, "lora_requests_info");
    CHECK(sample(o.s, "vllm:lora_requests_info{") > 1.7e9, "its value is a Unix time");
    ds_sb_free(&o);

    ds_cache_info ci = {.block_size = 64, .num_gpu_blocks = 300, .kv_cache_size_tokens = 19200,
                        .kv_cache_memory_bytes = 1 << 20, .enable_prefix_caching = 1, .mamba_block_size = 64};
    ds_metrics_set_engine(&m, 5, &ci);
    o = (ds_sb){0};
    ds_metrics_render(&m, NULL, "tiny", &o);
    REQUIRE(o.s != NULL, "rendered");
    CHECK(strstr(o.s, "\nvllm:cache_config_info{block_size=\"64\",cache_dtype=\"float32\",enable_prefix_caching=\"True\","
                      "engine=\"5\",is_attention_free=\"False\",kv_cache_memory_bytes=\"1048576\","
                      "kv_cache_size_tokens=\"19200\",mamba_block_size=\"64\",num_gpu_blocks=\"300\","
                      "sliding_window=\"None\"} 1\n") != NULL, "cache_config_info");
    CHECK(count(o.s, "engine=\"5\"") > 50 && count(o.s, "engine=\"0\"") == 0, "every line of rank 5 says so");
    CHECK(count(o.s, "# TYPE vllm:cache_config_info gauge\n") == 1 && count(o.s, "# HELP vllm:cache_config_info ") == 1,
          "one HELP and TYPE");
    ds_sb_free(&o);

    ci.mamba_block_size = 0;   /* no DeltaNet layers */
    ci.enable_prefix_caching = 0;
    ds_metrics_set_engine(&m, -1, &ci);
    o = (ds_sb){0};
    ds_metrics_render(&m, NULL, "tiny", &o);
    REQUIRE(o.s != NULL, "rendered");
    CHECK(strstr(o.s, "enable_prefix_caching=\"False\",engine=\"0\"") && strstr(o.s, "mamba_block_size=\"None\""),
          "%s", strstr(o.s, "vllm:cache_config_info{") ? strstr(o.s, "vllm:cache_config_info{") : "none");
    ds_sb_free(&o);
    ds_metrics_free(&m);
}

int main(void) {
    RUN(test_endpoint_moves_by_rank);
    RUN(test_endpoint_refused);
    RUN(test_check);
    RUN(test_check_endpoints);
    RUN(test_metrics_engine_and_cache);
    printf("RESULT passed=%d failed=%d\n", ds_t_passed_cases, ds_t_failed_cases);
    return ds_t_failed_cases != 0;
}
