/* notify.c - Darwin's notify(3) functions on top of the registry and the connection. */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint32_t notify_post(const char *name) { return notifyd_post(name, NULL, 0, 0, NULL); }

uint32_t notify_register_check(const char *name, int *out_token) {
    if (!name) return NOTIFY_STATUS_INVALID_NAME;
    if (!out_token) return NOTIFY_STATUS_INVALID_TOKEN;
    LOCK();
    struct nd_token *t = nd_token_new(TK_CHECK);
    uint32_t st = t ? nd_register(t, name, NULL, out_token) : NOTIFY_STATUS_FAILED;
    UNLOCK();
    return st;
}

uint32_t notify_register_signal(const char *name, int sig, int *out_token) {
    if (!name) return NOTIFY_STATUS_INVALID_NAME;
    if (!out_token) return NOTIFY_STATUS_INVALID_TOKEN;
    if (sig <= 0 || sig >= NSIG) return NOTIFY_STATUS_INVALID_SIGNAL;
    LOCK();
    struct nd_token *t = nd_token_new(TK_SIGNAL);
    if (t) t->sig = sig;
    uint32_t st = t ? nd_register(t, name, NULL, out_token) : NOTIFY_STATUS_FAILED;
    UNLOCK();
    return st;
}

uint32_t notify_register_mach_port(const char *name, mach_port_t *notify_port, int flags, int *out_token) {
    (void)name; (void)notify_port; (void)flags; (void)out_token;
    return NOTIFY_STATUS_INVALID_PORT; /* Linux has no Mach ports */
}

uint32_t notify_register_file_descriptor(const char *name, int *notify_fd, int flags, int *out_token) {
    if (!name) return NOTIFY_STATUS_INVALID_NAME;
    if (!notify_fd) return NOTIFY_STATUS_INVALID_FILE;
    if (!out_token) return NOTIFY_STATUS_INVALID_TOKEN;
    if (flags & ~NOTIFY_REUSE) return NOTIFY_STATUS_INVALID_REQUEST;
    LOCK();
    struct nd_pipe *p = NULL;
    if (flags & NOTIFY_REUSE) {
        /* Only a descriptor this library made (and has not closed yet) can be reused. */
        for (p = g.pipes; p && p->rfd != *notify_fd; p = p->next) {}
        if (!p) { UNLOCK(); return NOTIFY_STATUS_INVALID_FILE; }
        p->refs++;
    } else {
        int fds[2];
        /* The write end is ours and must not leak into exec'ed programs; the read end is the
         * caller's (like Darwin's, it stays open across exec unless the caller sets FD_CLOEXEC). */
        if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0 || !(p = calloc(1, sizeof *p))) {
            UNLOCK();
            return NOTIFY_STATUS_FAILED;
        }
        fcntl(fds[0], F_SETFL, 0);               /* the reader may block, as on Darwin */
        fcntl(fds[0], F_SETFD, 0);
        p->rfd = fds[0];
        p->wfd = fds[1];
        p->refs = 1;
        p->next = g.pipes;
        g.pipes = p;
    }
    struct nd_token *t = nd_token_new(TK_FD);
    if (!t) { UNLOCK(); return NOTIFY_STATUS_FAILED; }
    t->pipe = p; /* the token owns one reference: freeing a failed registration releases it */
    int rfd = p->rfd;
    uint32_t st = nd_register(t, name, NULL, out_token);
    if (st == NOTIFY_STATUS_OK) *notify_fd = rfd;
    UNLOCK();
    return st;
}

uint32_t notify_check(int token, int *check) {
    if (!check) return NOTIFY_STATUS_NULL_INPUT;
    LOCK();
    struct nd_token *t = nd_token_find(token);
    if (!t) { UNLOCK(); return NOTIFY_STATUS_INVALID_TOKEN; }
    /* The reader thread counts deliveries; checking compares counters and never asks the daemon. */
    uint64_t now = atomic_load_explicit(&t->posted, memory_order_relaxed);
    *check = !t->checked || now != t->seen;
    t->checked = 1;
    t->seen = now;
    UNLOCK();
    return NOTIFY_STATUS_OK;
}

