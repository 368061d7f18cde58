/* reader.c - the reader thread: reads the connection, decodes frames, completes waiting requests, routes
 * notifications, writes what the socket did not take at once (and drops the connection of a daemon that
 * reads nothing for the library's timeout), and after a disconnection reconnects with back-off for as long
 * as this process has registrations or state values to restore. */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Forgets the connection: what was not written is discarded, every waiting request fails, its
 * subscriptions are marked failed, calls waiting for room in the outbound buffer give up. Lock held; only
 * the reader thread calls this, so only it closes the descriptor it polls. */
static void drop_connection(void) {
    if (g.fd < 0) return;
    close(g.fd);
    g.fd = -1;
    g.broken = 0;
    nd_reset_out();
    pthread_cond_broadcast(&g.roomcond);
    for (struct nd_waiter *w = g.waiters; w; w = w->next) {
        w->done = 1;
        w->status = NOTIFY_STATUS_SERVER_NOT_FOUND;
        if (w->sub && w->sub->state == SUB_PENDING) {
            w->sub->state = SUB_FAILED;
            w->sub->status = NOTIFY_STATUS_SERVER_NOT_FOUND;
            if (w->sub->in_map) { htab_remove(&g.subs, &w->sub->node); w->sub->in_map = 0; }
        }
    }
    g.waiters = NULL;
    pthread_cond_broadcast(&g.cond);
}

static struct nd_waiter *find_waiter(uint32_t id) {
    for (struct nd_waiter *w = g.waiters; w; w = w->next) if (w->id == id) return w;
    return NULL;
}

static void complete(struct nd_waiter *w, uint32_t status) {
    nd_remove_waiter(w);
    w->done = 1;
    w->status = status;
    if (w->sub && w->sub->state == SUB_PENDING) {
        w->sub->state = status == NOTIFY_STATUS_OK ? SUB_ACTIVE : SUB_FAILED;
        w->sub->status = status;
        if (status != NOTIFY_STATUS_OK && w->sub->in_map) { htab_remove(&g.subs, &w->sub->node); w->sub->in_map = 0; }
    }
    pthread_cond_broadcast(&g.cond);
}

/* Handles one daemon frame. Lock held. Returns -1 when the connection must end. `restore` collects
 * SET_STATE frames to send after a daemon restart. */
