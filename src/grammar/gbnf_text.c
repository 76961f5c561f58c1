/* gbnf_text.c - see gbnf_text.h. */
#include "grammar/gbnf_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)), o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63));
    o[2] = (char)(0x80 | (cp >> 6 & 63)), o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

int32_t ds_utf8_decode(const char *s, size_t n, int *used) {
    const unsigned char *u = (const unsigned char *)s;
    *used = 1;
    if (n == 0) return -1;
    if (u[0] < 0x80) return u[0];
    int len = u[0] >= 0xF0 && u[0] < 0xF5 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC2 && u[0] < 0xE0 ? 2 : 0;
    if (!len || (size_t)len > n) return -1;
    uint32_t cp = u[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (u[i] & 63);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return -1;
    *used = len;
    return (int32_t)cp;
}

void ds_gtext_lit_cp(ds_sb *t, uint32_t cp) {
    char b[8];
    if (cp == '"' || cp == '\\') { b[0] = '\\', b[1] = (char)cp; ds_sb_append(t, b, 2); }
    else if (cp < 0x20 || cp == 0x7f) ds_sb_printf(t, "\\x%02X", (unsigned)cp);
    else if (cp >= 0xD800 && cp < 0xE000) ds_sb_printf(t, "\\u%04X", (unsigned)cp);
    else ds_sb_append(t, b, (size_t)ds_utf8_encode(cp, b));
}

void ds_gtext_literal(ds_sb *t, const char *s, size_t n) {
    ds_sb_puts(t, "\"");
    for (size_t i = 0; i < n;) {
        int used;
        int32_t cp = ds_utf8_decode(s + i, n - i, &used);
        if (cp < 0) ds_sb_printf(t, "\\x%02X", (unsigned char)s[i]);
        else ds_gtext_lit_cp(t, (uint32_t)cp);
        i += (size_t)used;
    }
    ds_sb_puts(t, "\"");
}

void ds_gtext_class_cp(ds_sb *t, uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
        char c = (char)cp;
        ds_sb_append(t, &c, 1);
    } else if (cp < 0x80) ds_sb_printf(t, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000) ds_sb_printf(t, "\\u%04X", (unsigned)cp);
    else ds_sb_printf(t, "\\U%08X", (unsigned)cp);
}

int ds_json_cp_plain(uint32_t cp) { return cp >= 0x20; }

void ds_gtext_json_cp(ds_sb *t, uint32_t cp) {
    if (cp >= 0x20) {
        ds_sb_puts(t, "\"");
        if (cp == '"' || cp == '\\') ds_sb_puts(t, "\\\\");
        ds_gtext_lit_cp(t, cp);
        ds_sb_puts(t, "\"");
        return;
    }
    static const char shorts[] = "btnvfr"; /* 8..13; \v has no JSON short form */
    ds_sb_puts(t, "(\"\\\\");
    if (cp >= 8 && cp <= 13 && cp != 11) ds_sb_printf(t, "%c\" | \"\\\\", shorts[cp - 8]);
    ds_sb_printf(t, "u00%c\" ", cp >> 4 ? '1' : '0');
    unsigned d = cp & 15;
    if (d < 10) ds_sb_printf(t, "\"%u\")", d);
    else ds_sb_printf(t, "[%c%c])", 'a' + d - 10, 'A' + d - 10);
}
