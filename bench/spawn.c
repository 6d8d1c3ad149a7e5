// spawn RSSFILE CMD...: runs CMD as a child, forwards SIGINT/SIGTERM to it,
// and writes the child's peak RSS (KiB) and CPU time (user + system, µs)
// to RSSFILE. The harness needs this
// middleman because a process forked from Python keeps Python's peak RSS
// across exec(); forked from this small program, the figure is the tracer's.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t child;

static void forward(int sig)
{
	if (child > 0)
		kill(child, sig);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: spawn RSSFILE CMD...\n");
		return 2;
	}
	struct sigaction sa = { .sa_handler = forward };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		execvp(argv[2], argv + 2);
		perror(argv[2]);
		_exit(127);
	}
	int status;
	struct rusage ru;
	while (wait4(child, &status, 0, &ru) < 0)
		;
	FILE *f = fopen(argv[1], "w");
	if (f) {
		long cpu_us = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000L +
			      ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
		fprintf(f, "%ld %ld\n", ru.ru_maxrss, cpu_us);
		fclose(f);
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
