/* The uprobe test binary (tests/live.rs): calls f(42, "hello-uprobe") once,
 * or with an argument N, once a second for N seconds (so probes can stay
 * attached to a live process). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) int f(int n, const char *s) {
    /* Keeps the call from being folded away. */
    __asm__ volatile("" : : "r"(n), "r"(s) : "memory");
    return n + (s[0] != 0);
}

static const char message[] = "hello-uprobe";

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 0;
    /* Touch the string first: a BPF probe cannot fault in a page the
     * process has not used yet, and user_string() would see a fault. */
    *(volatile const char *)message;
    int sum = f(42, message);
    for (int i = 0; i < rounds; i++) {
        sleep(1);
        sum += f(42, message);
    }
    return sum == 0;
}
