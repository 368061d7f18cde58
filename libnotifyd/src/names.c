/* names.c - name grammar (PROTOCOL.md 8) and pattern matching (8.1). */
#include "names.h"
#include "wire.h"
#include <stdint.h>
#include <string.h>

/* Invisible scalars rejected although they are above U+009F (the fixed list of 8). */
static int invisible(uint32_t c) {
    return c == 0xA0 || c == 0xAD || c == 0x1680 || c == 0x180E || (c >= 0x2000 && c <= 0x200F) ||
           (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 ||
           (c >= 0xFDD0 && c <= 0xFDEF) || c == 0xFEFF || (c >= 0xFFF0 && c <= 0xFFFF) ||
           (c & 0xFFFE) == 0xFFFE || (c >= 0xE0000 && c <= 0xE007F);
}

static int label_char(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                         c == '-' || c == '_' || c == ':' || c == '@' || c == '+' || c == '=';
    return c >= 0xA0 && !invisible(c);
}

/* Decodes one scalar of already validated UTF-8. */
static uint32_t next_cp(const uint8_t **p) {
    const uint8_t *s = *p;
    uint32_t c = s[0];
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len > 1) {
        c &= len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
        for (int k = 1; k < len; k++) c = c << 6 | (s[k] & 0x3F);
    }
    *p = s + len;
    return c;
}

int name_valid(const char *s, size_t max_len, int wild) {
    if (!s) return 0;
    size_t n = strlen(s);
    if (n == 0 || n > max_len || n > 255 || !w_utf8_valid((const uint8_t *)s, n)) return 0;
    const uint8_t *p = (const uint8_t *)s, *end = p + n;
    while (p <= end) {
        const uint8_t *dot = memchr(p, '.', (size_t)(end - p));
        const uint8_t *lend = dot ? dot : end;
        size_t llen = (size_t)(lend - p);
        if (llen == 0) return 0;
        if (llen == 1 && (*p == '*' || *p == '>')) {
            if (!wild) return 0;
            if (*p == '>' && dot) return 0; /* ">" only as the last label */
        } else {
            const uint8_t *q = p;
            while (q < lend) if (!label_char(next_cp(&q))) return 0;
        }
        if (!dot) break;
        p = dot + 1;
    }
    return 1;
}

int name_is_self(const char *s) { return s && strncmp(s, "self.", 5) == 0; }

int name_is_pattern(const char *s) {
    for (const char *p = s; *p; ) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 1 && (*p == '*' || *p == '>')) return 1;
        if (!dot) break;
        p = dot + 1;
    }
    return 0;
}

int name_matches(const char *pat, const char *name) {
    const char *p = pat, *n = name;
    for (;;) {
        const char *pd = strchr(p, '.'), *nd = strchr(n, '.');
        size_t pl = pd ? (size_t)(pd - p) : strlen(p), nl = nd ? (size_t)(nd - n) : strlen(n);
        if (pl == 1 && *p == '>') return 1; /* at least one label is left in the name here */
        if (!(pl == 1 && *p == '*') && (pl != nl || memcmp(p, n, pl) != 0)) return 0;
        if (!pd || !nd) return !pd && !nd;
        p = pd + 1; n = nd + 1;
    }
}
