/* names.h - the name and pattern grammar of PROTOCOL.md 8 and 8.1, checked locally so that a bad name is
 * NOTIFY_STATUS_INVALID_NAME at once, and pattern matching for routing notifications to tokens. */
#ifndef ND_NAMES_H
#define ND_NAMES_H
#include <stddef.h>
/* 1 when `s` is a valid name (allow_wildcards 0) or pattern (1) of at most max_len bytes. */
int name_valid(const char *s, size_t max_len, int allow_wildcards);
/* 1 when the name starts with "self.": process-local, never sent to the daemon. */
int name_is_self(const char *s);
/* 1 when the pattern contains a wildcard label. */
int name_is_pattern(const char *s);
/* 1 when `name` matches `pattern` (8.1). */
int name_matches(const char *pattern, const char *name);
#endif
