/* wire.c - frame encoding and strict decoding (protocol/PROTOCOL.md 2-7). */
#include "wire.h"
#include <stdlib.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v; }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
uint32_t w_get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint64_t get64(const uint8_t *p) { return (uint64_t)w_get32(p) << 32 | w_get32(p + 4); }

void wbuf_free(struct wbuf *b) { free(b->data); b->data = NULL; b->len = b->cap = 0; }

/* Reserves a frame of `body` bytes after the type byte; returns where the fields go, or NULL. */
static uint8_t *frame(struct wbuf *b, uint8_t type, size_t body) {
    if (b->failed) return NULL;
    size_t need = b->len + 5 + body;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) { b->failed = 1; return NULL; }
        b->data = d; b->cap = cap;
    }
    uint8_t *p = b->data + b->len;
    put32(p, (uint32_t)(body + 1));
    p[4] = type;
    b->len = need;
    return p + 5;
}

static uint8_t *put_string(uint8_t *p, const char *s, size_t n) { put16(p, (uint16_t)n); memcpy(p + 2, s, n); return p + 2 + n; }

void w_hello(struct wbuf *b, const char *name) {
    size_t n = strlen(name);
    if (n > 255) n = 255;
    while (n > 0 && ((uint8_t)name[n] & 0xC0) == 0x80) n--; /* cut at a character boundary */
    uint8_t *p = frame(b, FT_HELLO, 2 + 4 + 2 + n);
    if (!p) return;
    put16(p, 1); put32(p + 2, 0); put_string(p + 6, name, n);
}

void w_subscribe(struct wbuf *b, uint32_t req, uint32_t sub_id, uint8_t flags, uint8_t policy, uint32_t limit,
                 const char *pattern) {
    size_t n = strlen(pattern);
    uint8_t *p = frame(b, FT_SUBSCRIBE, 4 + 4 + 1 + 1 + 4 + 2 + n);
    if (!p) return;
    put32(p, req); put32(p + 4, sub_id); p[8] = flags; p[9] = policy; put32(p + 10, limit);
    put_string(p + 14, pattern, n);
}

void w_unsubscribe(struct wbuf *b, uint32_t req, uint32_t sub_id) {
    uint8_t *p = frame(b, FT_UNSUBSCRIBE, 8);
    if (p) { put32(p, req); put32(p + 4, sub_id); }
}

void w_post(struct wbuf *b, uint32_t req, uint8_t flags, const char *name, const void *payload, size_t len) {
    size_t n = strlen(name);
    uint8_t *p = frame(b, FT_POST, 4 + 1 + 2 + n + 4 + len);
    if (!p) return;
    put32(p, req); p[4] = flags;
    p = put_string(p + 5, name, n);
    put32(p, (uint32_t)len);
    if (len) memcpy(p + 4, payload, len);
}

void w_simple(struct wbuf *b, uint8_t type, uint32_t req) {
    uint8_t *p = frame(b, type, 4);
    if (p) put32(p, req);
}

void w_set_state(struct wbuf *b, uint32_t req, uint64_t value, const char *name) {
    size_t n = strlen(name);
    uint8_t *p = frame(b, FT_SET_STATE, 4 + 8 + 2 + n);
    if (p) { put32(p, req); put64(p + 4, value); put_string(p + 12, name, n); }
}

void w_get_state(struct wbuf *b, uint32_t req, const char *name) {
    size_t n = strlen(name);
    uint8_t *p = frame(b, FT_GET_STATE, 4 + 2 + n);
    if (p) { put32(p, req); put_string(p + 4, name, n); }
}

void w_query(struct wbuf *b, uint32_t req, uint8_t kind, const char *arg) {
    size_t n = strlen(arg);
    uint8_t *p = frame(b, FT_QUERY, 4 + 1 + 2 + n);
    if (p) { put32(p, req); p[4] = kind; put_string(p + 5, arg, n); }
}

int w_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t len; uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

