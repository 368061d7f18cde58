/* table.h - a chained hash table of intrusive nodes, keyed by a string or by an int; it grows so that
 * lookups stay O(1) with 100,000s of tokens. Not thread-safe: callers hold the library lock. */
#ifndef ND_TABLE_H
#define ND_TABLE_H
#include <stddef.h>
#include <stdint.h>
struct hnode { struct hnode *next; uint64_t hash; const char *skey; int ikey; };
struct htab { struct hnode **slots; size_t cap, count; };
struct hnode *htab_find_str(struct htab *t, const char *key);
struct hnode *htab_find_int(struct htab *t, int key);
/* 0 on success, -1 out of memory. The node's key must be set (skey, or ikey with skey NULL). */
int htab_insert(struct htab *t, struct hnode *n);
void htab_remove(struct htab *t, struct hnode *n);
void htab_free(struct htab *t); /* frees the slot array only */
#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
#endif
