/* The SDT marker test binary (tests/live/sdt.rs): markers whose arguments
 * the compiler puts in registers, in memory (base, and base + index *
 * scale), in a global (%rip-relative) and in constants. The marker with a
 * semaphore is in sdt_guarded.c, since <sys/sdt.h> gives semaphores to
 * every marker of a file or none. */
#include <stdlib.h>
#include <sys/sdt.h>

long counter = 77;
struct pair {
    long a;
    int b;
};
void guarded(int n);

__attribute__((noinline)) void work(int n, const char *s, struct pair *p) {
    long arr[4] = {10, 20, 30, 40};
    volatile long i = 2;
    DTRACE_PROBE3(demo, plain, n, s, p->a);
    DTRACE_PROBE4(demo, mixed, (char)-3, (unsigned short)65535, arr[i], counter);
    DTRACE_PROBE2(demo, consts, 5, -1);
    guarded(n);
}

int main(int argc, char **argv) {
    static const char message[] = "hello-sdt";
    struct pair p = {123456789012L, 7};
    /* A BPF probe cannot fault the string's page in: touch it first. */
    *(volatile const char *)message;
    work(argc > 1 ? atoi(argv[1]) : 42, message, &p);
    return 0;
}
