/* cmd_tokenize.c - `deltaserve tokenize` and `deltaserve detokenize`: text
 * to token ids and back with a model's tokenizer (a GGUF file, a Hugging
 * Face directory or a bare tokenizer.json). Batch (--jsonl-in) and timing
 * (--bench) modes serve the reference tests and the speed measurement. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/mapped_file.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

#define MAX_INPUT (1u << 30) /* bytes of text or ids read from a file */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A whole file, or standard input for "-". */
static int read_input(const char *cmd, const char *path, char **out, size_t *len) {
    ds_err e = {0};
    if (strcmp(path, "-") != 0) {
        if (ds_read_text_file(path, MAX_INPUT, out, len, &e) == DS_OK) return 0;
        fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += got;
        if (n == cap) {
            char *b2 = cap < MAX_INPUT ? realloc(buf, cap * 2 + 1) : NULL;
            if (!b2) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b2;
            cap *= 2;
        }
    }
    if (!buf) {
        fprintf(stderr, "deltaserve %s: standard input is too large (more than %u bytes)\n", cmd, MAX_INPUT);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

static int open_tokenizer(const char *cmd, const char *path, ds_tokenizer **t) {
    ds_err e = {0};
    if (ds_tokenizer_open(path, t, &e) == DS_OK) return 0;
    fprintf(stderr, "deltaserve %s: %s\n", cmd, e.msg);
    return -1;
}

static void put_hex(FILE *f, const char *s, size_t n) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        fputc(digits[(uint8_t)s[i] >> 4], f);
        fputc(digits[(uint8_t)s[i] & 15], f);
    }
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Bytes as a C-like quoted string: printable UTF-8 stays, the rest is escaped. */
static void put_quoted(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        ds_utf8_kind k;
        size_t step = ds_utf8_next((const uint8_t *)s + i, n - i, &k);
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f || k != DS_UTF8_VALID) {
            for (size_t j = 0; j < step; j++) fprintf(f, "\\x%02x", (uint8_t)s[i + j]);
        } else fwrite(s + i, 1, step, f);
        i += step;
    }
    fputc('"', f);
}

/* n bytes of s as a JSON string: a NUL stays (as \u0000), ill-formed UTF-8
 * becomes U+FFFD, since JSON text cannot carry it. */
static void put_json_string(FILE *f, const char *s, size_t n) {
    json_t *item = json_stringn(s, n);
    uint8_t *fixed = NULL;
    if (!item && (fixed = malloc(ds_utf8_repaired_len((const uint8_t *)s, n) + 1)))
        item = json_stringn((const char *)fixed, ds_utf8_repair((const uint8_t *)s, n, fixed));
    char *q = item ? json_dumps(item, JSON_ENCODE_ANY) : NULL;
    fputs(q ? q : "null", f);
    free(q);
    free(fixed);
    json_decref(item);
}

/* --- tokenize --- */

typedef struct {
    FILE *f;
    int n;
} split_out;

static ds_status print_piece_hex(void *ctx, const char *piece, size_t len, int32_t added_id, ds_err *e) {
    split_out *o = ctx;
    fputs(o->n++ ? ",\"" : "\"", o->f);
    put_hex(o->f, piece, len);
    fputc('"', o->f);
    return DS_OK;
}

static ds_status print_piece_text(void *ctx, const char *piece, size_t len, int32_t added_id, ds_err *e) {
    split_out *o = ctx;
    if (added_id >= 0) fprintf(o->f, "%d\t", added_id);
    else fputs("-\t", o->f);
    put_quoted(o->f, piece, len);
    fputc('\n', o->f);
    o->n++;
    return DS_OK;
}

