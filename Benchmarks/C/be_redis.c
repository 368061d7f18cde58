/* Redis pub/sub over a Unix socket through hiredis: SUBSCRIBE/PSUBSCRIBE, PUBLISH with replies turned off
 * (CLIENT REPLY OFF) so that a poster, like a notifyd poster, sends without waiting for or reading replies. */
#ifdef HAVE_HIREDIS
#include "backend.h"

#include <hiredis.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn {
    redisContext *r;
};

static conn *rd_open(const char *address, const char *client_name, char *err, size_t errlen) {
    (void)client_name;
    redisContext *r = redisConnectUnix(address);
    if (!r || r->err) {
        snprintf(err, errlen, "redis connect %s: %s", address, r ? r->errstr : "out of memory");
        if (r) redisFree(r);
        return NULL;
    }
    redisReply *reply = redisCommand(r, "PING"); /* the server has accepted the client once it answers */
    if (!reply) { snprintf(err, errlen, "redis PING: %s", r->errstr); redisFree(r); return NULL; }
    freeReplyObject(reply);
    conn *k = calloc(1, sizeof *k);
    k->r = r;
    return k;
}

static int rd_subscribe(conn *k, char **names, size_t n, int patterns, char *err, size_t errlen) {
    const char *cmd = patterns ? "PSUBSCRIBE" : "SUBSCRIBE";
    size_t batch = 1000;
    const char **argv = malloc((batch + 1) * sizeof *argv);
    size_t *lens = malloc((batch + 1) * sizeof *lens);
    for (size_t i = 0; i < n; i += batch) {
        size_t m = n - i < batch ? n - i : batch;
        argv[0] = cmd;
        lens[0] = strlen(cmd);
        for (size_t j = 0; j < m; j++) { argv[j + 1] = names[i + j]; lens[j + 1] = strlen(names[i + j]); }
        redisAppendCommandArgv(k->r, (int)m + 1, argv, lens);
    }
    free(argv);
    free(lens);
    for (size_t i = 0; i < n; i++) { /* one confirmation per channel */
        redisReply *reply;
        if (redisGetReply(k->r, (void **)&reply) != REDIS_OK) { snprintf(err, errlen, "redis subscribe: %s", k->r->errstr); return -1; }
        int ok = reply->type == REDIS_REPLY_ARRAY && reply->elements == 3;
        freeReplyObject(reply);
        if (!ok) { snprintf(err, errlen, "redis subscribe: unexpected reply"); return -1; }
    }
    return 0;
}

static int rd_make_poster(conn *k) {
    redisAppendCommand(k->r, "CLIENT REPLY OFF");
    return 0;
}

static int rd_post(conn *k, const char *name, size_t name_len, const void *payload, size_t payload_len) {
    return redisAppendCommand(k->r, "PUBLISH %b %b", name, name_len, payload, payload_len) == REDIS_OK ? 0 : -1;
}

static int rd_flush(conn *k) {
    int done = 0;
    while (!done)
        if (redisBufferWrite(k->r, &done) != REDIS_OK) return -1;
    return 0;
}

static int rd_fd(conn *k) { return k->r->fd; }

static int rd_pump(conn *k, note_fn fn, void *arg, char *err, size_t errlen) {
    for (;;) {
        struct pollfd p = {k->r->fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0) return 0;
        if (redisBufferRead(k->r) != REDIS_OK) { snprintf(err, errlen, "redis read: %s", k->r->errstr); return -1; }
        void *out;
        for (;;) {
            if (redisGetReplyFromReader(k->r, &out) != REDIS_OK) { snprintf(err, errlen, "redis protocol error"); return -1; }
            if (!out) break;
            redisReply *reply = out;
            if (reply->type == REDIS_REPLY_ARRAY && reply->elements >= 3) {
                redisReply *channel = reply->element[reply->elements - 2];
                redisReply *message = reply->element[reply->elements - 1];
                fn(arg, channel->str, channel->len, (const uint8_t *)message->str, message->len, 0);
            }
            freeReplyObject(reply);
        }
    }
}

static void rd_close(conn *k) {
    if (!k) return;
    redisFree(k->r);
    free(k);
}

const struct backend redis_backend = {
    .name = "redis", .open = rd_open, .subscribe = rd_subscribe, .make_poster = rd_make_poster, .post = rd_post,
    .flush = rd_flush, .fd = rd_fd, .pump = rd_pump, .close = rd_close, .has_patterns = 1,
};
#endif
