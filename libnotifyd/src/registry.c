/* registry.c - tokens, the names they observe, the daemon subscriptions they share, and delivery of a
 * notification to each kind of token (check counter, descriptor, signal, callback; callbacks then run
 * from queue.c). */
#define _GNU_SOURCE
#include "internal.h"
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct nd_token *nd_token_new(enum nd_kind kind) {
    struct nd_token *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->refs = 1;
    t->id = -1;
    return t;
}

struct nd_token *nd_token_find(int id) {
    if (id < 0) return NULL;
    struct hnode *n = htab_find_int(&g.tokens, id);
    struct nd_token *t = n ? container_of(n, struct nd_token, node) : NULL;
    return t && t->ready ? t : NULL; /* one still being registered is not the caller's yet */
}

/* Gives `t` the next free id and puts it in g.tokens. Ids count up from 0; after INT_MAX they start again
 * at 0 and skip every id in use (registered or being registered), so an id never names two live tokens.
 * -1 when out of memory (or, absurdly, when every id is in use). Lock held. */
static int token_assign_id(struct nd_token *t) {
    for (long tries = 0; tries <= (long)INT_MAX; tries++) {
        int id = g.next_token;
        g.next_token = id == INT_MAX ? 0 : id + 1;
        if (htab_find_int(&g.tokens, id)) continue;
        t->id = id;
        t->node.ikey = id;
        t->node.skey = NULL;
        if (htab_insert(&g.tokens, &t->node) < 0) return -1;
        t->in_map = 1;
        return 0;
    }
    return -1;
}

void nd_note_unref(struct nd_note *n) {
    if (!n || --n->refs > 0) return;
    free(n->name);
    free(n->payload);
    free(n);
}

static void pipe_release(struct nd_pipe *p) {
    if (!p || --p->refs > 0) return;
    if (p->rfd >= 0) close(p->rfd); /* -1 in a forked child: the read end stays the program's */
    close(p->wfd);
    for (struct nd_pipe **pp = &g.pipes; *pp; pp = &(*pp)->next)
        if (*pp == p) { *pp = p->next; break; }
    free(p);
}

/* Frees what the token owns. Lock held. */
void nd_free_token(struct nd_token *t) {
    nd_note_unref(t->last);
    pipe_release(t->pipe);
    if (t->queue) t->queue->users--;
    if (t->destroy) t->destroy(t->ctx);
    free(t);
}

void nd_token_unref(struct nd_token *t) {
    if (--t->refs == 0) nd_free_token(t);
}

void nd_sub_free(struct nd_sub *s) {
    free(s->key);
    free(s);
}

/* Drops a token's hold on its subscription; the last one unsubscribes (never waits: the UNSUBSCRIBE goes
 * into the outbound buffer whatever it holds). Lock held. */
static void sub_release(struct nd_sub *s) {
    if (!s || --s->refs > 0) return;
    if (s->in_map) { htab_remove(&g.subs, &s->node); s->in_map = 0; }
    int unsubscribe = s->state == SUB_ACTIVE && g.fd >= 0;
    uint32_t id = s->id;
    nd_sub_free(s);
    if (unsubscribe) {
        /* Fire and forget: the OK (or an error for a subscription the daemon already lost) is ignored. */
        struct wbuf b = {0};
        w_unsubscribe(&b, nd_next_req(), id);
        nd_send(&b, NULL); /* never waits: a few bytes per subscription the process had */
        wbuf_free(&b);
    }
}

static struct nd_entry *entry_get(const char *text, int is_pattern) {
    struct hnode *n = htab_find_str(&g.entries, text);
    if (n) return container_of(n, struct nd_entry, node);
    struct nd_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->text = strdup(text))) { free(e); return NULL; }
    e->node.skey = e->text;
    e->is_pattern = is_pattern;
    if (htab_insert(&g.entries, &e->node) < 0) { free(e->text); free(e); return NULL; }
    if (is_pattern) {
        e->pnext = g.patterns;
        if (g.patterns) g.patterns->pprev = e;
        g.patterns = e;
    }
    return e;
}

