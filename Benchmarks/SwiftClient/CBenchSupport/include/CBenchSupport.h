/* Helpers for the Swift benchmark executables: the shared-memory board of Benchmarks/C/bench.h (same layout),
 * atomic loads/stores on it, a monotonic clock, and the allocation counters of libmalloccount.so. */
#ifndef CBENCHSUPPORT_H
#define CBENCHSUPPORT_H

#include <stddef.h>
#include <stdint.h>

/* Field numbers inside a board slot (see struct board_slot in Benchmarks/C/bench.h). */
enum { BENCH_READY = 0, BENCH_RECEIVED = 1, BENCH_COMMAND = 2, BENCH_ERRORS = 3, BENCH_MERGED = 4 };

/* Maps the board file; NULL on failure. */
uint64_t *_Nullable bench_board_open(const char *_Nonnull path);

/* The board's stop flag, and field `field` of slot `slot`. */
static inline uint64_t *_Nonnull bench_stop_flag(uint64_t *_Nonnull board) { return board + 1; }
static inline uint64_t *_Nonnull bench_slot_field(uint64_t *_Nonnull board, long slot, int field) {
    return board + 8 + slot * 8 + field;
}

static inline uint64_t bench_load(const uint64_t *_Nonnull p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void bench_store(uint64_t *_Nonnull p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void bench_add(uint64_t *_Nonnull p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELEASE); }

uint64_t bench_now_ns(void);
void bench_sleep_us(long us);

/* The allocation counters of an LD_PRELOADed libmalloccount.so: allocations, reallocs, frees, bytes. Returns 0
 * when the library is not loaded. */
int bench_malloc_counts(uint64_t out[_Nonnull 4]);

#endif
