/* A marker with a semaphore (part of sdt_target): the program evaluates
 * its arguments only while a probe is attached, which the kernel signals
 * by incrementing demo_guarded_semaphore. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

unsigned short demo_guarded_semaphore __attribute__((unused, section(".probes")));

void guarded(int n) {
    if (demo_guarded_semaphore)
        DTRACE_PROBE2(demo, guarded, n * 2, demo_guarded_semaphore);
}
