// LD_PRELOAD shim for stapbpf: root on this machine lacks CAP_SYS_RESOURCE,
// so stapbpf's setrlimit(RLIMIT_MEMLOCK, infinity) fails and it gives up.
// Kernels >= 5.11 charge BPF memory to the memory cgroup instead, so the
// limit does not matter: pretend the call succeeded.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/resource.h>

int setrlimit(__rlimit_resource_t res, const struct rlimit *rl)
{
	static int (*real)(__rlimit_resource_t, const struct rlimit *);
	if (res == RLIMIT_MEMLOCK)
		return 0;
	if (!real)
		real = (int (*)(__rlimit_resource_t, const struct rlimit *))dlsym(RTLD_NEXT, "setrlimit");
	return real ? real(res, rl) : -1;
}
