/* A minimal notifyd client in C, written from protocol/PROTOCOL.md (and the SUBSCRIBE layout of
 * Sources/NotifyWire/ClientFrame.swift, which extends the document): framing, handshake, SUBSCRIBE, POST,
 * PING, and a strict decoder for every daemon-to-client frame (length limits, types, field bounds, UTF-8,
 * trailing bytes). The C relay speaks the same subset, so one client drives both. */
#ifndef NOTIFYD_CLIENT_H
#define NOTIFYD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

enum {
    ND_HELLO = 0x01, ND_SUBSCRIBE = 0x02, ND_UNSUBSCRIBE = 0x03, ND_POST = 0x04, ND_PING = 0x05,
    ND_WELCOME = 0x81, ND_OK = 0x82, ND_POSTED = 0x83, ND_PONG = 0x84, ND_NOTIFICATION = 0x85,
    ND_OVERFLOW = 0x86, ND_STATE = 0x87, ND_GOODBYE = 0x88, ND_NOTIFICATION_MERGED = 0x89, ND_RETAINED = 0x8A,
    ND_QUERY_RESULT = 0x8B, ND_QUERY_RESULT_PART = 0x8C, ND_STATE_CHANGED = 0x8D, ND_ERROR = 0x8F,
};

#define ND_MIN_MAX_FRAME 66560u /* every daemon accepts this much before WELCOME (§ 2) */

struct nd_frame {
    uint8_t type;
    uint32_t request_id;
    /* NOTIFICATION / NOTIFICATION_MERGED / RETAINED; STATE_CHANGED: request_id, pid/uid/gid, name, count = value,
     * closing = flags (bit 0: current value) */
    uint64_t sequence;
    uint32_t pid, uid, gid;
    const char *name;
    uint16_t name_len;
    const uint8_t *payload;
    uint32_t payload_len;
    uint64_t count; /* merged_count (NOTIFICATION_MERGED), dropped_count (OVERFLOW), value (STATE) */
    uint32_t subscription_id; /* OVERFLOW */
    /* POSTED */
    uint32_t delivered;
    /* ERROR (message), GOODBYE (message = reason, count = reconnect_after_ms) */
    uint16_t code;
    uint8_t closing;
    const char *message;
    uint16_t message_len;
    /* WELCOME */
    uint32_t daemon_pid, max_payload, max_frame, max_subscriptions;
    uint16_t max_name;
};

typedef struct nd_client nd_client;

/* Connects to the Unix socket at `path` and sends HELLO. With `wait_welcome` ND_WAIT_WELCOME, returns only once
 * WELCOME arrived (NULL on failure, with a message in `err`); with ND_SEND_HELLO HELLO is written at once;
 * with ND_PIPELINE_HELLO it stays buffered and leaves with the first requests' nd_flush (the protocol lets a
 * client pipeline requests after HELLO; WELCOME then arrives ahead of their answers). */
enum { ND_SEND_HELLO = 0, ND_WAIT_WELCOME = 1, ND_PIPELINE_HELLO = 2 };
nd_client *nd_connect(const char *path, const char *client_name, int wait_welcome, char *err, size_t errlen);
/* Waits for WELCOME after nd_connect(..., 0, ...). 0 on success. */
int nd_wait_welcome(nd_client *c, char *err, size_t errlen);
int nd_fd(const nd_client *c);
void nd_close(nd_client *c);

/* Requests are appended to the connection's write buffer; nd_flush writes it all. */
void nd_subscribe(nd_client *c, uint32_t request_id, uint32_t subscription_id, const char *pattern, size_t len);
/* SUBSCRIBE with a delivery policy (§ 6.2): 0 coalesce (limit 0), 1 queue (limit >= 1), 2 disconnect (limit 0). */
void nd_subscribe_policy(nd_client *c, uint32_t request_id, uint32_t subscription_id, uint8_t policy,
                         uint32_t queue_limit, const char *pattern, size_t len);
void nd_unsubscribe(nd_client *c, uint32_t request_id, uint32_t subscription_id);
void nd_post(nd_client *c, uint32_t request_id, uint8_t flags, const char *name, size_t name_len,
             const void *payload, size_t payload_len);
void nd_ping(nd_client *c, uint32_t request_id);
size_t nd_pending_write(const nd_client *c);
int nd_flush(nd_client *c);

/* Reads what the socket has (non-blocking). >0 bytes read, 0 nothing available, -1 end of file or error. */
int nd_read(nd_client *c);
/* The next whole frame from what was read: 1 frame decoded (pointers valid until the next nd_read),
 * 0 more bytes needed, -1 protocol error (message in nd_error). */
int nd_next(nd_client *c, struct nd_frame *f);
const char *nd_error(const nd_client *c);
/* Blocks until a reply with `request_id` arrives (OK/PONG/POSTED/ERROR); notifications that arrive meanwhile
 * are passed to `on_note` (may be NULL). 1 = OK/PONG/POSTED, 0 = ERROR, -1 = connection failed. */
int nd_wait_reply(nd_client *c, uint32_t request_id, void (*on_note)(void *, const struct nd_frame *), void *arg);

int nd_utf8_valid(const uint8_t *s, size_t n);

/* A client with no socket whose input is `bytes` (for checking the decoder against protocol/vectors). The
 * handshake counts as done, with `max_frame` as the announced limit. */
nd_client *nd_from_bytes(const uint8_t *bytes, size_t n, uint32_t max_frame);
/* Bytes received but not yet decoded. */
size_t nd_buffered(const nd_client *c);

#endif
