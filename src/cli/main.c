/* main.c - the deltaserve command line: dispatches to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/version.h"

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *help;
} COMMANDS[] = {
    {"make-model", ds_cmd_make_model, "write a deterministic random-weight model (GGUF or Hugging Face)"},
    {"info", ds_cmd_info, "describe a model file or directory"},
    {"tokenize", ds_cmd_tokenize, "text to token ids with a model's tokenizer"},
    {"detokenize", ds_cmd_detokenize, "token ids to text with a model's tokenizer"},
    {"generate", ds_cmd_generate, "complete one prompt, streaming the text"},
    {"grammar", ds_cmd_grammar, "the GBNF grammar of a JSON Schema or a regex; check a text against a grammar"},
    {"logits", ds_cmd_logits, "raw logits and hidden states of a token list, as F32 files (for parity checks)"},
    {"vision", ds_cmd_vision, "the vision tower's output rows for given image patches, as an F32 file (for parity checks)"},
    {"perplexity", ds_cmd_perplexity, "perplexity of a text file, as llama.cpp's llama-perplexity computes it"},
    {"bench", ds_cmd_bench, "prefill and decode speed, batched decode, memory and bandwidth (like llama-bench)"},
    {"chat-template", ds_cmd_chat_template, "render chat requests with a model's chat template (Jinja)"},
    {"pull", ds_cmd_pull, "download a GGUF from the Hugging Face hub into its cache (ORG/NAME[:QUANT])"},
    {"serve", ds_cmd_serve, "OpenAI-compatible HTTP server (chat, completions, models, health, metrics)"},
    {"canary", ds_cmd_canary, "check an OpenAI-compatible server's chat answers end to end (exit 1 on any failure)"},
    {"bench-serve", ds_cmd_bench_serve, "benchmark a running server like vllm bench serve (TTFT, TPOT, ITL, throughput)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: deltaserve COMMAND [options]   (deltaserve COMMAND --help for its options)\n"
               "       deltaserve --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        ds_version_print(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "deltaserve: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
