/* See notifyd_client.h. Written from protocol/PROTOCOL.md. */
#define _GNU_SOURCE
#include "notifyd_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct nd_client {
    int fd;
    uint8_t *rbuf;
    size_t rcap, rpos, rlen; /* unread bytes are rbuf[rpos, rlen) */
    uint8_t *wbuf;
    size_t wcap, wlen, wpos;
    uint32_t max_frame; /* 66,560 until WELCOME, then the announced limit (§ 2) */
    int welcomed;
    char error[256];
};

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = (uint8_t)v; }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

static void set_error(nd_client *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
}

const char *nd_error(const nd_client *c) { return c->error; }
int nd_fd(const nd_client *c) { return c->fd; }
size_t nd_pending_write(const nd_client *c) { return c->wlen - c->wpos; }

/* RFC 3629 UTF-8: no overlongs, no surrogates, nothing above U+10FFFF, no truncated sequences (§ 3). */
int nd_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* ASCII fast path */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ull) == 0) { i += 8; continue; }
        }
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) need = 1;
        else if (b == 0xE0) { need = 2; lo = 0xA0; }
        else if (b >= 0xE1 && b <= 0xEC) need = 2;
        else if (b == 0xED) { need = 2; hi = 0x9F; }
        else if (b >= 0xEE && b <= 0xEF) need = 2;
        else if (b == 0xF0) { need = 3; lo = 0x90; }
        else if (b >= 0xF1 && b <= 0xF3) need = 3;
        else if (b == 0xF4) { need = 3; hi = 0x8F; }
        else return 0;
        if (i + need >= n) return 0; /* sequence cut short by the end of the field */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

static void wreserve(nd_client *c, size_t extra) {
    if (c->wpos > 0 && c->wpos == c->wlen) c->wpos = c->wlen = 0;
    if (c->wlen + extra <= c->wcap) return;
    if (c->wpos > 0) {
        memmove(c->wbuf, c->wbuf + c->wpos, c->wlen - c->wpos);
        c->wlen -= c->wpos;
        c->wpos = 0;
        if (c->wlen + extra <= c->wcap) return;
    }
    size_t cap = c->wcap ? c->wcap : 4096;
    while (cap < c->wlen + extra) cap *= 2;
    c->wbuf = realloc(c->wbuf, cap);
    if (!c->wbuf) abort();
    c->wcap = cap;
}

/* Appends a frame header (length prefix + type) for a body of `body` bytes after the type; returns where the
 * fields go. */
static uint8_t *frame(nd_client *c, uint8_t type, size_t fields) {
    wreserve(c, 5 + fields);
    uint8_t *p = c->wbuf + c->wlen;
    put32(p, (uint32_t)(1 + fields));
    p[4] = type;
    c->wlen += 5 + fields;
    return p + 5;
}

void nd_subscribe_policy(nd_client *c, uint32_t request_id, uint32_t subscription_id, uint8_t policy,
                         uint32_t queue_limit, const char *pattern, size_t len) {
    /* request_id u32, subscription_id u32, flags u8, policy u8, queue_limit u32, pattern string */
    uint8_t *p = frame(c, ND_SUBSCRIBE, 4 + 4 + 1 + 1 + 4 + 2 + len);
    put32(p, request_id);
    put32(p + 4, subscription_id);
    p[8] = 0;
    p[9] = policy;
    put32(p + 10, queue_limit);
    put16(p + 14, (uint16_t)len);
    memcpy(p + 16, pattern, len);
}

void nd_subscribe(nd_client *c, uint32_t request_id, uint32_t subscription_id, const char *pattern, size_t len) {
    nd_subscribe_policy(c, request_id, subscription_id, 0, 0, pattern, len); /* coalesce, the default */
}

void nd_unsubscribe(nd_client *c, uint32_t request_id, uint32_t subscription_id) {
    uint8_t *p = frame(c, ND_UNSUBSCRIBE, 8);
    put32(p, request_id);
    put32(p + 4, subscription_id);
}

