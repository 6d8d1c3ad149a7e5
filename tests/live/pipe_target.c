/* The syscall.pipe test binary (tests/live/syscalls.rs): pipe2 with
 * O_NONBLOCK, then pipe, each into an array it first fills with -7, and
 * prints the four descriptors it got. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    int a[2] = {-7, -7}, b[2] = {-7, -7};
    if (pipe2(a, O_NONBLOCK) != 0)
        return 1;
    /* The pipe system call itself: glibc's pipe() may use pipe2. */
    if (syscall(SYS_pipe, b) != 0)
        return 1;
    printf("%d %d %d %d\n", a[0], a[1], b[0], b[1]);
    return 0;
}
