/* libmalloccount.so: counts heap allocations of a process (LD_PRELOAD). Every allocation function forwards to
 * glibc's own (__libc_malloc & co.) and bumps a counter. With MALLOCCOUNT_FILE=PATH the counters live in that
 * file (mapped shared), so another process can read a daemon's allocations before and after a scenario; in the
 * process itself malloccount_read() returns them (find it with dlsym).
 *
 * Counters (uint64_t each): [0] allocations (malloc, calloc, memalign family), [1] reallocs, [2] frees of non-NULL
 * pointers, [3] bytes requested by allocations and reallocs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static uint64_t local_counters[8];
static uint64_t *counters = local_counters;

static inline void bump(int i, uint64_t n) { __atomic_fetch_add(&counters[i], n, __ATOMIC_RELAXED); }

__attribute__((constructor)) static void malloccount_init(void) {
    const char *path = getenv("MALLOCCOUNT_FILE");
    if (!path || !*path) return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (ftruncate(fd, 4096) == 0) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            uint64_t *shared = p;
            for (int i = 0; i < 8; i++) shared[i] = __atomic_load_n(&local_counters[i], __ATOMIC_RELAXED);
            __atomic_store_n(&counters, shared, __ATOMIC_RELEASE);
        }
    }
    close(fd);
}

void malloccount_read(uint64_t out[4]) {
    for (int i = 0; i < 4; i++) out[i] = __atomic_load_n(&counters[i], __ATOMIC_RELAXED);
}

void *malloc(size_t n) { bump(0, 1); bump(3, n); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { bump(0, 1); bump(3, a * b); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { bump(p ? 1 : 0, 1); bump(3, n); return __libc_realloc(p, n); }
void free(void *p) { if (p) bump(2, 1); __libc_free(p); }
void *memalign(size_t al, size_t n) { bump(0, 1); bump(3, n); return __libc_memalign(al, n); }
void *aligned_alloc(size_t al, size_t n) { bump(0, 1); bump(3, n); return __libc_memalign(al, n); }
void *valloc(size_t n) { bump(0, 1); bump(3, n); return __libc_memalign((size_t)sysconf(_SC_PAGESIZE), n); }
void *pvalloc(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    bump(0, 1); bump(3, n);
    return __libc_memalign(page, (n + page - 1) & ~(page - 1));
}
int posix_memalign(void **out, size_t al, size_t n) {
    if (al < sizeof(void *) || (al & (al - 1))) return EINVAL;
    bump(0, 1); bump(3, n);
    void *p = __libc_memalign(al, n);
    if (!p && n) return ENOMEM;
    *out = p;
    return 0;
}