void nd_post(nd_client *c, uint32_t request_id, uint8_t flags, const char *name, size_t name_len,
             const void *payload, size_t payload_len) {
    uint8_t *p = frame(c, ND_POST, 4 + 1 + 2 + name_len + 4 + payload_len);
    put32(p, request_id);
    p[4] = flags;
    put16(p + 5, (uint16_t)name_len);
    memcpy(p + 7, name, name_len);
    put32(p + 7 + name_len, (uint32_t)payload_len);
    if (payload_len) memcpy(p + 11 + name_len, payload, payload_len);
}

void nd_ping(nd_client *c, uint32_t request_id) {
    uint8_t *p = frame(c, ND_PING, 4);
    put32(p, request_id);
}

static void hello(nd_client *c, const char *client_name) {
    size_t n = strlen(client_name);
    if (n > 255) n = 255;
    uint8_t *p = frame(c, ND_HELLO, 2 + 4 + 2 + n);
    put16(p, 1);
    put32(p + 2, 0);
    put16(p + 6, (uint16_t)n);
    memcpy(p + 8, client_name, n);
}

int nd_flush(nd_client *c) {
    while (c->wpos < c->wlen) {
        ssize_t w = write(c->fd, c->wbuf + c->wpos, c->wlen - c->wpos);
        if (w > 0) { c->wpos += (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            /* Keep reading while waiting, so neither side can block the other. */
            struct pollfd pfd = {c->fd, POLLOUT | POLLIN, 0};
            if (poll(&pfd, 1, 1000) < 0 && errno != EINTR) return -1;
            if (pfd.revents & POLLIN) { if (nd_read(c) < 0) return -1; }
            if (pfd.revents & (POLLERR | POLLHUP) && !(pfd.revents & POLLOUT)) { set_error(c, "connection closed"); return -1; }
            continue;
        }
        set_error(c, "write: %s", strerror(errno));
        return -1;
    }
    c->wpos = c->wlen = 0;
    return 0;
}

int nd_read(nd_client *c) {
    if (c->rpos == c->rlen) c->rpos = c->rlen = 0;
    if (c->rcap - c->rlen < 16384) {
        if (c->rpos > 0) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        }
        if (c->rcap - c->rlen < 16384) {
            size_t cap = c->rcap ? c->rcap * 2 : 65536;
            c->rbuf = realloc(c->rbuf, cap);
            if (!c->rbuf) abort();
            c->rcap = cap;
        }
    }
    for (;;) {
        ssize_t r = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (r > 0) { c->rlen += (size_t)r; return (int)r; }
        if (r == 0) { set_error(c, "end of file from the daemon"); return -1; }
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return 0;
        set_error(c, "read: %s", strerror(errno));
        return -1;
    }
}

/* Field readers with bounds checks against the frame's end. */
struct cursor { const uint8_t *p, *end; int bad; };
static uint8_t rd8(struct cursor *k) { if (k->end - k->p < 1) { k->bad = 1; return 0; } return *k->p++; }
static uint16_t rd16(struct cursor *k) { if (k->end - k->p < 2) { k->bad = 1; return 0; } uint16_t v = get16(k->p); k->p += 2; return v; }
static uint32_t rd32(struct cursor *k) { if (k->end - k->p < 4) { k->bad = 1; return 0; } uint32_t v = get32(k->p); k->p += 4; return v; }
static uint64_t rd64(struct cursor *k) { if (k->end - k->p < 8) { k->bad = 1; return 0; } uint64_t v = get64(k->p); k->p += 8; return v; }
static const char *rdstr(struct cursor *k, uint16_t *len) {
    *len = rd16(k);
    if (k->bad || k->end - k->p < *len) { k->bad = 1; return NULL; }
    const char *s = (const char *)k->p;
    if (!nd_utf8_valid(k->p, *len)) { k->bad = 2; return NULL; }
    k->p += *len;
    return s;
}
static const uint8_t *rdpayload(struct cursor *k, uint32_t *len) {
    *len = rd32(k);
    if (k->bad || (uint64_t)(k->end - k->p) < *len) { k->bad = 1; return NULL; }
    const uint8_t *s = k->p;
    k->p += *len;
    return s;
}

