/* table.c - see table.h. */
#include "table.h"
#include <stdlib.h>
#include <string.h>

static uint64_t hash_str(const char *s) { uint64_t h = 1469598103934665603ull; while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull; return h; }
static uint64_t hash_int(int k) { uint64_t h = (uint64_t)(unsigned)k * 0x9E3779B97F4A7C15ull; return h ^ (h >> 29); }
static uint64_t node_hash(const struct hnode *n) { return n->skey ? hash_str(n->skey) : hash_int(n->ikey); }

struct hnode *htab_find_str(struct htab *t, const char *key) {
    if (!t->cap) return NULL;
    uint64_t h = hash_str(key);
    for (struct hnode *n = t->slots[h & (t->cap - 1)]; n; n = n->next)
        if (n->hash == h && n->skey && strcmp(n->skey, key) == 0) return n;
    return NULL;
}

struct hnode *htab_find_int(struct htab *t, int key) {
    if (!t->cap) return NULL;
    uint64_t h = hash_int(key);
    for (struct hnode *n = t->slots[h & (t->cap - 1)]; n; n = n->next)
        if (!n->skey && n->ikey == key) return n;
    return NULL;
}

static int grow(struct htab *t) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    struct hnode **slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        for (struct hnode *n = t->slots[i], *next; n; n = next) {
            next = n->next;
            n->next = slots[n->hash & (cap - 1)];
            slots[n->hash & (cap - 1)] = n;
        }
    }
    free(t->slots);
    t->slots = slots; t->cap = cap;
    return 0;
}

int htab_insert(struct htab *t, struct hnode *n) {
    if (t->count + 1 > t->cap && grow(t) < 0) return -1;
    n->hash = node_hash(n);
    struct hnode **slot = &t->slots[n->hash & (t->cap - 1)];
    n->next = *slot; *slot = n;
    t->count++;
    return 0;
}

void htab_remove(struct htab *t, struct hnode *n) {
    if (!t->cap) return;
    for (struct hnode **pp = &t->slots[n->hash & (t->cap - 1)]; *pp; pp = &(*pp)->next) {
        if (*pp == n) { *pp = n->next; t->count--; return; }
    }
}

void htab_free(struct htab *t) { free(t->slots); t->slots = NULL; t->cap = t->count = 0; }
