/* conn.c - the one connection of this process to notifyd: socket path (PROTOCOL.md 1), the daemon-user
 * check, the handshake with re-registration, writing frames (the outbound buffer, see internal.h), and
 * requests waiting for their replies. The reading side, and writing what the socket did not take at once,
 * is reader.c. */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The outbound buffer: a call that would take it past this waits for room (one frame always fits). */
#define OUT_LIMIT (1u << 20)

void nd_deadline(struct timespec *ts, long ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (ms < 0) ms = 0;
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) { ts->tv_sec++; ts->tv_nsec -= 1000000000L; }
}

long nd_ms_left(const struct timespec *ts) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ns = (long long)(ts->tv_sec - now.tv_sec) * 1000000000LL + (ts->tv_nsec - now.tv_nsec);
    if (ns <= 0) return ns == 0 ? 0 : -1;
    return (long)((ns + 999999) / 1000000); /* rounded up: 0 only when passed */
}

int nd_wait_until(pthread_cond_t *c, const struct timespec *until) {
    if (nd_ms_left(until) <= 0) return ETIMEDOUT;
    return pthread_cond_timedwait(c, &g.lock, until);
}

void nd_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.last_error, sizeof g.last_error, fmt, ap);
    va_end(ap);
}

uint32_t nd_next_req(void) {
    if (++g.next_req == 0) g.next_req = 1; /* 0 means "no request" in ERROR (5.2) */
    return g.next_req;
}

/* Where the daemon listens: the same rules as the daemon and the Swift library (PROTOCOL.md 1). */
const char *nd_socket_path(char *buf, size_t n) {
    const char *env = getenv("NOTIFYD_SOCKET");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (env && *env) snprintf(buf, n, "%s", env);
    else if (getuid() == 0) snprintf(buf, n, "/run/notifyd/notifyd.sock");
    else if (xdg && *xdg) snprintf(buf, n, "%s/notifyd/notifyd.sock", xdg);
    else snprintf(buf, n, "/tmp/notifyd-%u/notifyd.sock", (unsigned)getuid());
    return buf;
}

/* Whether only root can have put a socket in the directory of `path` (the system daemon's /run/notifyd). */
static int root_only_directory(const char *path) {
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

/* The daemon must run as this user or root, or as NOTIFYD_DAEMON_UID (a uid or "any"), or sit in a
 * directory only root may write to: another local user could otherwise read what we post. */
static int daemon_trusted(int fd, const char *path) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) return 0;
    uid_t me = getuid();
    if (cred.uid == me || cred.uid == 0) return 1;
    const char *env = getenv("NOTIFYD_DAEMON_UID");
    if (env && strcmp(env, "any") == 0) return 1;
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(env, &end, 10);
        if (!errno && !*end && *env >= '0' && *env <= '9' && v <= 0xFFFFFFFFul && cred.uid == (uid_t)v) return 1;
    }
    if (root_only_directory(path)) return 1;
    nd_set_error("refusing the daemon at %s: it runs as uid %u, not as you (uid %u) or root; set "
                 "NOTIFYD_DAEMON_UID=%u if you trust that user", path, (unsigned)cred.uid, (unsigned)me,
                 (unsigned)cred.uid);
    return 0;
}

/* Connects, checks the daemon's user, and pipelines HELLO and a SUBSCRIBE for every active subscription
 * (re-registration after a reconnection). Lock held. */
