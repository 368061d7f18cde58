/* relay: the per-frame reference. A minimal C epoll broker that speaks the subset of the notifyd protocol the
 * benchmarks use (HELLO, SUBSCRIBE, UNSUBSCRIBE, POST, PING; exact names only) so the same clients drive it.
 * For each POST it encodes one NOTIFICATION and copies it into the output buffer of every subscriber; each
 * connection's buffer is written with one write() per event-loop iteration. Output is bounded per connection
 * (8 MiB; notifications beyond it are dropped), like notifyd's. No validation beyond framing: this is the most
 * a simple broker does per frame, not a product.
 *
 *   relay SOCKET_PATH */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define OUT_LIMIT (8u << 20)
#define MAX_FRAME 131072u

struct buf { uint8_t *p; size_t len, cap, off; };

static void buf_reserve(struct buf *b, size_t extra) {
    if (b->off > 0 && (b->off == b->len || b->len + extra > b->cap)) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) abort();
    b->cap = cap;
}

static void buf_append(struct buf *b, const void *p, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

struct name {
    char *s;
    uint16_t len;
    uint32_t hash;
    int *fds;
    int n, cap;
};

struct conn {
    int fd, open, dirty, want_out, welcomed;
    struct buf in, out;
    uint32_t pid, uid, gid;
    struct name **subs; /* one entry per SUBSCRIBE */
    uint32_t *sub_ids;
    int nsubs, subcap;
};

static struct conn *conns;
static int nconns_cap;
static int *dirty;
static int ndirty;
static int ep;
static uint64_t sequence;
static uint64_t dropped;

/* name table: open addressing, power-of-two capacity */
static struct name **table;
static size_t table_cap, table_count;

static uint32_t fnv(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 16777619u; }
    return h;
}

static struct name *lookup(const char *s, uint16_t len, int create) {
    if (table_cap == 0 || (create && (table_count + 1) * 2 > table_cap)) {
        size_t cap = table_cap ? table_cap * 2 : 1024;
        struct name **t = calloc(cap, sizeof *t);
        for (size_t i = 0; i < table_cap; i++)
            if (table[i]) {
                size_t j = table[i]->hash & (cap - 1);
                while (t[j]) j = (j + 1) & (cap - 1);
                t[j] = table[i];
            }
        free(table);
        table = t;
        table_cap = cap;
    }
    uint32_t h = fnv(s, len);
    size_t j = h & (table_cap - 1);
    while (table[j]) {
        if (table[j]->hash == h && table[j]->len == len && memcmp(table[j]->s, s, len) == 0) return table[j];
        j = (j + 1) & (table_cap - 1);
    }
    if (!create) return NULL;
    struct name *nm = calloc(1, sizeof *nm);
    nm->s = malloc(len);
    memcpy(nm->s, s, len);
    nm->len = len;
    nm->hash = h;
    table[j] = nm;
    table_count++;
    return nm;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = (uint8_t)v; }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static void mark_dirty(struct conn *c) {
    if (!c->dirty) { c->dirty = 1; dirty[ndirty++] = c->fd; }
}

static void reply_id(struct conn *c, uint8_t type, uint32_t id) {
    uint8_t f[9];
    put32(f, 5);
    f[4] = type;
    put32(f + 5, id);
    buf_append(&c->out, f, 9);
    mark_dirty(c);
}

static void welcome(struct conn *c) {
    static const char server[] = "relay";
    uint8_t f[64];
    size_t n = sizeof server - 1;
    put32(f, (uint32_t)(39 + n));
    f[4] = 0x81;
    put16(f + 5, 1);
    put32(f + 7, (uint32_t)getpid());
    memset(f + 11, 0x42, 16);
    put16(f + 27, 255);
    put32(f + 29, 65536);
    put32(f + 33, MAX_FRAME);
    put32(f + 37, 65536);
    put16(f + 41, (uint16_t)n);
    memcpy(f + 43, server, n);
    buf_append(&c->out, f, 43 + n);
    mark_dirty(c);
}

