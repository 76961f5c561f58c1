/* cli_hub.h - the `-hf ORG/NAME[:QUANT]` and `--offline` options of the
 * commands that run a model (serve, generate, bench): the model comes from
 * the hub cache, downloaded first when missing (loading/hub.h). */
#ifndef DS_CLI_HUB_H
#define DS_CLI_HUB_H

#include "loading/hub.h"

typedef struct {
    const char *spec; /* -hf's value, or NULL */
    int offline;
    ds_hub_result res;
} ds_cli_hub;

#define DS_CLI_HUB_HELP                                                                                      \
    "  -hf ORG/NAME[:QUANT]   a GGUF from the Hugging Face hub (QUANT default Q4_K_M), downloaded into\n"    \
    "                         the hub cache when missing (HF_HOME, HF_TOKEN, HF_ENDPOINT apply)\n"           \
    "  --offline              with -hf: use only the hub cache (also HF_HUB_OFFLINE=1)\n"

/* When argv[*i] is -hf/--hf-repo (its value taken, *i advanced) or
 * --offline: returns 1; another option: 0; -hf without a value: -1 (printed). */
int ds_cli_hub_option(ds_cli_hub *h, int argc, char **argv, int *i);
/* With -hf: finds or downloads the files and points *path at the model;
 * says on stderr what it fetched. Returns 0, or 1 after printing the error
 * (2 when -m was given too). Without -hf: nothing. */
int ds_cli_hub_model(ds_cli_hub *h, const char *cmd, const char **path);
void ds_cli_hub_free(ds_cli_hub *h);

#endif