uint32_t notify_cancel(int token) {
    LOCK();
    uint32_t st = nd_cancel(token);
    UNLOCK();
    return st;
}

uint32_t notify_suspend(int token) {
    LOCK();
    struct nd_token *t = nd_token_find(token);
    if (t) t->suspend++;
    UNLOCK();
    return t ? NOTIFY_STATUS_OK : NOTIFY_STATUS_INVALID_TOKEN;
}

uint32_t notify_resume(int token) {
    LOCK();
    struct nd_token *t = nd_token_find(token);
    if (!t) { UNLOCK(); return NOTIFY_STATUS_INVALID_TOKEN; }
    /* Nested suspensions: only the last resume delivers, once, whatever was posted meanwhile. */
    if (t->suspend > 0 && --t->suspend == 0 && t->pending) {
        t->pending = 0;
        nd_fire(t);
    }
    UNLOCK();
    return NOTIFY_STATUS_OK;
}

static struct nd_state *state_find(struct htab *tab, const char *name) {
    struct hnode *n = htab_find_str(tab, name);
    return n ? container_of(n, struct nd_state, node) : NULL;
}

static int state_store(struct htab *tab, const char *name, uint64_t value) {
    struct nd_state *s = state_find(tab, name);
    if (!s) {
        if (!(s = calloc(1, sizeof *s)) || !(s->name = strdup(name))) { free(s); return -1; }
        s->node.skey = s->name;
        if (htab_insert(tab, &s->node) < 0) { free(s->name); free(s); return -1; }
    }
    s->value = value;
    return 0;
}

uint32_t notify_set_state(int token, uint64_t state64) {
    LOCK();
    struct nd_token *t = nd_token_find(token);
    if (!t) { UNLOCK(); return NOTIFY_STATUS_INVALID_TOKEN; }
    char copy[256];
    strcpy(copy, t->entry->text); /* the token may be cancelled while we wait */
    const char *name = copy;
    uint32_t st;
    if (t->entry->is_pattern) st = NOTIFY_STATUS_INVALID_NAME;
    else if (name_is_self(name)) st = state_store(&g.self_states, name, state64) ? NOTIFY_STATUS_FAILED : NOTIFY_STATUS_OK;
    else if ((st = nd_ensure_connected()) == NOTIFY_STATUS_OK) {
        struct nd_waiter w = {.id = nd_next_req()};
        struct wbuf b = {0};
        w_set_state(&b, w.id, state64, copy);
        st = nd_request(&w, &b, NULL);
        wbuf_free(&b);
        /* Remembered so that a restarted daemon gets it back. */
        if (st == NOTIFY_STATUS_OK && state_store(&g.states, copy, state64) < 0) st = NOTIFY_STATUS_FAILED;
    }
    UNLOCK();
    return st;
}

uint32_t notify_get_state(int token, uint64_t *state64) {
    if (!state64) return NOTIFY_STATUS_NULL_INPUT;
    LOCK();
    struct nd_token *t = nd_token_find(token);
    if (!t) { UNLOCK(); return NOTIFY_STATUS_INVALID_TOKEN; }
    char copy[256];
    strcpy(copy, t->entry->text); /* the token may be cancelled while we wait */
    const char *name = copy;
    uint32_t st;
    if (t->entry->is_pattern) st = NOTIFY_STATUS_INVALID_NAME;
    else if (name_is_self(name)) {
        struct nd_state *s = state_find(&g.self_states, name);
        *state64 = s ? s->value : 0;
        st = NOTIFY_STATUS_OK;
    } else if ((st = nd_ensure_connected()) == NOTIFY_STATUS_OK) {
        struct nd_waiter w = {.id = nd_next_req()};
        struct wbuf b = {0};
        w_get_state(&b, w.id, name);
        st = nd_request(&w, &b, NULL);
        wbuf_free(&b);
        if (st == NOTIFY_STATUS_OK) *state64 = w.value; /* never set: 0, as on Darwin */
    }
    UNLOCK();
    return st;
}

bool notify_is_valid_token(int val) {
    if (val < 0) return false;
    LOCK();
    bool ok = nd_token_find(val) != NULL;
    UNLOCK();
    return ok;
}