static void entry_detach(struct nd_token *t) {
    struct nd_entry *e = t->entry;
    if (!e) return;
    if (t->eprev) t->eprev->enext = t->enext; else e->head = t->enext;
    if (t->enext) t->enext->eprev = t->eprev;
    t->entry = NULL;
    if (e->head) return;
    htab_remove(&g.entries, &e->node);
    if (e->is_pattern) {
        if (e->pprev) e->pprev->pnext = e->pnext; else g.patterns = e->pnext;
        if (e->pnext) e->pnext->pprev = e->pprev;
    }
    free(e->text);
    free(e);
}

/* Registers token `t` (its kind-specific fields set) for `name`. On failure the token is freed. Lock held. */
uint32_t nd_register(struct nd_token *t, const char *name, const notifyd_register_options_t *opts, int *out) {
    notifyd_register_options_t o = opts ? *opts : (notifyd_register_options_t){0};
    int is_pattern = (o.flags & NOTIFYD_REG_PATTERN) && name_is_pattern(name);
    int self = name_is_self(name);
    uint32_t st = NOTIFY_STATUS_OK;
    if (!name_valid(name, g.max_name ? g.max_name : 255, (o.flags & NOTIFYD_REG_PATTERN) != 0)) st = NOTIFY_STATUS_INVALID_NAME;
    else if (o.policy < 0 || o.policy > 2 || (o.policy == NOTIFYD_POLICY_QUEUE) != (o.queue_limit > 0)) st = NOTIFY_STATUS_INVALID_REQUEST;
    else if (!self) st = nd_ensure_connected();
    if (st != NOTIFY_STATUS_OK) { nd_token_unref(t); return st; }

    if (token_assign_id(t) < 0) { nd_token_unref(t); return NOTIFY_STATUS_FAILED; }
    struct nd_entry *e = entry_get(name, is_pattern);
    if (!e) { htab_remove(&g.tokens, &t->node); nd_token_unref(t); return NOTIFY_STATUS_FAILED; }
    t->entry = e;
    t->enext = e->head;
    if (e->head) e->head->eprev = t;
    e->head = t;

    if (!self) {
        char key[300];
        int retained = (o.flags & NOTIFYD_REG_RETAINED) != 0;
        /* Tokens with the same name and policy share one subscription; one that asks for retained
         * notifications gets its own, so that the RETAINED frames reach it alone. */
        if (retained) snprintf(key, sizeof key, "r%d", t->id);
        else snprintf(key, sizeof key, "%d:%u:%s", o.policy, o.queue_limit, name);
        struct hnode *n = htab_find_str(&g.subs, key);
        struct nd_sub *s = n ? container_of(n, struct nd_sub, node) : NULL;
        if (s) {
            s->refs++;
            t->sub = s;
            while (s->state == SUB_PENDING) pthread_cond_wait(&g.cond, &g.lock);
            if (s->state == SUB_FAILED) st = s->status;
        } else if (!(s = calloc(1, sizeof *s)) || !(s->key = malloc(strlen(key) + strlen(name) + 2))) {
            free(s);
            st = NOTIFY_STATUS_FAILED;
        } else {
            strcpy(s->key, key);
            s->text = s->key + strlen(key) + 1;
            strcpy(s->text, name);
            s->node.skey = s->key;
            if (++g.next_sub == 0) g.next_sub = 1;
            s->id = g.next_sub;
            s->policy = (uint8_t)o.policy;
            s->limit = o.queue_limit;
            s->flags = retained ? 1 : 0;
            s->refs = 1;
            s->state = SUB_PENDING;
            t->sub = s;
            if (htab_insert(&g.subs, &s->node) == 0) s->in_map = 1;
            struct nd_waiter w = {.id = nd_next_req(), .sub = s, .token = t};
            struct wbuf b = {0};
            w_subscribe(&b, w.id, s->id, s->flags, s->policy, s->limit, name);
            st = nd_request(&w, &b, NULL);
            wbuf_free(&b);
            if (st != NOTIFY_STATUS_OK && s->state == SUB_PENDING) {
                s->state = SUB_FAILED;
                s->status = st;
                if (s->in_map) { htab_remove(&g.subs, &s->node); s->in_map = 0; }
                pthread_cond_broadcast(&g.cond);
            }
        }
    }
    if (st != NOTIFY_STATUS_OK) {
        htab_remove(&g.tokens, &t->node);
        t->in_map = 0;
        t->cancelled = 1;
        entry_detach(t);
        struct nd_sub *s = t->sub;
        t->sub = NULL;
        nd_token_unref(t);
        sub_release(s);
        return st;
    }
    t->ready = 1;
    *out = t->id;
    return NOTIFY_STATUS_OK;
}

