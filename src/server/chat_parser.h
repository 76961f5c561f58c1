/* chat_parser.h - splits a generated chat answer into reasoning, content and
 * tool calls, incrementally, as text arrives.
 *
 *   <think> reasoning </think> content <tool_call> body </tool_call> content ...
 *
 * Qwen3.5's generation prompt already ends with "<think>\n", so a parser made
 * with start_in_reasoning = 1 treats the text as reasoning until "</think>".
 * Otherwise a "<think>" at the very start opens the reasoning (Qwen3).
 * Tool call bodies in two formats are understood (ds_tool_call_parse):
 *   Qwen3.5: <function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>
 *   Qwen3:   {"name": NAME, "arguments": {...}}
 * A JSON body may hold "</tool_call>" inside a string: the call ends at the
 * first one after which the body parses (held until the end if none does).
 * A body that is neither, or a call left unclosed at the end, comes out as
 * content, tags included: nothing the model wrote is dropped. A tag that may
 * still be completed is held back until it is decided. One parser per choice,
 * used by one thread. */
#ifndef DS_CHAT_PARSER_H
#define DS_CHAT_PARSER_H

#include <jansson.h>
#include <stddef.h>

#include "common/strbuf.h"

typedef enum { DS_PART_CONTENT = 0, DS_PART_REASONING, DS_PART_TOOL_CALL } ds_part_kind;

/* text/n for content and reasoning; call (borrowed for the call) for a tool call:
 * {"name": ..., "arguments": "<JSON text>"}; text may hold NUL bytes (n counts them) */
typedef void (*ds_part_fn)(void *user, ds_part_kind kind, const char *text, size_t n, const json_t *call);

typedef struct {
    int state;            /* 0 content, 1 reasoning, 2 inside a tool call, 3 ended (max_calls) */
    int parse_tools;
    int at_start;         /* nothing consumed yet (a leading <think> opens reasoning) */
    int strip_newlines;   /* just after </think>: leading newlines of the content are dropped */
    int strip_blanks;     /* ... and spaces and tabs (a grammar-constrained answer: they are not part of it) */
    int n_calls;
    int max_calls;        /* > 0: the answer ends with this many calls (parallel_tool_calls: false) */
    ds_sb hold;           /* text not decided yet */
    ds_sb ws;             /* with tools: whitespace-only content held until non-space content or a call */
} ds_chat_parser;

void ds_chat_parser_init(ds_chat_parser *p, int start_in_reasoning, int parse_tools);
/* Ends the answer after the max_calls-th tool call: whatever follows it is dropped (max_calls 0: no limit). */
void ds_chat_parser_limit_calls(ds_chat_parser *p, int max_calls);
/* After </think>, drops leading spaces and tabs too: the blanks a grammar filter allows between a
 * reasoning part and the constrained answer (grammar/grammar_filter.h) are not part of that answer. */
void ds_chat_parser_strip_blanks(ds_chat_parser *p);
/* 1 once the answer has ended (the call limit was reached): the rest of the generation is not needed. */
int ds_chat_parser_ended(const ds_chat_parser *p);
void ds_chat_parser_feed(ds_chat_parser *p, const char *s, size_t n, ds_part_fn fn, void *user);
void ds_chat_parser_finish(ds_chat_parser *p, ds_part_fn fn, void *user);
void ds_chat_parser_free(ds_chat_parser *p);

/* Parses the text between <tool_call> and </tool_call>; returns a new
 * {"name", "arguments"(string)} object, or NULL when it is malformed. */
json_t *ds_tool_call_parse(const char *body, size_t n);

#endif
