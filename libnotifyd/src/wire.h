/* wire.h - notifyd protocol v1 frames (protocol/PROTOCOL.md 2-7): encoding requests into a growable buffer
 * and decoding daemon frames with every check the document asks of a client. */
#ifndef ND_WIRE_H
#define ND_WIRE_H
#include <stddef.h>
#include <stdint.h>

enum {
    FT_HELLO = 0x01, FT_SUBSCRIBE = 0x02, FT_UNSUBSCRIBE = 0x03, FT_POST = 0x04, FT_PING = 0x05,
    FT_SET_STATE = 0x06, FT_GET_STATE = 0x07, FT_SUSPEND = 0x08, FT_RESUME = 0x09, FT_QUERY = 0x0A,
    FT_WELCOME = 0x81, FT_OK = 0x82, FT_POSTED = 0x83, FT_PONG = 0x84, FT_NOTIFICATION = 0x85,
    FT_OVERFLOW = 0x86, FT_STATE = 0x87, FT_GOODBYE = 0x88, FT_MERGED = 0x89, FT_RETAINED = 0x8A,
    FT_QUERY_RESULT = 0x8B, FT_QUERY_PART = 0x8C, FT_STATE_CHANGED = 0x8D, FT_ERROR = 0x8F,
};
#define FT_MIN_MAX_FRAME 66560u /* every daemon accepts and sends frames this long before WELCOME (2) */

/* An output buffer; on allocation failure `failed` is set and later appends do nothing. */
struct wbuf { uint8_t *data; size_t len, cap; int failed; };
void wbuf_free(struct wbuf *b);
void w_hello(struct wbuf *b, const char *client_name);
void w_subscribe(struct wbuf *b, uint32_t req, uint32_t sub_id, uint8_t flags, uint8_t policy, uint32_t limit,
                 const char *pattern);
void w_unsubscribe(struct wbuf *b, uint32_t req, uint32_t sub_id);
void w_post(struct wbuf *b, uint32_t req, uint8_t flags, const char *name, const void *payload, size_t len);
void w_simple(struct wbuf *b, uint8_t type, uint32_t req); /* PING, SUSPEND, RESUME */
void w_set_state(struct wbuf *b, uint32_t req, uint64_t value, const char *name);
void w_get_state(struct wbuf *b, uint32_t req, const char *name);
void w_query(struct wbuf *b, uint32_t req, uint8_t kind, const char *argument);

/* A decoded daemon frame; pointers point into the receive buffer. */
struct frame {
    uint8_t type;
    uint32_t req;
    uint64_t seq, count; /* count: merged_count, dropped_count, STATE and STATE_CHANGED value, GOODBYE reconnect_after_ms */
    uint32_t pid, uid, gid, sub_id, delivered;
    const char *name; uint16_t name_len;
    const uint8_t *payload; uint32_t payload_len;
    uint16_t code; uint8_t flags; /* ERROR code and closing flag; STATE has_value flag; STATE_CHANGED current flag */
    const uint8_t *instance; /* WELCOME: 16 bytes */
    uint32_t daemon_pid, max_payload, max_frame, max_subs; uint16_t max_name;
};

/* Decodes one frame body (type byte and fields, `len` bytes). 0 on success, -1 if malformed. */
int w_decode(const uint8_t *body, uint32_t len, struct frame *f);
uint32_t w_get32(const uint8_t *p);

/* UTF-8 validity as PROTOCOL.md 3 defines it. */
int w_utf8_valid(const uint8_t *s, size_t n);

/* Framing (2): 1 when `buf` starts with a whole frame of body length *flen, 0 when more bytes are needed
 * (*flen set once the prefix is known), -1 for a length of 0 or above max_frame. */
int w_split(const uint8_t *buf, size_t len, uint32_t max_frame, uint32_t *flen);
void w_append_raw(struct wbuf *b, const uint8_t *p, size_t n);
#endif