uint32_t nd_connect_locked(void) {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    nd_socket_path(path, sizeof path);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) { nd_set_error("socket path too long: %s", path); return NOTIFY_STATUS_SERVER_NOT_FOUND; }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    if (g.wake_efd < 0 && (g.wake_efd = eventfd_cloexec()) < 0) {
        nd_set_error("eventfd: %s", strerror(errno));
        return NOTIFY_STATUS_SERVER_NOT_FOUND;
    }
    /* Non-blocking from the start: a daemon whose listen queue is full (stopped, hung) fails the connect
     * with EAGAIN instead of blocking us with the lock held. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) { nd_set_error("socket: %s", strerror(errno)); return NOTIFY_STATUS_SERVER_NOT_FOUND; }
    int r;
    do r = connect(fd, (struct sockaddr *)&addr, sizeof addr); while (r < 0 && errno == EINTR);
    if (r < 0) {
        if (errno == EAGAIN) nd_set_error("cannot connect to %s: the daemon accepts no connections (its queue is full)", path);
        else nd_set_error("cannot connect to %s: %s", path, strerror(errno));
        close(fd);
        return NOTIFY_STATUS_SERVER_NOT_FOUND;
    }
    if (!daemon_trusted(fd, path)) { close(fd); return NOTIFY_STATUS_SERVER_NOT_FOUND; }

    /* HELLO and a SUBSCRIBE for every active subscription go first into the (empty) outbound buffer. */
    nd_reset_out();
    const char *prog = program_invocation_short_name;
    w_hello(&g.out, prog && *prog ? prog : "libnotifyd");
    for (size_t i = 0; i < g.subs.cap; i++)
        for (struct hnode *n = g.subs.slots[i]; n; n = n->next) {
            struct nd_sub *s = container_of(n, struct nd_sub, node);
            /* Pending ones were failed with the old connection; their threads retry or give up. Retained
             * notifications were delivered at the first registration, not again. */
            if (s->state == SUB_ACTIVE) w_subscribe(&g.out, nd_next_req(), s->id, 0, s->policy, s->limit, s->text);
        }
    g.fd = fd;
    clock_gettime(CLOCK_MONOTONIC, &g.out_since);
    if (g.out.failed || nd_flush_locked() < 0) {
        nd_set_error("cannot write to %s: %s", path, g.out.failed ? "out of memory" : strerror(errno));
        close(fd);
        g.fd = -1;
        nd_reset_out();
        return NOTIFY_STATUS_SERVER_NOT_FOUND;
    }
    g.gen++;
    g.broken = 0;
    g.welcomed = 0;
    g.max_frame = FT_MIN_MAX_FRAME;
    g.backoff_ms = 0;
    g.goodbye_ms = 0; /* a GOODBYE delay is for the reconnection right after it */
    g.last_error[0] = 0;
    if (!g.reader_running) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The thread blocks every signal (set before creating it, so it inherits the mask): a
         * notify_register_signal signal must reach a thread that can run the program's handler. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (pthread_create(&g.reader, &attr, nd_reader_main, NULL) == 0) g.reader_running = 1;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    pthread_cond_broadcast(&g.cond);
    return NOTIFY_STATUS_OK;
}

uint32_t nd_ensure_connected(void) {
    if (g.fd >= 0 && g.broken) {
        /* A write failed or the daemon is hung: the reader, which sees the end of the connection, is about
         * to drop it. Wait for that (promptly: nothing is left to wait for), then open a new one. */
        struct timespec until;
        nd_deadline(&until, g.timeout_ms);
        while (g.fd >= 0 && g.broken && g.reader_running)
            if (nd_wait_until(&g.cond, &until) == ETIMEDOUT) break;
        if (g.fd >= 0) return NOTIFY_STATUS_SERVER_NOT_FOUND;
    }
    if (g.fd >= 0) return NOTIFY_STATUS_OK;
    return nd_connect_locked();
}

void nd_reset_out(void) {
    if (g.out.cap > 65536) wbuf_free(&g.out); /* after a burst, give the memory back */
    g.out.len = 0;
    g.out.failed = 0;
    g.out_pos = 0;
}

/* Writes what the socket takes of the outbound buffer, without blocking. Lock held. -1 (errno set) when the
 * connection failed: the caller lets the reader see it (shutdown) or, being the reader, drops it. */
