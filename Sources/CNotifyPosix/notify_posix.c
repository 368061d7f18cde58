#define _GNU_SOURCE
#include "notify_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

int notifyd_sealed_memfd(const char *name, const uint8_t *bytes, size_t length) {
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < length) {
        ssize_t n = write(fd, bytes + done, length - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        done += (size_t)n;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0 ||
        lseek(fd, 0, SEEK_SET) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int notifyd_socket_cookie(int fd, uint64_t *cookie) {
    socklen_t length = sizeof *cookie;
    return getsockopt(fd, SOL_SOCKET, SO_COOKIE, cookie, &length);
}

long notifyd_send_with_fds(int socket, const uint8_t *bytes, size_t length, const int *fds, size_t count) {
    if (count > 253 || length == 0) {
        errno = EINVAL;
        return -1;
    }
    struct iovec iov = {.iov_base = (void *)bytes, .iov_len = length};
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int) * 253)];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1};
    if (count > 0) {
        message.msg_control = control.space;
        message.msg_controllen = CMSG_SPACE(sizeof(int) * count);
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int) * count);
        memcpy(CMSG_DATA(header), fds, sizeof(int) * count);
    }
    ssize_t sent;
    do {
        sent = sendmsg(socket, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    return (long)sent;
}

long notifyd_receive_with_fds(int socket, uint8_t *bytes, size_t capacity, int *fds, size_t fd_capacity,
                              size_t *fd_count) {
    struct iovec iov = {.iov_base = bytes, .iov_len = capacity};
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int) * 253)];
    } control;
    struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                             .msg_controllen = sizeof control.space};
    ssize_t received;
    do {
        received = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    } while (received < 0 && errno == EINTR);
    *fd_count = 0;
    if (received < 0) return -1;
    int overflow = 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *passed = (int *)CMSG_DATA(header);
        for (size_t i = 0; i < n; i++) {
            if (*fd_count < fd_capacity) {
                fds[(*fd_count)++] = passed[i];
            } else {
                close(passed[i]);
                overflow = 1;
            }
        }
    }
    if (overflow || (message.msg_flags & MSG_CTRUNC)) {
        errno = EMSGSIZE;
        return -1;
    }
    return (long)received;
}