/* A bounds-checked reader over one frame body. */
struct cur { const uint8_t *p, *end; int bad; };
static int need(struct cur *c, size_t n) { if ((size_t)(c->end - c->p) < n) { c->bad = 1; return 0; } return 1; }
static uint8_t r8(struct cur *c) { return need(c, 1) ? *c->p++ : 0; }
static uint16_t r16(struct cur *c) { if (!need(c, 2)) return 0; uint16_t v = get16(c->p); c->p += 2; return v; }
static uint32_t r32(struct cur *c) { if (!need(c, 4)) return 0; uint32_t v = w_get32(c->p); c->p += 4; return v; }
static uint64_t r64(struct cur *c) { if (!need(c, 8)) return 0; uint64_t v = get64(c->p); c->p += 8; return v; }
static const char *rstr(struct cur *c, uint16_t *n) {
    *n = r16(c);
    if (c->bad || !need(c, *n)) return NULL;
    const char *s = (const char *)c->p;
    if (!w_utf8_valid(c->p, *n)) c->bad = 1;
    c->p += *n;
    return s;
}
static void note_fields(struct cur *c, struct frame *f) {
    f->seq = r64(c); f->pid = r32(c); f->uid = r32(c); f->gid = r32(c);
    f->name = rstr(c, &f->name_len);
    f->payload_len = r32(c);
    if (!c->bad && need(c, f->payload_len)) { f->payload = c->p; c->p += f->payload_len; }
}

int w_decode(const uint8_t *body, uint32_t len, struct frame *f) {
    memset(f, 0, sizeof *f);
    if (len < 1) return -1;
    struct cur c = {body + 1, body + len, 0};
    f->type = body[0];
    uint16_t n;
    switch (f->type) {
    case FT_WELCOME:
        if (r16(&c) != 1) c.bad = 1;
        f->daemon_pid = r32(&c);
        if (need(&c, 16)) { f->instance = c.p; c.p += 16; }
        f->max_name = r16(&c); f->max_payload = r32(&c); f->max_frame = r32(&c); f->max_subs = r32(&c);
        f->name = rstr(&c, &f->name_len);
        break;
    case FT_OK: case FT_PONG: f->req = r32(&c); break;
    case FT_POSTED: f->req = r32(&c); f->seq = r64(&c); f->delivered = r32(&c); break;
    case FT_NOTIFICATION: note_fields(&c, f); break;
    case FT_MERGED: f->count = r64(&c); note_fields(&c, f); break;
    case FT_RETAINED: f->req = r32(&c); note_fields(&c, f); break;
    case FT_OVERFLOW: f->sub_id = r32(&c); f->count = r64(&c); break;
    case FT_STATE: f->req = r32(&c); f->flags = r8(&c); f->count = r64(&c); break;
    case FT_GOODBYE: f->count = r32(&c); (void)rstr(&c, &n); break;
    case FT_QUERY_RESULT: case FT_QUERY_PART:
        f->req = r32(&c); f->payload_len = r32(&c);
        if (!c.bad && need(&c, f->payload_len)) { f->payload = c.p; c.p += f->payload_len; }
        break;
    case FT_ERROR: f->req = r32(&c); f->code = r16(&c); f->flags = r8(&c); f->name = rstr(&c, &f->name_len); break;
    case FT_STATE_CHANGED: /* 7.14: only a SUBSCRIBE with the states flag brings it */
        f->req = r32(&c); f->flags = r8(&c); f->count = r64(&c);
        f->pid = r32(&c); f->uid = r32(&c); f->gid = r32(&c);
        f->name = rstr(&c, &f->name_len);
        break;
    default: return -1; /* undefined or client-to-daemon type: a protocol error (4) */
    }
    if (c.bad || c.p != c.end) return -1; /* a field past the end, bad UTF-8, or bytes left over (2) */
    return 0;
}

void w_append_raw(struct wbuf *b, const uint8_t *p, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) { b->failed = 1; return; }
        b->data = d; b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0; /* keeps JSON answers NUL-terminated */
}

int w_split(const uint8_t *buf, size_t len, uint32_t max_frame, uint32_t *flen) {
    if (len < 4) return 0;
    uint32_t n = w_get32(buf);
    if (n == 0 || n > max_frame) return -1; /* decided from the prefix alone (2) */
    *flen = n;
    return len - 4 >= n;
}
