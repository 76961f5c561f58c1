/* commands.h - the deltaserve subcommands; each returns the process exit code. */
#ifndef DS_COMMANDS_H
#define DS_COMMANDS_H

int ds_cmd_make_model(int argc, char **argv);
int ds_cmd_info(int argc, char **argv);
int ds_cmd_tokenize(int argc, char **argv);
int ds_cmd_detokenize(int argc, char **argv);
int ds_cmd_generate(int argc, char **argv);
int ds_cmd_grammar(int argc, char **argv);
int ds_cmd_perplexity(int argc, char **argv);
int ds_cmd_logits(int argc, char **argv);
int ds_cmd_vision(int argc, char **argv);
int ds_cmd_bench(int argc, char **argv);
int ds_cmd_chat_template(int argc, char **argv);
int ds_cmd_serve(int argc, char **argv);
int ds_cmd_pull(int argc, char **argv);
int ds_cmd_canary(int argc, char **argv);
int ds_cmd_bench_serve(int argc, char **argv);

#endif
