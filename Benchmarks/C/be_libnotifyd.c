/* notifyd through libnotifyd (libnotifyd/: Darwin's notify(3) in C), as a C program written for it would use
 * it: one connection per process, callbacks on a queue whose eventfd the driver polls.
 *
 * Darwin's semantics: notifications that reach a token while its callback is still waiting are merged into
 * that callback. A callback is one delivery, its merged posts are reported as lost (as a NOTIFICATION_MERGED is
 * for the other notifyd clients). */
#ifdef HAVE_LIBNOTIFYD
#include "backend.h"

#include <notify.h>
#include <notifyd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn {
    notifyd_queue_t *queue;
    note_fn fn;
    void *arg;
    char name[512];
};

static conn *ln_open(const char *address, const char *client_name, char *err, size_t errlen) {
    (void)client_name;
    /* The library reads its socket from the environment, once, like any program using it. */
    setenv("NOTIFYD_SOCKET", address, 1);
    uint32_t status = notifyd_sync(20000);
    if (status != NOTIFY_STATUS_OK) {
        snprintf(err, errlen, "libnotifyd: %s", notifyd_status_string(status));
        return NULL;
    }
    conn *c = calloc(1, sizeof *c);
    c->queue = notifyd_queue_create();
    return c;
}

static void ln_callback(int token, const notifyd_notification_t *n, void *context) {
    (void)token;
    conn *c = context;
    if (!c->fn) return;
    c->fn(c->arg, n->name, strlen(n->name), n->payload, n->payload_length, n->merged);
}

static int ln_subscribe(conn *c, char **names, size_t n, int patterns, char *err, size_t errlen) {
    notifyd_register_options_t options = {
        .flags = patterns ? NOTIFYD_REG_PATTERN : 0, .policy = bench_policy_code, .queue_limit = bench_queue_limit};
    for (size_t i = 0; i < n; i++) {
        int token;
        uint32_t status = notifyd_register_callback(names[i], &token, c->queue, ln_callback, c, &options);
        if (status != NOTIFY_STATUS_OK) {
            snprintf(err, errlen, "register %s: %s", names[i], notifyd_status_string(status));
            return -1;
        }
    }
    uint32_t status = notifyd_sync(20000);
    if (status != NOTIFY_STATUS_OK) {
        snprintf(err, errlen, "sync: %s", notifyd_status_string(status));
        return -1;
    }
    return 0;
}

static int ln_make_poster(conn *c) { return 0; }

static int ln_post(conn *c, const char *name, size_t name_len, const void *payload, size_t payload_len) {
    if (name_len >= sizeof c->name) return -1;
    memcpy(c->name, name, name_len);
    c->name[name_len] = 0;
    return notifyd_post(c->name, payload, payload_len, 0, NULL) == NOTIFY_STATUS_OK ? 0 : -1;
}

/* The library writes each post as it is made. */
static int ln_flush(conn *c) { return 0; }

static int ln_fd(conn *c) { return notifyd_queue_fd(c->queue); }

static int ln_pump(conn *c, note_fn fn, void *arg, char *err, size_t errlen) {
    c->fn = fn;
    c->arg = arg;
    notifyd_queue_run(c->queue);
    return 0;
}

static void ln_close(conn *c) { free(c); }

const struct backend libnotifyd_backend = {
    .name = "libnotifyd",
    .open = ln_open,
    .subscribe = ln_subscribe,
    .make_poster = ln_make_poster,
    .post = ln_post,
    .flush = ln_flush,
    .fd = ln_fd,
    .pump = ln_pump,
    .close = ln_close,
    .has_patterns = 1,
};
#endif
