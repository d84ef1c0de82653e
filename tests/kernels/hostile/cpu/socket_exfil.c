/* socket_exfil.c: asks a server for the answer over a socket, for tests/data/problems/softmax_f32.
 *
 * Any network or local socket lets a candidate talk to a helper outside the gate (or send the
 * inputs away). Here it tries a TCP connection to 127.0.0.1:8470 (kiln's dashboard port) and a
 * Unix socket, and computes nothing itself. A sandbox refuses sockets; with no answer the kernel
 * leaves y unwritten.
 *
 * The gate refuses it before it runs: it calls write, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    size_t n = (size_t)(rows * cols) * sizeof *y;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0) {
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons(8470);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0 && write(s, x, n) == (ssize_t)n &&
            read(s, y, n) == (ssize_t)n) {
            close(s);
            return;
        }
        close(s);
    }
    int u = socket(AF_UNIX, SOCK_STREAM, 0);
    if (u >= 0)
        close(u);
}
