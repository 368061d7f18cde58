/* Shared pieces of the benchmark drivers: clocks, the shared-memory board through which the orchestrator,
 * the poster and the subscribers coordinate (readiness, progress counters for flow control, stop), and a few
 * helpers. Every system under test is driven through the same board, so flow control never goes through the
 * system being measured. */
#ifndef NOTIFYD_BENCH_H
#define NOTIFYD_BENCH_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* The board: a file mapped MAP_SHARED by every process of one measurement. The orchestrator creates it
 * zero-filled with BOARD_SIZE(nslots) bytes. Each slot has one writer (its subscriber). */
struct board_slot {
    uint64_t ready;    /* phase reached by the slot's process (1 = subscribed, 2 = second phase done, ...) */
    uint64_t received; /* notifications received so far */
    uint64_t command;  /* written by the orchestrator: phase the slot's process should go to */
    uint64_t errors;   /* protocol errors, lost notifications reported by the system, ... */
    uint64_t merged;   /* notifications the system reported as merged or dropped (both kinds together) */
    uint64_t merged_frames; /* NOTIFICATION_MERGED frames received (each is also counted in `received`) */
    uint64_t dropped;  /* of `merged`: notifications reported dropped (OVERFLOW counts) rather than merged */
    uint64_t last_ns;  /* CLOCK_MONOTONIC time of the last read that brought a notification */
};

struct board {
    uint64_t magic;
    uint64_t stop;  /* set by the poster (or orchestrator): subscribers exit */
    uint64_t nslots;
    uint64_t pad[5];
    struct board_slot slots[];
};

#define BOARD_SIZE(n) (sizeof(struct board) + (size_t)(n) * sizeof(struct board_slot))

static inline uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

struct board *board_open(const char *path, size_t nslots);

/* Percentile from sorted samples (nearest rank). */
static inline uint64_t percentile(const uint64_t *sorted, size_t n, double p) {
    if (n == 0) return 0;
    size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return sorted[rank - 1];
}

__attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...);

#endif