static void notification_fields(struct cursor *k, struct nd_frame *f) {
    f->sequence = rd64(k);
    f->pid = rd32(k);
    f->uid = rd32(k);
    f->gid = rd32(k);
    f->name = rdstr(k, &f->name_len);
    f->payload = rdpayload(k, &f->payload_len);
}

int nd_next(nd_client *c, struct nd_frame *f) {
    size_t avail = c->rlen - c->rpos;
    if (avail < 4) return 0;
    const uint8_t *base = c->rbuf + c->rpos;
    uint32_t length = get32(base);
    uint32_t limit = c->welcomed ? c->max_frame : ND_MIN_MAX_FRAME;
    if (length == 0 || length > limit) { set_error(c, "frame length %u outside 1...%u", length, limit); return -1; }
    if (avail < 4 + (size_t)length) return 0;
    struct cursor k = {base + 5, base + 4 + length, 0};
    memset(f, 0, sizeof *f);
    f->type = base[4];
    switch (f->type) {
    case ND_WELCOME: {
        uint16_t version = rd16(&k);
        f->daemon_pid = rd32(&k);
        rd64(&k); rd64(&k); /* instance_id */
        f->max_name = rd16(&k);
        f->max_payload = rd32(&k);
        f->max_frame = rd32(&k);
        f->max_subscriptions = rd32(&k);
        uint16_t n;
        rdstr(&k, &n);
        if (!k.bad && version != 1) { set_error(c, "WELCOME for protocol version %u", version); return -1; }
        if (!k.bad) { c->welcomed = 1; c->max_frame = f->max_frame < ND_MIN_MAX_FRAME ? ND_MIN_MAX_FRAME : f->max_frame; }
        break;
    }
    case ND_OK: case ND_PONG: f->request_id = rd32(&k); break;
    case ND_POSTED: f->request_id = rd32(&k); f->sequence = rd64(&k); f->delivered = rd32(&k); break;
    case ND_NOTIFICATION: notification_fields(&k, f); break;
    case ND_NOTIFICATION_MERGED: f->count = rd64(&k); notification_fields(&k, f); break;
    case ND_RETAINED: f->request_id = rd32(&k); notification_fields(&k, f); break;
    case ND_OVERFLOW: f->subscription_id = rd32(&k); f->count = rd64(&k); break;
    case ND_STATE: f->request_id = rd32(&k); f->closing = rd8(&k); f->count = rd64(&k); break;
    case ND_QUERY_RESULT: case ND_QUERY_RESULT_PART: f->request_id = rd32(&k); rdpayload(&k, &f->payload_len); break;
    case ND_STATE_CHANGED: /* only for a SUBSCRIBE with the states flag (§ 7.14), which this client never sends */
        f->request_id = rd32(&k); f->closing = rd8(&k); f->count = rd64(&k);
        f->pid = rd32(&k); f->uid = rd32(&k); f->gid = rd32(&k);
        f->name = rdstr(&k, &f->name_len);
        break;
    case ND_GOODBYE: /* the daemon is shutting down; the last frame (may come before WELCOME) */
        f->count = rd32(&k);
        f->message = rdstr(&k, &f->message_len);
        break;
    case ND_ERROR:
        f->request_id = rd32(&k);
        f->code = rd16(&k);
        f->closing = rd8(&k) & 1;
        f->message = rdstr(&k, &f->message_len);
        break;
    default: set_error(c, "unknown message type 0x%02x from the daemon", f->type); return -1;
    }
    if (k.bad == 2) { set_error(c, "invalid UTF-8 in a 0x%02x frame", f->type); return -1; }
    if (k.bad) { set_error(c, "truncated field in a 0x%02x frame", f->type); return -1; }
    if (k.p != k.end) { set_error(c, "%zu trailing bytes in a 0x%02x frame", (size_t)(k.end - k.p), f->type); return -1; }
    if (!c->welcomed && f->type != ND_ERROR && f->type != ND_GOODBYE) { set_error(c, "first frame is 0x%02x, not WELCOME", f->type); return -1; }
    c->rpos += 4 + length;
    return 1;
}

