/* A program written for Darwin: it includes only <notify.h> (and POSIX headers) and uses the notify(3)
 * API as the Darwin man page shows. t_install.sh builds it against an installed libnotifyd with
 * pkg-config and runs it against a daemon. Exit 0 when everything behaved. */
#include <notify.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <unistd.h>

int main(void)
{
    uint32_t status;
    int nf, rtoken, qtoken, ctoken, check, t;
    uint64_t state;

    status = notify_register_file_descriptor("com.eg.random.event", &nf, 0, &rtoken);
    if (status != NOTIFY_STATUS_OK) { fprintf(stderr, "registration failed (%u)\n", status); exit(1); }
    status = notify_register_file_descriptor("com.eg.random.quit", &nf, NOTIFY_REUSE, &qtoken);
    if (status != NOTIFY_STATUS_OK) { fprintf(stderr, "registration failed (%u)\n", status); exit(2); }
    status = notify_register_check("com.eg.update", &ctoken);
    if (status != NOTIFY_STATUS_OK) exit(3);
    if (notify_check(ctoken, &check) != NOTIFY_STATUS_OK || check != 1) exit(4);
    if (notify_set_state(ctoken, 42) != NOTIFY_STATUS_OK) exit(5);
    if (notify_get_state(ctoken, &state) != NOTIFY_STATUS_OK || state != 42) exit(6);

    notify_post("com.eg.random.event");
    notify_post("com.eg.update");
    notify_post("com.eg.random.quit");

    int events = 0;
    for (;;) {
        fd_set readfds;
        struct timeval tv = {20, 0}; /* fail rather than hang */
        FD_ZERO(&readfds);
        FD_SET(nf, &readfds);
        int ret = select(nf + 1, &readfds, NULL, NULL, &tv);
        if (ret == 0) { fprintf(stderr, "timed out\n"); exit(7); }
        if (ret < 0) continue;
        if (read(nf, &t, sizeof(int)) != sizeof(int)) { perror("read"); exit(8); }
        t = ntohl(t);
        if (t == rtoken) events++;
        else if (t == qtoken) break;
    }
    if (events != 1) exit(9);
    if (notify_check(ctoken, &check) != NOTIFY_STATUS_OK || check != 1) exit(10);
    notify_cancel(rtoken);
    notify_cancel(qtoken);
    notify_cancel(ctoken);
    if (notify_is_valid_token(ctoken)) exit(11);
    printf("darwin program ok\n");
    exit(0);
}
