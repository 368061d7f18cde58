/* ext.c - the functions of <notifyd.h>: callbacks, payload posts, the barrier, introspection. */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

int eventfd_cloexec(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

uint32_t notifyd_register_callback(const char *name, int *out_token, notifyd_queue_t *queue,
                                   notifyd_callback_t callback, void *context,
                                   const notifyd_register_options_t *options) {
    if (!name) return NOTIFY_STATUS_INVALID_NAME;
    if (!out_token) return NOTIFY_STATUS_INVALID_TOKEN;
    if (!callback) return NOTIFY_STATUS_NULL_INPUT;
    LOCK();
    struct nd_token *t = nd_token_new(TK_CALLBACK);
    if (!t) { UNLOCK(); return NOTIFY_STATUS_FAILED; }
    t->cb = callback;
    t->ctx = context;
    t->queue = queue ? queue : &g.defq;
    t->queue->users++;
    if (!queue) nd_start_callback_thread();
    uint32_t st = nd_register(t, name, options, out_token);
    UNLOCK();
    return st;
}

/* For dispatch.c: a callback token whose context is released with `destroy` when the token is freed. */
uint32_t nd_register_callback_destroy(const char *name, int *out_token, notifyd_callback_t cb, void *ctx,
                                      void (*destroy)(void *)) {
    LOCK();
    struct nd_token *t = nd_token_new(TK_CALLBACK);
    if (!t) { UNLOCK(); destroy(ctx); return NOTIFY_STATUS_FAILED; }
    t->cb = cb;
    t->ctx = ctx;
    t->destroy = destroy;
    t->queue = &g.defq;
    g.defq.users++;
    nd_start_callback_thread();
    uint32_t st = nd_register(t, name, NULL, out_token);
    UNLOCK();
    return st;
}

/* Refuses locally what the daemon would refuse: bad names, and another uid's "user.UID." names. */
static uint32_t check_post_name(const char *name) {
    if (!name_valid(name, g.max_name ? g.max_name : 255, 0)) return NOTIFY_STATUS_INVALID_NAME;
    if (strncmp(name, "user.", 5) == 0 && getuid() != 0) {
        const char *p = name + 5;
        char *end;
        if (*p >= '1' && *p <= '9') {
            unsigned long long uid = strtoull(p, &end, 10);
            if (*end == '.' && uid <= 0xFFFFFFFFull && uid != getuid()) return NOTIFY_STATUS_NOT_AUTHORIZED;
        } else if (p[0] == '0' && p[1] == '.') {
            return NOTIFY_STATUS_NOT_AUTHORIZED; /* user.0.… is root's */
        }
    }
    return NOTIFY_STATUS_OK;
}

uint32_t notifyd_post(const char *name, const void *payload, size_t length, uint32_t flags, uint32_t *delivered) {
    if (!name) return NOTIFY_STATUS_INVALID_NAME;
    if (length && !payload) return NOTIFY_STATUS_NULL_INPUT;
    if (flags & ~(uint32_t)(NOTIFYD_POST_ACK | NOTIFYD_POST_RETAIN)) return NOTIFY_STATUS_INVALID_REQUEST;
    LOCK();
    uint32_t st = check_post_name(name);
    if (st == NOTIFY_STATUS_OK && name_is_self(name)) {
        /* Process-local: delivered here, never sent to the daemon. */
        struct frame f = {.type = FT_NOTIFICATION, .payload = payload, .payload_len = (uint32_t)length,
                          .pid = (uint32_t)getpid(), .uid = getuid(), .gid = getgid()};
        nd_route(name, strlen(name), &f, 0, NULL);
        if (delivered) *delivered = 1;
    } else if (st == NOTIFY_STATUS_OK && length > 65536 && length + strlen(name) + 64 > g.max_frame) {
        st = NOTIFY_STATUS_INVALID_REQUEST;
    } else if (st == NOTIFY_STATUS_OK && (st = nd_ensure_connected()) == NOTIFY_STATUS_OK) {
        struct wbuf b = {0};
        struct nd_waiter w = {.id = nd_next_req()};
        w_post(&b, w.id, (uint8_t)flags, name, payload, length);
        if (flags & NOTIFYD_POST_ACK) {
            st = nd_request(&w, &b, NULL);
            if (st == NOTIFY_STATUS_OK && delivered) *delivered = w.delivered;
        } else {
            /* Written to the socket, or queued behind what it has not taken yet; waits only while the
             * library's buffer is full (the daemon reads more slowly than this process posts). */
            struct timespec until;
            nd_deadline(&until, g.timeout_ms);
            st = nd_send(&b, &until);
        }
        wbuf_free(&b);
    }
    UNLOCK();
    return st;
}

uint32_t notifyd_sync(int timeout_ms) {
    if (timeout_ms < 0) timeout_ms = 0;
    struct timespec until;
    nd_deadline(&until, timeout_ms);
    LOCK();
    uint32_t st;
    int timed_out = 0;
    for (;;) {
        st = nd_ensure_connected();
        /* After WELCOME the reader has queued what a restarted daemon needs back (state values) ahead
         * of anything we send now, so the PONG also means "restored". */
        while (st == NOTIFY_STATUS_OK && !g.welcomed && g.fd >= 0)
            if (nd_wait_until(&g.cond, &until) == ETIMEDOUT) { timed_out = !g.welcomed; break; }
        if (st == NOTIFY_STATUS_OK && !g.welcomed) st = NOTIFY_STATUS_SERVER_NOT_FOUND;
        if (st == NOTIFY_STATUS_OK) {
            struct nd_waiter w = {.id = nd_next_req()};
            struct wbuf b = {0};
            w_simple(&b, FT_PING, w.id);
            st = nd_request(&w, &b, &until);
            wbuf_free(&b);
            if (st == NOTIFY_STATUS_OK) break;
            timed_out = w.timed_out;
        }
        if (timed_out || nd_ms_left(&until) <= 0) break;
        /* Not connected (no daemon yet, or the connection just ended): try again shortly. */
        struct timespec retry;
        nd_deadline(&retry, 20);
        if (nd_ms_left(&retry) > nd_ms_left(&until)) retry = until;
        nd_wait_until(&g.cond, &retry);
    }
    if (timed_out) nd_set_error("the daemon did not answer within %d ms", timeout_ms);
    UNLOCK();
    /* Whatever kept the barrier from completing in time (no daemon, no answer, no room to write the PING):
     * the daemon was not reached. */
    return st == NOTIFY_STATUS_OK ? st : NOTIFY_STATUS_SERVER_NOT_FOUND;
}

int notifyd_connection_fd(void) {
    LOCK();
    if (g.conn_efd < 0) g.conn_efd = eventfd_cloexec();
    int fd = g.conn_efd;
    UNLOCK();
    return fd;
}

uint32_t notifyd_query(int kind, const char *argument, char **json) {
    if (!json) return NOTIFY_STATUS_NULL_INPUT;
    if (kind < 1 || kind > 3) return NOTIFY_STATUS_INVALID_REQUEST;
    LOCK();
    uint32_t st = nd_ensure_connected();
    if (st == NOTIFY_STATUS_OK) {
        struct nd_waiter w = {.id = nd_next_req()};
        struct wbuf b = {0};
        /* Names and clients answers may span frames: ask for parts (6.10). */
        w_query(&b, w.id, (uint8_t)(kind == 1 ? 1 : kind | 0x80), argument ? argument : "");
        st = nd_request(&w, &b, NULL);
        wbuf_free(&b);
        if (st == NOTIFY_STATUS_OK) *json = (char *)w.json.data;
        else wbuf_free(&w.json);
    }
    UNLOCK();
    return st;
}

const char *notifyd_last_error(void) {
    static __thread char copy[256];
    LOCK();
    memcpy(copy, g.last_error, sizeof copy);
    UNLOCK();
    return copy;
}

const char *notifyd_status_string(uint32_t status) {
    switch (status) {
    case NOTIFY_STATUS_OK: return "OK";
    case NOTIFY_STATUS_INVALID_NAME: return "invalid name";
    case NOTIFY_STATUS_INVALID_TOKEN: return "invalid token";
    case NOTIFY_STATUS_INVALID_PORT: return "invalid port (no Mach ports on Linux)";
    case NOTIFY_STATUS_INVALID_FILE: return "invalid file descriptor";
    case NOTIFY_STATUS_INVALID_SIGNAL: return "invalid signal";
    case NOTIFY_STATUS_INVALID_REQUEST: return "invalid request";
    case NOTIFY_STATUS_NOT_AUTHORIZED: return "not authorized";
    case NOTIFY_STATUS_OPT_DISABLE: return "disabled";
    case NOTIFY_STATUS_SERVER_NOT_FOUND: return "notifyd not found";
    case NOTIFY_STATUS_NULL_INPUT: return "null input";
    case NOTIFY_STATUS_FAILED: return "failed";
    default: return "unknown status";
    }
}