static void close_conn(struct conn *c) {
    for (int i = 0; i < c->nsubs; i++) {
        struct name *nm = c->subs[i];
        for (int k = 0; k < nm->n; k++)
            if (nm->fds[k] == c->fd) { nm->fds[k] = nm->fds[--nm->n]; break; }
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in.p);
    free(c->out.p);
    free(c->subs);
    free(c->sub_ids);
    int fd = c->fd;
    memset(c, 0, sizeof *c);
    c->fd = fd;
}

static void subscribe(struct conn *c, uint32_t id, const char *s, uint16_t len) {
    struct name *nm = lookup(s, len, 1);
    int already = 0;
    for (int i = 0; i < c->nsubs; i++) if (c->subs[i] == nm) { already = 1; break; }
    if (c->nsubs == c->subcap) {
        c->subcap = c->subcap ? c->subcap * 2 : 4;
        c->subs = realloc(c->subs, (size_t)c->subcap * sizeof *c->subs);
        c->sub_ids = realloc(c->sub_ids, (size_t)c->subcap * sizeof *c->sub_ids);
    }
    c->subs[c->nsubs] = nm;
    c->sub_ids[c->nsubs++] = id;
    if (!already) {
        if (nm->n == nm->cap) { nm->cap = nm->cap ? nm->cap * 2 : 2; nm->fds = realloc(nm->fds, (size_t)nm->cap * sizeof(int)); }
        nm->fds[nm->n++] = c->fd;
    }
}

static void post(struct conn *c, const char *s, uint16_t len, const uint8_t *payload, uint32_t plen, uint32_t *delivered) {
    static uint8_t frame[MAX_FRAME + 64];
    sequence++;
    struct name *nm = lookup(s, len, 0);
    *delivered = 0;
    if (!nm || nm->n == 0) return;
    uint32_t flen = 27 + len + plen;
    put32(frame, flen);
    frame[4] = 0x85;
    put64(frame + 5, sequence);
    put32(frame + 13, c->pid);
    put32(frame + 17, c->uid);
    put32(frame + 21, c->gid);
    put16(frame + 25, len);
    memcpy(frame + 27, s, len);
    put32(frame + 27 + len, plen);
    memcpy(frame + 31 + len, payload, plen);
    for (int i = 0; i < nm->n; i++) {
        struct conn *d = &conns[nm->fds[i]];
        if (d->out.len - d->out.off + 4 + flen > OUT_LIMIT) { dropped++; continue; }
        buf_append(&d->out, frame, 4 + flen);
        mark_dirty(d);
        (*delivered)++;
    }
}

/* Processes the whole frames in c->in; returns -1 to close. */
static int process(struct conn *c) {
    while (c->in.len - c->in.off >= 4) {
        const uint8_t *p = c->in.p + c->in.off;
        uint32_t len = get32(p);
        if (len == 0 || len > MAX_FRAME) return -1;
        if (c->in.len - c->in.off < 4 + (size_t)len) break;
        const uint8_t *b = p + 5, *end = p + 4 + len;
        switch (p[4]) {
        case 0x01: if (!c->welcomed) { c->welcomed = 1; welcome(c); } break;
        case 0x02: { /* request u32, sub u32, flags u8, policy u8, limit u32, string */
            if (end - b < 16) return -1;
            uint16_t n = get16(b + 14);
            if (end - b < 16 + n) return -1;
            subscribe(c, get32(b + 4), (const char *)b + 16, n);
            reply_id(c, 0x82, get32(b));
            break;
        }
        case 0x03: {
            if (end - b < 8) return -1;
            uint32_t id = get32(b + 4);
            for (int i = 0; i < c->nsubs; i++)
                if (c->sub_ids[i] == id) {
                    struct name *nm = c->subs[i];
                    c->subs[i] = c->subs[--c->nsubs];
                    c->sub_ids[i] = c->sub_ids[c->nsubs];
                    int still = 0;
                    for (int k = 0; k < c->nsubs; k++) if (c->subs[k] == nm) still = 1;
                    if (!still)
                        for (int k = 0; k < nm->n; k++) if (nm->fds[k] == c->fd) { nm->fds[k] = nm->fds[--nm->n]; break; }
                    break;
                }
            reply_id(c, 0x82, get32(b));
            break;
        }
        case 0x04: { /* request u32, flags u8, name string, payload */
            if (end - b < 7) return -1;
            uint16_t n = get16(b + 5);
            if (end - b < 7 + n + 4) return -1;
            uint32_t plen = get32(b + 7 + n);
            if ((size_t)(end - b) < 11 + (size_t)n + plen) return -1;
            uint32_t delivered;
            post(c, (const char *)b + 7, n, b + 11 + n, plen, &delivered);
            if (b[4] & 1) {
                uint8_t f[21];
                put32(f, 17);
                f[4] = 0x83;
                put32(f + 5, get32(b));
                put64(f + 9, sequence);
                put32(f + 17, delivered);
                buf_append(&c->out, f, 21);
                mark_dirty(c);
            }
            break;
        }
        case 0x05: if (end - b < 4) return -1; reply_id(c, 0x84, get32(b)); break;
        default: return -1;
        }
        c->in.off += 4 + len;
    }
    if (c->in.off == c->in.len) c->in.off = c->in.len = 0;
    return 0;
}

