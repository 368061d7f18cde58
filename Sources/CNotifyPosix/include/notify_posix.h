#ifndef NOTIFYD_POSIX_H
#define NOTIFYD_POSIX_H
// Linux calls Swift cannot make directly: their glibc declarations need _GNU_SOURCE, or they are built with
// C macros (CMSG_*) that Swift does not import. Each returns -1 with errno set on failure, like the call it wraps.
#include <stddef.h>
#include <stdint.h>

/// A memfd holding `length` bytes, sealed against any change (F_SEAL_SHRINK|GROW|WRITE|SEAL), close-on-exec.
int notifyd_sealed_memfd(const char *name, const uint8_t *bytes, size_t length);

/// The socket's cookie (SO_COOKIE): a number the kernel gives each socket once, the same in every process
/// holding it.
int notifyd_socket_cookie(int fd, uint64_t *cookie);

/// Sends `length` bytes of `bytes` (at least 1) with `count` descriptors (at most 253) in one SCM_RIGHTS message.
/// Returns the bytes sent.
long notifyd_send_with_fds(int socket, const uint8_t *bytes, size_t length, const int *fds, size_t count);

/// Receives up to `capacity` bytes and up to `fd_capacity` descriptors (made close-on-exec); `*fd_count` tells
/// how many came. Returns the bytes received (0: end of stream). Descriptors beyond `fd_capacity` are closed
/// and the call fails with EMSGSIZE.
long notifyd_receive_with_fds(int socket, uint8_t *bytes, size_t capacity, int *fds, size_t fd_capacity,
                              size_t *fd_count);

/// Asks the CPU to start loading the cache line at `address` (a hint: it never faults, whatever the address).
static inline void notifyd_prefetch(const void *address) { __builtin_prefetch(address); }
#endif