/* One JSON object per input line: {"hex": "..."} (exact bytes) or {"text": "..."}. */
static int run_jsonl(const ds_tokenizer *t, const char *path, int allow_special, int split) {
    char *buf;
    size_t len;
    if (read_input("tokenize", path, &buf, &len)) return 1;
    ds_tokens toks = {0};
    int failed = 0, line_no = 0;
    char *bytes = NULL;
    for (char *line = buf, *end; line < buf + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(buf + len - line));
        if (!end) end = buf + len;
        line_no++;
        if (end == line) continue;
        /* JSON_ALLOW_NUL: a "text" is all of its bytes, "\u0000" included */
        json_error_t je;
        json_t *obj = json_loadb(line, (size_t)(end - line), JSON_ALLOW_NUL, &je);
        const json_t *hex = json_object_get(obj, "hex");
        const json_t *text = json_object_get(obj, "text");
        const char *in = NULL;
        size_t n = 0;
        if (json_is_string(hex) && json_string_length(hex) % 2 == 0) {
            size_t hl = json_string_length(hex);
            const char *h = json_string_value(hex);
            free(bytes);
            bytes = malloc(hl / 2 + 1);
            for (size_t i = 0; bytes && i < hl; i += 2) {
                int hi = hex_value(h[i]), lo = hex_value(h[i + 1]);
                if (hi < 0 || lo < 0) break;
                bytes[n++] = (char)(hi << 4 | lo);
            }
            if (bytes && n == hl / 2) in = bytes;
        } else if (json_is_string(text)) {
            in = json_string_value(text);
            n = json_string_length(text);
        }
        ds_err e = {0};
        ds_status s = DS_OK;
        toks.n = 0;
        if (!obj)
            s = ds_fail(&e, DS_EINVAL, "%s line %d, column %d: not valid JSON: %s", path, line_no, je.column, je.text);
        else if (!in)
            s = ds_fail(&e, DS_EINVAL, "%s line %d: not an object with a \"hex\" or \"text\" string", path, line_no);
        if (!s) s = ds_tokenizer_encode(t, in, n, allow_special, &toks, &e);
        char *dec = NULL;
        size_t dec_len = 0;
        if (!s) s = ds_tokenizer_decode(t, toks.ids, toks.n, 0, &dec, &dec_len, &e);
        if (s) {
            fputs("{\"error\":", stdout);
            put_json_string(stdout, e.msg, strlen(e.msg));
            fputs("}\n", stdout);
            failed = 1;
        } else {
            fputs("{\"ids\":[", stdout);
            for (size_t i = 0; i < toks.n; i++) printf(i ? ",%d" : "%d", toks.ids[i]);
            fputs("],\"text_hex\":\"", stdout);
            put_hex(stdout, dec, dec_len);
            fputc('"', stdout);
            if (split) {
                split_out o = {stdout, 0};
                fputs(",\"split_hex\":[", stdout);
                if (ds_tokenizer_pretokenize(t, in, n, allow_special, print_piece_hex, &o, &e)) failed = 1;
                fputc(']', stdout);
            }
            fputs("}\n", stdout);
        }
        free(dec);
        json_decref(obj);
    }
    free(bytes);
    free(toks.ids);
    free(buf);
    return failed;
}

static int run_bench(const ds_tokenizer *t, const char *text, size_t len, int allow_special, double load_s) {
    ds_tokens toks = {0};
    ds_err e = {0};
    double best = 1e30, total = 0;
    int runs = 0;
    while (runs < 3 || (total < 2.0 && runs < 100)) {
        toks.n = 0;
        double t0 = now_s();
        if (ds_tokenizer_encode(t, text, len, allow_special, &toks, &e)) {
            fprintf(stderr, "deltaserve tokenize: %s\n", e.msg);
            free(toks.ids);
            return 1;
        }
        double dt = now_s() - t0;
        total += dt;
        if (dt < best) best = dt;
        runs++;
    }
    printf("tokenizer loaded in %.1f ms\n", load_s * 1e3);
    printf("encoded %zu bytes into %zu tokens: best of %d runs %.2f ms, %.0f tokens/s, %.1f MB/s\n", len, toks.n, runs,
           best * 1e3, (double)toks.n / best, (double)len / best / 1e6);
    free(toks.ids);
    return 0;
}

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: deltaserve tokenize -m PATH (-p TEXT | -f FILE | --jsonl-in FILE) [options]\n"
            "  -m PATH            a GGUF file, a Hugging Face directory or a tokenizer.json\n"
            "  -p TEXT            the text to encode\n"
            "  -f FILE            encode the bytes of FILE ('-' for standard input)\n"
            "  --json             print {\"ids\": [...], \"pieces\": [...]} on one line\n"
            "  --ids              print only the ids (input for detokenize)\n"
            "  --split            print the pre-tokenizer pieces instead of tokens\n"
            "  --no-special       treat special tokens written in the text as plain text\n"
            "  --jsonl-in FILE    batch: each line {\"hex\": \"...\"} or {\"text\": \"...\"}; prints one\n"
            "                     {\"ids\": [...], \"text_hex\": \"...\"} line each (with --split also \"split_hex\")\n"
            "  --bench            time encoding the text and print tokens per second\n"
            "Bytes that are not well-formed UTF-8 are read as U+FFFD, one per maximal ill-formed subpart.\n");
}

