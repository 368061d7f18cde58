/* conn.c - the one connection of this process to notifyd: socket path (PROTOCOL.md 1), the daemon-user
 * check, the handshake with re-registration, writing frames, and requests waiting for their replies. The
 * reading side is reader.c. */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
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

#define REPLY_TIMEOUT_S 30 /* a daemon that accepted us but never answers: give up rather than hang */

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

static int send_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w; n -= (size_t)w;
    }
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
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) { nd_set_error("socket: %s", strerror(errno)); return NOTIFY_STATUS_SERVER_NOT_FOUND; }
    int r;
    do r = connect(fd, (struct sockaddr *)&addr, sizeof addr); while (r < 0 && errno == EINTR);
    if (r < 0) {
        nd_set_error("cannot connect to %s: %s", path, strerror(errno));
        close(fd);
        return NOTIFY_STATUS_SERVER_NOT_FOUND;
    }
    if (!daemon_trusted(fd, path)) { close(fd); return NOTIFY_STATUS_SERVER_NOT_FOUND; }

    struct wbuf b = {0};
    const char *prog = program_invocation_short_name;
    w_hello(&b, prog && *prog ? prog : "libnotifyd");
    for (size_t i = 0; i < g.subs.cap; i++)
        for (struct hnode *n = g.subs.slots[i]; n; n = n->next) {
            struct nd_sub *s = container_of(n, struct nd_sub, node);
            /* Pending ones were failed with the old connection; their threads retry or give up. Retained
             * notifications were delivered at the first registration, not again. */
            if (s->state == SUB_ACTIVE) w_subscribe(&b, nd_next_req(), s->id, 0, s->policy, s->limit, s->text);
        }
    pthread_mutex_lock(&g.wlock);
    r = b.failed ? -1 : send_all(fd, b.data, b.len);
    pthread_mutex_unlock(&g.wlock);
    wbuf_free(&b);
    if (r < 0) { nd_set_error("cannot write to %s: %s", path, strerror(errno)); close(fd); return NOTIFY_STATUS_SERVER_NOT_FOUND; }
    g.fd = fd;
    g.gen++;
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
    if (g.fd >= 0) return NOTIFY_STATUS_OK;
    return nd_connect_locked();
}

uint32_t nd_send(struct wbuf *b) {
    if (b->failed) return NOTIFY_STATUS_FAILED;
    if (g.fd < 0) return NOTIFY_STATUS_SERVER_NOT_FOUND;
    int fd = g.fd;
    pthread_mutex_lock(&g.wlock);
    UNLOCK();
    int r = send_all(fd, b->data, b->len);
    if (r < 0) shutdown(fd, SHUT_RDWR); /* the reader sees end of file and reconnects */
    pthread_mutex_unlock(&g.wlock);
    pthread_mutex_lock(&g.lock);
    return r < 0 ? NOTIFY_STATUS_SERVER_NOT_FOUND : NOTIFY_STATUS_OK;
}

void nd_remove_waiter(struct nd_waiter *w) {
    for (struct nd_waiter **pp = &g.waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) { *pp = w->next; return; }
}

uint32_t nd_request(struct nd_waiter *w, struct wbuf *b) {
    w->done = 0;
    w->next = g.waiters;
    g.waiters = w;
    uint32_t st = nd_send(b);
    if (st != NOTIFY_STATUS_OK && !w->done) {
        nd_remove_waiter(w);
        w->done = 1;
        w->status = st;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += REPLY_TIMEOUT_S;
    while (!w->done) {
        if (pthread_cond_timedwait(&g.cond, &g.lock, &until) == ETIMEDOUT && !w->done) {
            nd_remove_waiter(w);
            w->done = 1;
            w->status = NOTIFY_STATUS_FAILED;
            nd_set_error("the daemon did not answer within %d s", REPLY_TIMEOUT_S);
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
