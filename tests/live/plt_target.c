/* The PLT probe test binary (tests/live/plt.rs): calls two libc functions
 * through its PLT, getenv once and getpid once, in that order. */
#include <stdlib.h>
#include <unistd.h>

int main(void) {
    const char *home = getenv("STAP_PLT_UNSET");
    pid_t pid = getpid();
    return (home != 0) + (pid == 0);
}
