#define _GNU_SOURCE
#include "notifyd_test_spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

extern char **environ;

int notifyd_test_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[], int stdin_fd,
                       int stdout_fd, int stderr_fd) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int error = posix_spawn_file_actions_init(&actions);
    if (error != 0) return error;
    error = posix_spawnattr_init(&attributes);
    if (error != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return error;
    }
    error = stdin_fd < 0 ? posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
                         : posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
    if (error == 0) error = posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
    if (error == 0) error = posix_spawn_file_actions_adddup2(&actions, stderr_fd, 2);
    // Whatever this process has open (sockets of other tests among them) stays out of the child, close-on-exec
    // or not: a child holding a test's socket would keep its peer from seeing the close.
    if (error == 0) error = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    // A group of its own, as Foundation's Process did: a signal to the test's group does not reach the children.
    // Every signal at its default and none blocked, as a shell or systemd starts a program, whatever this test
    // process and the spawning thread had ignored or blocked.
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    if (error == 0) error = posix_spawnattr_setsigdefault(&attributes, &all);
    if (error == 0) error = posix_spawnattr_setsigmask(&attributes, &none);
    if (error == 0)
        error = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    if (error == 0) error = posix_spawnattr_setpgroup(&attributes, 0);
    if (error == 0) error = posix_spawn(pid, path, &actions, &attributes, argv, envp != NULL ? envp : environ);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return error;
}

int notifyd_test_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }
