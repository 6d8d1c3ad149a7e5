// Workloads driven by bench/run.
//   workload getppid N       N getppid() calls; prints ns per call
//   workload getpriority N   getpriority(PRIO_PROCESS, 1000000 + i) for i < N:
//                            N distinct keys for the 1,000,000-key test
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: workload getppid|getpriority N\n");
		return 2;
	}
	long n = atol(argv[2]);
	double t0 = now_ns();
	if (strcmp(argv[1], "getppid") == 0) {
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid); // not the libc wrapper: never cached
	} else {
		for (long i = 0; i < n; i++)
			syscall(SYS_getpriority, PRIO_PROCESS, 1000000 + i);
	}
	double t1 = now_ns();
	printf("%.1f\n", (t1 - t0) / (double)n);
	return 0;
}
