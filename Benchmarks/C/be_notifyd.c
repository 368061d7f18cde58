/* notifyd (and the C relay) through the C client of notifyd_client.c. */
#include "backend.h"
#include "notifyd_client.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn {
    nd_client *c;
    uint32_t next_request;
    uint32_t next_subscription;
};

static conn *nd_open(const char *address, const char *client_name, char *err, size_t errlen) {
    nd_client *c = nd_connect(address, client_name, bench_pipeline_hello ? ND_PIPELINE_HELLO : ND_WAIT_WELCOME, err,
                              errlen);
    if (!c) return NULL;
    conn *k = calloc(1, sizeof *k);
    k->c = c;
    k->next_request = 1;
    k->next_subscription = 1;
    return k;
}

static int nd_subscribe_all(conn *k, char **names, size_t n, int patterns, char *err, size_t errlen) {
    (void)patterns; /* the pattern syntax is part of the name grammar */
    size_t answered = 0, failed = 0;
    uint32_t first = k->next_request;
    struct nd_frame f;
    for (size_t i = 0; i < n; i++) {
        nd_subscribe_policy(k->c, k->next_request++, k->next_subscription++, bench_policy_code, bench_queue_limit,
                            names[i], strlen(names[i]));
        if (nd_pending_write(k->c) > 65536 && nd_flush(k->c) < 0) goto fail;
    }
    if (nd_flush(k->c) < 0) goto fail;
    while (answered < n) {
        int r;
        while ((r = nd_next(k->c, &f)) == 1) {
            if ((f.type == ND_OK || f.type == ND_ERROR) && f.request_id >= first && f.request_id < k->next_request) {
                answered++;
                if (f.type == ND_ERROR) {
                    if (failed++ == 0) snprintf(err, errlen, "subscribe rejected: %.*s", f.message_len, f.message);
                }
            } else if (f.type == ND_ERROR && f.closing) {
                snprintf(err, errlen, "daemon closed the connection: %.*s", f.message_len, f.message);
                return -1;
            }
        }
        if (r < 0) goto fail;
        if (answered >= n) break;
        int got = nd_read(k->c);
        if (got < 0) goto fail;
        if (got == 0) {
            struct pollfd p = {nd_fd(k->c), POLLIN, 0}; /* nothing buffered: wait for the socket */
            poll(&p, 1, 1000);
        }
    }
    return failed ? -1 : 0;
fail:
    snprintf(err, errlen, "%s", nd_error(k->c));
    return -1;
}

static int nd_make_poster(conn *k) { (void)k; return 0; }

static int nd_post_one(conn *k, const char *name, size_t name_len, const void *payload, size_t payload_len) {
    nd_post(k->c, k->next_request++, 0, name, name_len, payload, payload_len);
    return 0;
}

static int nd_flush_conn(conn *k) { return nd_flush(k->c); }
static int nd_fd_conn(conn *k) { return nd_fd(k->c); }

static int nd_pump(conn *k, note_fn fn, void *arg, char *err, size_t errlen) {
    struct nd_frame f;
    for (;;) {
        int r = nd_read(k->c);
        if (r < 0) { snprintf(err, errlen, "%s", nd_error(k->c)); return -1; }
        int n;
        while ((n = nd_next(k->c, &f)) == 1) {
            switch (f.type) {
            case ND_NOTIFICATION: fn(arg, f.name, f.name_len, f.payload, f.payload_len, 0); break;
            case ND_NOTIFICATION_MERGED: fn(arg, f.name, f.name_len, f.payload, f.payload_len, f.count); break;
            case ND_OVERFLOW: fn(arg, NULL, 0, NULL, 0, f.count); break;
            case ND_GOODBYE: snprintf(err, errlen, "daemon is shutting down: %.*s", f.message_len, f.message); return -1;
            case ND_ERROR:
                if (f.closing) { snprintf(err, errlen, "daemon closed the connection: %.*s", f.message_len, f.message); return -1; }
                break;
            default: break;
            }
        }
        if (n < 0) { snprintf(err, errlen, "%s", nd_error(k->c)); return -1; }
        if (r == 0) return 0;
    }
}

static void nd_close_conn(conn *k) {
    if (!k) return;
    nd_close(k->c);
    free(k);
}

const struct backend notifyd_backend = {
    .name = "notifyd", .open = nd_open, .subscribe = nd_subscribe_all, .make_poster = nd_make_poster,
    .post = nd_post_one, .flush = nd_flush_conn, .fd = nd_fd_conn, .pump = nd_pump, .close = nd_close_conn,
    .has_patterns = 1,
};
