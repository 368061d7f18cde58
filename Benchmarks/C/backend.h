/* One interface over every system under test, so that each scenario runs the same code against notifyd (and
 * the C relay, which speaks the same protocol subset), Redis pub/sub and D-Bus signals. */
#ifndef NOTIFYD_BENCH_BACKEND_H
#define NOTIFYD_BENCH_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct conn conn;

/* A notification as a subscriber sees it. `lost` > 0: the system reported that many notifications merged or
 * dropped before this one (or, with name == NULL, dropped on the connection). */
typedef void (*note_fn)(void *arg, const char *name, size_t name_len, const uint8_t *payload, size_t payload_len,
                        uint64_t lost);

struct backend {
    const char *name;
    /* Connects and returns once the system has accepted the session. */
    conn *(*open)(const char *address, const char *client_name, char *err, size_t errlen);
    /* Subscribes to `n` names (or patterns when `patterns`), pipelined; returns 0 once all are active. */
    int (*subscribe)(conn *c, char **names, size_t n, int patterns, char *err, size_t errlen);
    /* Makes this connection a poster (e.g. turns replies off where the system has them). */
    int (*make_poster)(conn *c);
    /* Appends a post (fire and forget); flush sends what was appended. */
    int (*post)(conn *c, const char *name, size_t name_len, const void *payload, size_t payload_len);
    int (*flush)(conn *c);
    int (*fd)(conn *c);
    /* Reads what is available without blocking and calls `fn` for each notification; -1 when the connection
     * failed (message in `err`). */
    int (*pump)(conn *c, note_fn fn, void *arg, char *err, size_t errlen);
    void (*close)(conn *c);
    /* Whether the system has wildcard subscriptions. */
    int has_patterns;
};

extern const struct backend notifyd_backend;
#ifdef HAVE_HIREDIS
extern const struct backend redis_backend;
#endif
#ifdef HAVE_SDBUS
extern const struct backend dbus_backend;
#endif
#ifdef HAVE_LIBNOTIFYD
extern const struct backend libnotifyd_backend;
#endif

/* The delivery policy every SUBSCRIBE asks for, on systems that have one (notifyd: PROTOCOL.md § 6.2, § 9.4;
 * code 0 coalesce, 1 queue with `bench_queue_limit`, 2 disconnect). The relay parses and ignores it; Redis and
 * D-Bus have no such field. Default: coalesce. */
extern uint8_t bench_policy_code;
extern uint32_t bench_queue_limit;
/* Set by the churn role: notifyd's open leaves HELLO buffered, so HELLO and the SUBSCRIBE that follows go out
 * in one write and cost one round trip, as Redis's SUBSCRIBE does (other backends ignore it). */
extern int bench_pipeline_hello;

/* Non-matching pattern number i for a system (glob syntax differs). */
void pattern_text(const struct backend *b, size_t i, char *out, size_t cap);

#endif
