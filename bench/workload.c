// Workloads driven by bench/run.
//   workload getppid N       N getppid() calls; prints ns per call
//   workload getpriority N   getpriority(PRIO_PROCESS, 1000000 + i) for i < N:
//                            N distinct keys for the 1,000,000-key test
//   workload udp N           N UDP datagrams to a closed loopback port: one
//                            skb:kfree_skb each (no socket)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
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
		fprintf(stderr, "usage: workload getppid|getpriority|udp N\n");
		return 2;
	}
	long n = atol(argv[2]);
	int sock = -1;
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(9) };
	if (strcmp(argv[1], "udp") == 0) {
		sock = socket(AF_INET, SOCK_DGRAM, 0);
		to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	double t0 = now_ns();
	if (sock >= 0) {
		for (long i = 0; i < n; i++)
			sendto(sock, "x", 1, 0, (struct sockaddr *)&to, sizeof(to));
	} else if (strcmp(argv[1], "getppid") == 0) {
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
