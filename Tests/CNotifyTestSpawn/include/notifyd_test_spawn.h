#ifndef NOTIFYD_TEST_SPAWN_H
#define NOTIFYD_TEST_SPAWN_H
// How the tests start child processes: posix_spawn(3) with the GNU file actions Swift's Glibc module does not
// declare (they need _GNU_SOURCE). Foundation's Process is not used; see SpawnedProcess.swift for why.
#include <sys/types.h>

/// Starts `path` with `argv` and `envp` (NULL: this process's environment) in a process group of its own, every
/// signal at its default disposition and unblocked, with
/// standard input on /dev/null (`stdin_fd` < 0) or on `stdin_fd`, standard output and error on `stdout_fd` and
/// `stderr_fd`, and no other descriptor of this process open. Returns 0, or the error number.
int notifyd_test_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[], int stdin_fd,
                       int stdout_fd, int stderr_fd);

/// pipe2(fds, O_CLOEXEC): returns 0, or -1 with errno set.
int notifyd_test_pipe(int fds[2]);
#endif