static int handle_frame(const struct frame *f, struct wbuf *restore) {
    struct nd_waiter *w = f->req ? find_waiter(f->req) : NULL;
    switch (f->type) {
    case FT_WELCOME:
        if (g.welcomed) return -1;
        g.welcomed = 1;
        pthread_cond_broadcast(&g.cond);
        g.max_frame = f->max_frame > FT_MIN_MAX_FRAME ? f->max_frame : FT_MIN_MAX_FRAME;
        g.max_name = f->max_name && f->max_name < 255 ? f->max_name : 255;
        if (g.have_instance && memcmp(g.instance, f->instance, 16) != 0) {
            /* A restarted daemon has no state values: put back the ones this process set. */
            for (size_t i = 0; i < g.states.cap; i++)
                for (struct hnode *n = g.states.slots[i]; n; n = n->next) {
                    struct nd_state *s = container_of(n, struct nd_state, node);
                    w_set_state(restore, nd_next_req(), s->value, s->name);
                }
        }
        memcpy(g.instance, f->instance, 16);
        g.have_instance = 1;
        return 0;
    case FT_OK: case FT_PONG:
        if (w) complete(w, NOTIFY_STATUS_OK);
        return 0;
    case FT_POSTED:
        if (w) { w->delivered = f->delivered; complete(w, NOTIFY_STATUS_OK); }
        return 0;
    case FT_STATE:
        if (w) { w->value = (f->flags & 1) ? f->count : 0; complete(w, NOTIFY_STATUS_OK); }
        return 0;
    case FT_QUERY_PART: case FT_QUERY_RESULT:
        if (w) {
            /* Parts are JSON arrays: splice their elements into one array. */
            const uint8_t *p = f->payload;
            size_t n = f->payload_len;
            int array = n >= 2 && p[0] == '[' && p[n - 1] == ']';
            if (f->type == FT_QUERY_RESULT && !w->parts) {
                w_append_raw(&w->json, p, n);
            } else if (array) {
                if (!w->parts) w_append_raw(&w->json, (const uint8_t *)"[", 1);
                if (n > 2) {
                    if (w->json.len > 1) w_append_raw(&w->json, (const uint8_t *)",", 1);
                    w_append_raw(&w->json, p + 1, n - 2);
                }
                w->parts++;
                if (f->type == FT_QUERY_RESULT) w_append_raw(&w->json, (const uint8_t *)"]", 1);
            }
            if (f->type == FT_QUERY_RESULT) complete(w, w->json.failed ? NOTIFY_STATUS_FAILED : NOTIFY_STATUS_OK);
        }
        return 0;
    case FT_ERROR:
        if (f->flags & 1) {
            nd_set_error("the daemon closed the connection: %.*s", (int)f->name_len, f->name);
            return -1;
        }
        if (w) complete(w, nd_status_of_error(f->code));
        return 0;
    case FT_GOODBYE:
        g.goodbye_ms = (uint32_t)f->count;
        return 0; /* end of file follows */
    case FT_NOTIFICATION: case FT_MERGED:
        nd_route(f->name, f->name_len, f, 0, NULL);
        return 0;
    case FT_RETAINED:
        if (w && w->token) nd_route(f->name, f->name_len, f, 1, w->token);
        return 0;
    case FT_STATE_CHANGED:
        /* Only a SUBSCRIBE with the states flag brings it, and libnotifyd sends none: nothing to route. */
        return 0;
    case FT_OVERFLOW:
        /* Notifications of one subscription (or, for id 0, of any) were dropped. notify(3) can only say
         * "something was posted": the check counters of the tokens concerned move, so notify_check reports
         * true (a false positive is allowed; a silent loss would not be). Nothing else is delivered. */
        for (size_t i = 0; i < g.tokens.cap; i++)
            for (struct hnode *n = g.tokens.slots[i]; n; n = n->next) {
                struct nd_token *t = container_of(n, struct nd_token, node);
                if (f->sub_id == 0 || (t->sub && t->sub->id == f->sub_id))
                    atomic_fetch_add_explicit(&t->posted, 1, memory_order_relaxed);
            }
        if (g.conn_efd >= 0) {
            uint64_t one = 1;
            ssize_t r = write(g.conn_efd, &one, sizeof one);
            (void)r;
        }
        return 0;
    default:
        return -1;
    }
}

static void sleep_locked(uint32_t ms) {
    struct timespec until;
    nd_deadline(&until, ms);
    nd_wait_until(&g.cond, &until);
}

/* Reads what the socket holds and handles every whole frame. Lock held. -1 when the connection was
 * dropped. */
static int read_frames(int fd, size_t *lenp) {
    ssize_t r;
    do r = recv(fd, g.rbuf + *lenp, g.rcap - *lenp, MSG_DONTWAIT); while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (r <= 0) {
        if (!g.last_error[0]) nd_set_error("the daemon closed the connection");
        drop_connection();
        return -1;
    }
    size_t len = *lenp + (size_t)r;
    struct wbuf restore = {0};
    size_t pos = 0;
    int bad = 0;
    for (;;) {
        uint32_t flen = 0;
        int whole = w_split(g.rbuf + pos, len - pos, g.max_frame, &flen);
        if (whole < 0) { nd_set_error("protocol error: frame length %u", w_get32(g.rbuf + pos)); bad = 1; break; }
        if (!whole) {
            if (flen && g.rcap < (size_t)flen + 4) {
                size_t nc = g.rcap;
                while (nc < (size_t)flen + 4 + 16384) nc *= 2;
                uint8_t *nb = realloc(g.rbuf, nc);
                if (!nb) abort();
                g.rbuf = nb; g.rcap = nc;
            }
            break;
        }
        struct frame f;
        if (w_decode(g.rbuf + pos + 4, flen, &f) < 0) { nd_set_error("protocol error: malformed frame of type 0x%02x", g.rbuf[pos + 4]); bad = 1; break; }
        if (handle_frame(&f, &restore) < 0) {
            if (!g.last_error[0]) nd_set_error("protocol error: unexpected frame of type 0x%02x", f.type);
            bad = 1;
            break;
        }
        pos += 4 + flen;
    }
    memmove(g.rbuf, g.rbuf + pos, len - pos);
    len -= pos;
    if (bad) { drop_connection(); wbuf_free(&restore); return -1; }
    *lenp = len;
    if (restore.len) nd_send(&restore, NULL); /* never waits: the reader must go on reading */
    wbuf_free(&restore);
    return 0;
}