static void flush_conn(struct conn *c) {
    c->dirty = 0;
    if (!c->open) return;
    size_t pending = c->out.len - c->out.off;
    if (pending > 0) {
        ssize_t w = write(c->fd, c->out.p + c->out.off, pending);
        if (w > 0) c->out.off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR) { close_conn(c); return; }
        if (c->out.off == c->out.len) c->out.off = c->out.len = 0;
    }
    int need = c->out.len > c->out.off;
    if (need != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (need ? EPOLLOUT : 0), .data.fd = c->fd};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = need;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: relay SOCKET_PATH\n"); return 2; }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    nconns_cap = (int)(rl.rlim_cur > 1 << 20 ? 1 << 20 : rl.rlim_cur);
    conns = calloc((size_t)nconns_cap, sizeof *conns);
    dirty = calloc((size_t)nconns_cap, sizeof *dirty);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", argv[1]);
    unlink(argv[1]);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 4096) < 0) { perror("relay: bind/listen"); return 1; }
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    static struct epoll_event evs[1024];
    for (;;) {
        int n = epoll_wait(ep, evs, 1024, -1);
        if (n < 0) { if (errno == EINTR) continue; perror("epoll_wait"); return 1; }
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int cfd;
                while ((cfd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    if (cfd >= nconns_cap) { close(cfd); continue; }
                    struct conn *c = &conns[cfd];
                    memset(c, 0, sizeof *c);
                    c->fd = cfd;
                    c->open = 1;
                    struct ucred cr;
                    socklen_t cl = sizeof cr;
                    if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) { c->pid = (uint32_t)cr.pid; c->uid = cr.uid; c->gid = cr.gid; }
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};
                    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev);
                }
                continue;
            }
            struct conn *c = &conns[fd];
            if (!c->open) continue;
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                int closed = 0;
                for (int rounds = 0; rounds < 16; rounds++) {
                    buf_reserve(&c->in, 65536);
                    ssize_t r = read(fd, c->in.p + c->in.len, c->in.cap - c->in.len);
                    if (r > 0) {
                        c->in.len += (size_t)r;
                        if (process(c) < 0) { closed = 1; break; }
                        if ((size_t)r < 65536) break;
                        continue;
                    }
                    if (r == 0 || (errno != EAGAIN && errno != EINTR)) closed = 1;
                    break;
                }
                if (closed) { c->dirty = 0; close_conn(c); continue; }
            }
            if (evs[i].events & EPOLLOUT) mark_dirty(c);
        }
        for (int i = 0; i < ndirty; i++) flush_conn(&conns[dirty[i]]);
        ndirty = 0;
    }
}