int ds_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *jsonl = NULL;
    int json = 0, ids_only = 0, split = 0, allow_special = 1, bench = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--ids")) ids_only = 1;
        else if (!strcmp(a, "--split")) split = 1;
        else if (!strcmp(a, "--no-special")) allow_special = 0;
        else if (!strcmp(a, "--bench")) bench = 1;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(text = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--jsonl-in")) {
            if (!(jsonl = ds_arg_value(argc, argv, &i))) return 2;
        } else {
            fprintf(stderr, "deltaserve tokenize: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!model || (!!text + !!file + !!jsonl) != 1) {
        fprintf(stderr, "deltaserve tokenize: -m PATH and one of -p TEXT, -f FILE, --jsonl-in FILE are required\n");
        tokenize_usage(stderr);
        return 2;
    }
    ds_tokenizer *t;
    double t0 = now_s();
    if (open_tokenizer("tokenize", model, &t)) return 1;
    double load_s = now_s() - t0;
    if (jsonl) {
        int rc = run_jsonl(t, jsonl, allow_special, split);
        ds_tokenizer_free(t);
        return rc;
    }
    char *buf = NULL;
    size_t len;
    if (file) {
        if (read_input("tokenize", file, &buf, &len)) {
            ds_tokenizer_free(t);
            return 1;
        }
        text = buf;
    } else {
        len = strlen(text);
    }
    int rc = 0;
    ds_err e = {0};
    ds_tokens toks = {0};
    if (bench) {
        rc = run_bench(t, text, len, allow_special, load_s);
    } else if (split) {
        split_out o = {stdout, 0};
        if (ds_tokenizer_pretokenize(t, text, len, allow_special, print_piece_text, &o, &e)) rc = 1;
    } else if (ds_tokenizer_encode(t, text, len, allow_special, &toks, &e)) {
        rc = 1;
    } else if (json) {
        fputs("{\"ids\":[", stdout);
        for (size_t i = 0; i < toks.n; i++) printf(i ? ",%d" : "%d", toks.ids[i]);
        fputs("],\"pieces\":[", stdout);
        for (size_t i = 0; i < toks.n; i++) {
            if (i) putchar(',');
            const char *piece = ds_tokenizer_piece(t, toks.ids[i]);
            put_json_string(stdout, piece, strlen(piece));
        }
        printf("],\"n_tokens\":%zu}\n", toks.n);
    } else {
        for (size_t i = 0; i < toks.n; i++) printf(i ? " %d" : "%d", toks.ids[i]);
        putchar('\n');
        for (size_t i = 0; i < toks.n && !ids_only; i++) {
            size_t n;
            const char *bytes = ds_tokenizer_token_bytes(t, toks.ids[i], &n);
            printf("%8d  %-24s ", toks.ids[i], ds_tokenizer_piece(t, toks.ids[i]));
            put_quoted(stdout, bytes, n);
            putchar('\n');
        }
        if (!ids_only) printf("%zu tokens\n", toks.n);
    }
    if (rc && !bench) fprintf(stderr, "deltaserve tokenize: %s\n", e.msg);
    free(toks.ids);
    free(buf);
    ds_tokenizer_free(t);
    return rc;
}

/* --- detokenize --- */

/* Integers separated by spaces, commas or brackets, so that a JSON list or
 * the first line of `tokenize` both read back. */
static int parse_ids(const char *s, size_t len, ds_tokens *out) {
    size_t i = 0;
    while (i < len) {
        char c = s[i];
        if (c == ' ' || c == ',' || c == '[' || c == ']' || c == '\n' || c == '\r' || c == '\t') {
            i++;
            continue;
        }
        if (c < '0' || c > '9') {
            fprintf(stderr, "deltaserve detokenize: '%c' at byte %zu is not part of a list of token ids\n", c, i);
            return -1;
        }
        long v = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9' && v <= INT32_MAX) v = v * 10 + (s[i++] - '0');
        int32_t id = v > INT32_MAX ? INT32_MAX : (int32_t)v;
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 64;
            int32_t *ids = realloc(out->ids, cap * sizeof *ids);
            if (!ids) {
                fprintf(stderr, "deltaserve detokenize: out of memory\n");
                return -1;
            }
            out->ids = ids;
            out->cap = cap;
        }
        out->ids[out->n++] = id;
    }
    return 0;
}