static int wait_readable(nd_client *c, int timeout_ms) {
    struct pollfd pfd = {c->fd, POLLIN, 0};
    int r = poll(&pfd, 1, timeout_ms);
    if (r < 0 && errno != EINTR) { set_error(c, "poll: %s", strerror(errno)); return -1; }
    return r;
}

int nd_wait_reply(nd_client *c, uint32_t request_id, void (*on_note)(void *, const struct nd_frame *), void *arg) {
    if (nd_flush(c) < 0) return -1;
    struct nd_frame f;
    for (;;) {
        int r;
        while ((r = nd_next(c, &f)) == 1) {
            switch (f.type) {
            case ND_NOTIFICATION: case ND_NOTIFICATION_MERGED:
                if (on_note) on_note(arg, &f);
                break;
            case ND_OK: case ND_PONG: case ND_POSTED:
                if (f.request_id == request_id) return 1;
                break;
            case ND_GOODBYE:
                set_error(c, "daemon is shutting down: %.*s", f.message_len, f.message);
                return -1;
            case ND_ERROR:
                if (f.closing) { set_error(c, "daemon closed the connection: %.*s", f.message_len, f.message); return -1; }
                if (f.request_id == request_id) { set_error(c, "rejected: %.*s", f.message_len, f.message); return 0; }
                break;
            default: break;
            }
        }
        if (r < 0) return -1;
        if (wait_readable(c, 10000) <= 0) { if (!c->error[0]) set_error(c, "timed out waiting for reply %u", request_id); return -1; }
        if (nd_read(c) < 0) return -1;
    }
}

int nd_wait_welcome(nd_client *c, char *err, size_t errlen) {
    struct nd_frame f;
    if (nd_flush(c) < 0) goto fail;
    while (!c->welcomed) {
        int r = nd_next(c, &f);
        if (r < 0) goto fail;
        if (r == 1) {
            if (f.type == ND_ERROR || f.type == ND_GOODBYE) { set_error(c, "handshake failed: %.*s", f.message_len, f.message); goto fail; }
            continue;
        }
        if (wait_readable(c, 10000) <= 0) { set_error(c, "timed out waiting for WELCOME"); goto fail; }
        if (nd_read(c) < 0) goto fail;
    }
    return 0;
fail:
    if (err) snprintf(err, errlen, "%s", c->error);
    return -1;
}

nd_client *nd_connect(const char *path, const char *client_name, int wait_welcome, char *err, size_t errlen) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) { snprintf(err, errlen, "socket: %s", strerror(errno)); return NULL; }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) { close(fd); snprintf(err, errlen, "socket path too long"); return NULL; }
    strcpy(addr.sun_path, path);
    while (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) { usleep(1000); continue; } /* backlog full (many connections at once) */
        snprintf(err, errlen, "connect %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    nd_client *c = calloc(1, sizeof *c);
    c->fd = fd;
    c->max_frame = ND_MIN_MAX_FRAME;
    hello(c, client_name);
    if (wait_welcome == ND_PIPELINE_HELLO) return c;
    if (wait_welcome == ND_WAIT_WELCOME && nd_wait_welcome(c, err, errlen) < 0) { nd_close(c); return NULL; }
    if (wait_welcome == ND_SEND_HELLO && nd_flush(c) < 0) { snprintf(err, errlen, "%s", c->error); nd_close(c); return NULL; }
    return c;
}

nd_client *nd_from_bytes(const uint8_t *bytes, size_t n, uint32_t max_frame) {
    nd_client *c = calloc(1, sizeof *c);
    c->fd = -1;
    c->rbuf = malloc(n ? n : 1);
    memcpy(c->rbuf, bytes, n);
    c->rcap = c->rlen = n;
    c->welcomed = 1;
    c->max_frame = max_frame;
    return c;
}

size_t nd_buffered(const nd_client *c) { return c->rlen - c->rpos; }

void nd_close(nd_client *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    free(c->rbuf);
    free(c->wbuf);
    free(c);
}