uint32_t nd_cancel(int id) {
    struct nd_token *t = nd_token_find(id);
    if (!t) return NOTIFY_STATUS_INVALID_TOKEN;
    htab_remove(&g.tokens, &t->node);
    t->in_map = 0;
    t->cancelled = 1;
    entry_detach(t);
    struct nd_sub *s = t->sub;
    t->sub = NULL;
    nd_token_unref(t); /* a queued callback keeps its own reference */
    sub_release(s);
    return NOTIFY_STATUS_OK;
}

/* One delivery to a token that is not suspended. Lock held (never blocks). */
void nd_fire(struct nd_token *t) {
    atomic_fetch_add_explicit(&t->posted, 1, memory_order_relaxed);
    switch (t->kind) {
    case TK_CHECK: break;
    case TK_FD: {
        /* The descriptor carries the token in network order; a full pipe drops it, as Darwin's
         * kernel queue does (the reader is told it has notifications either way). */
        uint32_t v = htonl((uint32_t)t->id);
        ssize_t r = write(t->pipe->wfd, &v, sizeof v);
        (void)r;
        break;
    }
    case TK_SIGNAL: kill(getpid(), t->sig); break;
    case TK_CALLBACK: if (!t->queued) nd_queue_push(t->queue, t); break;
    }
}

/* Hands a notification (NOTIFICATION, NOTIFICATION_MERGED, RETAINED, or a "self." post with `f`'s
 * fields) to every token whose name or pattern matches, or to `only`. Lock held. */
void nd_route(const char *name_bytes, size_t name_len, const struct frame *f, int retained, struct nd_token *only) {
    char name[256];
    if (name_len > 255) return;
    memcpy(name, name_bytes, name_len);
    name[name_len] = 0;
    struct nd_note *note = NULL;
    int fired = 0;
    struct nd_entry *exact = NULL;
    struct hnode *n = htab_find_str(&g.entries, name);
    if (n) exact = container_of(n, struct nd_entry, node);
    struct nd_entry *e = exact && !exact->is_pattern ? exact : g.patterns;
    int doing_exact = exact && !exact->is_pattern;
    while (e) {
        if (doing_exact || name_matches(e->text, name)) {
            for (struct nd_token *t = e->head; t; t = t->enext) {
                if (t->cancelled || (only && t != only)) continue;
                if (t->kind == TK_CALLBACK) {
                    if (!note) {
                        note = calloc(1, sizeof *note);
                        if (!note || !(note->name = strdup(name)) ||
                            (f->payload_len && !(note->payload = malloc(f->payload_len)))) {
                            if (note) { free(note->name); free(note); }
                            return;
                        }
                        if (f->payload_len) memcpy(note->payload, f->payload, f->payload_len);
                        note->plen = f->payload_len;
                        note->seq = f->seq;
                        note->merged = f->type == FT_MERGED ? f->count : 0;
                        note->pid = f->pid; note->uid = f->uid; note->gid = f->gid;
                        note->retained = retained;
                    }
                    if (t->last) { t->extra_merged += 1 + t->last->merged; nd_note_unref(t->last); }
                    note->refs++;
                    t->last = note;
                }
                fired = 1;
                if (t->suspend > 0) t->pending = 1;
                else nd_fire(t);
            }
        }
        if (doing_exact) { doing_exact = 0; e = g.patterns; continue; }
        e = e->pnext;
    }
    if (note) { note->refs++; nd_note_unref(note); }
    if (fired && g.conn_efd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(g.conn_efd, &one, sizeof one);
        (void)r;
    }
}