int nd_flush_locked(void) {
    int progress = 0, err = 0;
    while (g.out_pos < g.out.len) {
        ssize_t w = send(g.fd, g.out.data + g.out_pos, g.out.len - g.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) { g.out_pos += (size_t)w; progress = 1; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        err = w < 0 ? errno : EPIPE;
        break;
    }
    if (progress) {
        clock_gettime(CLOCK_MONOTONIC, &g.out_since);
        if (g.room_head) pthread_cond_broadcast(&g.roomcond);
    }
    if (g.out_pos == g.out.len) {
        nd_reset_out();
    } else if (g.out_pos >= g.out.len / 2) { /* keep the pending bytes at the front: amortised O(1) */
        memmove(g.out.data, g.out.data + g.out_pos, g.out.len - g.out_pos);
        g.out.len -= g.out_pos;
        g.out_pos = 0;
    }
    if (err) { errno = err; return -1; }
    return 0;
}

static void room_remove(struct nd_room *me) {
    struct nd_room **pp = &g.room_head, *prev = NULL;
    while (*pp && *pp != me) { prev = *pp; pp = &(*pp)->next; }
    if (!*pp) return;
    *pp = me->next;
    if (g.room_tail == me) g.room_tail = prev;
    pthread_cond_broadcast(&g.roomcond); /* the next one may go */
}

/* Milliseconds until what is pending has waited the library's timeout without the daemon reading any of it. */
long nd_stall_left(void) {
    struct timespec end = g.out_since;
    end.tv_sec += g.timeout_ms / 1000;
    end.tv_nsec += (long)(g.timeout_ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) { end.tv_sec++; end.tv_nsec -= 1000000000L; }
    return nd_ms_left(&end);
}

/* Whether the daemon has read nothing of what is pending for the library's timeout: it is stopped or hung.
 * Sets the error that says so. */
int nd_stalled(void) {
    if (g.out_pos == g.out.len || nd_stall_left() > 0) return 0;
    nd_set_error("the daemon read nothing from this process for %d ms (stopped or hung): connection dropped",
                 g.timeout_ms);
    return 1;
}

/* The connection cannot go on (a write failed, or the daemon is hung): later sends fail at once, and the
 * reader, which sees the end of the connection, drops it. Keeps the error that says why. */
static void mark_broken(void) {
    g.broken = 1;
    shutdown(g.fd, SHUT_RDWR);
    pthread_cond_broadcast(&g.roomcond);
}

static int has_room(size_t n) {
    size_t pending = g.out.len - g.out_pos;
    return pending == 0 || pending + n <= OUT_LIMIT;
}

uint32_t nd_send(struct wbuf *b, const struct timespec *until) {
    if (b->failed) return NOTIFY_STATUS_FAILED;
    if (g.fd < 0 || g.broken) return NOTIFY_STATUS_SERVER_NOT_FOUND;
    if (until && (g.room_head || !has_room(b->len))) {
        /* The daemon reads more slowly than we write (or not at all): wait, first come first served. The
         * reader drops the connection once the daemon has read nothing for the library's timeout. */
        uint64_t gen = g.gen;
        struct nd_room me = {NULL};
        if (g.room_tail) g.room_tail->next = &me; else g.room_head = &me;
        g.room_tail = &me;
        while (g.room_head != &me || !has_room(b->len)) {
            int timed_out = nd_wait_until(&g.roomcond, until) == ETIMEDOUT;
            if (g.gen != gen || g.fd < 0 || g.broken) { room_remove(&me); return NOTIFY_STATUS_SERVER_NOT_FOUND; }
            if (timed_out && (g.room_head != &me || !has_room(b->len))) {
                room_remove(&me);
                /* The reader may not have noticed yet that the daemon is hung: tell it (it drops the
                 * connection when it sees the end). Otherwise only this call's deadline has passed. */
                if (nd_stalled()) mark_broken();
                else nd_set_error("the daemon did not take this process's requests in time (%zu bytes waiting)",
                                  g.out.len - g.out_pos);
                return NOTIFY_STATUS_SERVER_NOT_FOUND;
            }
        }
        room_remove(&me);
    }
    int was_empty = g.out_pos == g.out.len;
    size_t off = 0;
    if (was_empty) { /* the usual case: straight from the caller's buffer, no copy */
        for (;;) {
            ssize_t w = send(g.fd, b->data + off, b->len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) { off += (size_t)w; if (off == b->len) return NOTIFY_STATUS_OK; continue; }
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            goto failed;
        }
        clock_gettime(CLOCK_MONOTONIC, &g.out_since); /* from now on the daemon has to read */
    }
    w_append_raw(&g.out, b->data + off, b->len - off);
    if (g.out.failed) {
        /* Out of memory with a frame written in part: the stream cannot go on. */
        if (off) { errno = ENOMEM; goto failed; }
        g.out.failed = 0;
        return NOTIFY_STATUS_FAILED;
    }
    if (!was_empty && nd_flush_locked() < 0) goto failed;
    if (g.out_pos < g.out.len && !g.poll_out && g.wake_efd >= 0) {
        uint64_t one = 1; /* the reader writes the rest when the socket takes it */
        ssize_t r = write(g.wake_efd, &one, sizeof one);
        (void)r;
    }
    return NOTIFY_STATUS_OK;
failed:
    nd_set_error("cannot write to the daemon: %s", strerror(errno));
    mark_broken();
    return NOTIFY_STATUS_SERVER_NOT_FOUND;
}

void nd_remove_waiter(struct nd_waiter *w) {
    for (struct nd_waiter **pp = &g.waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) { *pp = w->next; return; }
}

uint32_t nd_request(struct nd_waiter *w, struct wbuf *b, const struct timespec *until) {
    struct timespec deflt;
    int library_timeout = !until;
    if (library_timeout) { nd_deadline(&deflt, g.timeout_ms); until = &deflt; }
    w->done = 0;
    w->timed_out = 0;
    w->next = g.waiters;
    g.waiters = w;
    uint32_t st = nd_send(b, until);
    if (st != NOTIFY_STATUS_OK && !w->done) {
        nd_remove_waiter(w);
        w->done = 1;
        w->status = st;
    }
    while (!w->done) {
        if (nd_wait_until(&g.cond, until) == ETIMEDOUT && !w->done) {
            nd_remove_waiter(w);
            w->done = 1;
            w->timed_out = 1;
            w->status = NOTIFY_STATUS_FAILED;
            if (library_timeout) nd_set_error("the daemon did not answer within %d ms", g.timeout_ms);
            else nd_set_error("the daemon did not answer in time");
        }
    }
    return w->status;
}

uint32_t nd_status_of_error(uint16_t code) {
    switch (code) {
    case 7: return NOTIFY_STATUS_INVALID_NAME;
    case 14: return NOTIFY_STATUS_NOT_AUTHORIZED;
    case 8: case 12: case 18: return NOTIFY_STATUS_INVALID_REQUEST;
    default: return NOTIFY_STATUS_FAILED; /* quotas, too many subscriptions, codes we do not know */
    }
}