static void detokenize_usage(FILE *f) {
    fprintf(f,
            "usage: deltaserve detokenize -m PATH (-i IDS | -f FILE) [options]\n"
            "  -m PATH          a GGUF file, a Hugging Face directory or a tokenizer.json\n"
            "  -i IDS           token ids separated by spaces or commas (a JSON list works)\n"
            "  -f FILE          read the ids from FILE ('-' for standard input)\n"
            "  --skip-special   leave out special (control) tokens\n"
            "  --json           print {\"text\": ..., \"hex\": ...}; text has U+FFFD for ill-formed bytes\n"
            "  --stream         decode token by token as a server streams: one line per token with\n"
            "                   the text it releases and the bytes held back\n"
            "Without --json or --stream the exact bytes are written, with no newline added.\n");
}

static int run_stream(const ds_tokenizer *t, const ds_tokens *ids, int skip_special) {
    ds_stream_decoder d;
    ds_err e = {0};
    if (ds_stream_decoder_init(&d, t, skip_special, &e)) {
        fprintf(stderr, "deltaserve detokenize: %s\n", e.msg);
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < ids->n && !rc; i++) {
        const char *out;
        size_t n;
        if (ds_stream_decoder_push(&d, ids->ids[i], &out, &n, &e)) {
            fprintf(stderr, "deltaserve detokenize: %s\n", e.msg);
            rc = 1;
            break;
        }
        printf("%d\t", ids->ids[i]);
        put_quoted(stdout, out, n);
        printf("\theld %d\n", ds_stream_decoder_held(&d));
    }
    if (!rc) {
        const char *out;
        size_t n;
        ds_stream_decoder_flush(&d, &out, &n);
        printf("flush\t");
        put_quoted(stdout, out, n);
        printf("\theld 0\n");
    }
    ds_stream_decoder_free(&d);
    return rc;
}

int ds_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *list = NULL, *file = NULL;
    int json = 0, skip_special = 0, stream = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            detokenize_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--skip-special")) skip_special = 1;
        else if (!strcmp(a, "--stream")) stream = 1;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-i") || !strcmp(a, "--ids")) {
            if (!(list = ds_arg_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = ds_arg_value(argc, argv, &i))) return 2;
        } else {
            fprintf(stderr, "deltaserve detokenize: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!model || !list == !file) {
        fprintf(stderr, "deltaserve detokenize: -m PATH and one of -i IDS, -f FILE are required\n");
        detokenize_usage(stderr);
        return 2;
    }
    char *buf = NULL;
    size_t len;
    if (file) {
        if (read_input("detokenize", file, &buf, &len)) return 1;
        list = buf;
    } else {
        len = strlen(list);
    }
    ds_tokens ids = {0};
    ds_tokenizer *t = NULL;
    int rc = parse_ids(list, len, &ids) || open_tokenizer("detokenize", model, &t) ? 1 : 0;
    if (!rc && stream) {
        rc = run_stream(t, &ids, skip_special);
    } else if (!rc) {
        char *text;
        size_t n;
        ds_err e = {0};
        if (ds_tokenizer_decode(t, ids.ids, ids.n, skip_special, &text, &n, &e)) {
            fprintf(stderr, "deltaserve detokenize: %s\n", e.msg);
            rc = 1;
        } else if (json) {
            /* text: ill-formed bytes as U+FFFD, a NUL as \u0000; hex: the exact bytes */
            fputs("{\"text\":", stdout);
            put_json_string(stdout, text, n);
            fputs(",\"hex\":\"", stdout);
            put_hex(stdout, text, n);
            fputs("\"}\n", stdout);
            free(text);
        } else {
            fwrite(text, 1, n, stdout);
            free(text);
        }
    }
    free(ids.ids);
    free(buf);
    ds_tokenizer_free(t);
    return rc;
}