/* Reads the connection, hands frames to handle_frame, writes pending frames when the socket takes them,
 * and after a disconnection reconnects with back-off (50 ms doubling to 2 s) for as long as this process
 * has registrations or state to restore. Blocks only in poll(), without the lock. */
void *nd_reader_main(void *arg) {
    (void)arg;
    size_t len = 0;
    pthread_mutex_lock(&g.lock);
    /* The buffer lives in g, not on this thread's stack, so that a forked child (which has no reader
     * thread) can free it. */
    if (!g.rbuf) { g.rcap = 65536; g.rbuf = malloc(g.rcap); }
    uint64_t gen = 0;
    for (;;) {
        if (g.fd < 0) {
            if (g.tokens.count == 0 && g.states.count == 0) { pthread_cond_wait(&g.cond, &g.lock); continue; }
            uint32_t delay = g.goodbye_ms ? g.goodbye_ms : g.backoff_ms ? g.backoff_ms : 50;
            if (delay > 2000) delay = 2000;
            g.goodbye_ms = 0;
            sleep_locked(delay);
            if (g.fd < 0 && nd_connect_locked() != NOTIFY_STATUS_OK) g.backoff_ms = delay * 2;
            continue;
        }
        if (gen != g.gen) { gen = g.gen; len = 0; }
        int fd = g.fd;
        if (!g.rbuf) abort();
        if (g.rcap - len < 16384) { /* under the lock: a fork must not see a freed buffer */
            uint8_t *nb = realloc(g.rbuf, g.rcap * 2);
            if (!nb) abort();
            g.rbuf = nb; g.rcap *= 2;
        }
        /* Pending output: wait for the socket to take it, but not past the point where the daemon has
         * read nothing for the timeout. */
        int timeout = -1;
        if (g.out_pos < g.out.len && !g.broken) {
            if (nd_stalled()) { drop_connection(); continue; }
            long left = nd_stall_left();
            timeout = left > 0 ? (int)left : 0;
        }
        struct pollfd p[2] = {{fd, (short)(POLLIN | (timeout >= 0 ? POLLOUT : 0)), 0}, {g.wake_efd, POLLIN, 0}};
        g.poll_out = timeout >= 0;
        pthread_mutex_unlock(&g.lock);
        int n = poll(p, 2, timeout);
        pthread_mutex_lock(&g.lock);
        g.poll_out = 0;
        if (p[1].revents & POLLIN) {
            uint64_t v;
            ssize_t rr = read(g.wake_efd, &v, sizeof v);
            (void)rr;
        }
        if (gen != g.gen || g.fd != fd || n <= 0) continue;
        /* Read first: a daemon that closes the connection says why in its last frame. */
        if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_frames(fd, &len) < 0) continue;
        if ((p[0].revents & POLLOUT) && g.fd == fd && !g.broken && g.out_pos < g.out.len && nd_flush_locked() < 0) {
            nd_set_error("cannot write to the daemon: %s", strerror(errno));
            drop_connection();
        }
    }
    return NULL;
}
