/* Makes one kernel event happen under a chosen process name, for the live
 * tests (tests/live.rs). Usage:
 *   trigger NAME connect PORT        TCP connect to 127.0.0.1:PORT (closed:
 *                                    the SYN is dropped in tcp_v4_rcv)
 *   trigger NAME udp ADDR PORT       one UDP datagram to ADDR:PORT
 *   trigger NAME spin SECONDS        busy loop on one CPU
 *   trigger NAME sockops PORT        TCP: connect to 127.0.0.1:PORT (listening),
 *                                    setsockopt TCP_NODELAY, send 5 bytes,
 *                                    disconnect (connect AF_UNSPEC), close;
 *                                    UDP: connect to the same port,
 *                                    disconnect, close
 *   trigger NAME send PORT BYTES     TCP: connect to 127.0.0.1:PORT (listening),
 *                                    write BYTES bytes, close
 *   trigger NAME open PATH           create PATH (O_WRONLY|O_CREAT|O_TRUNC|
 *                                    O_CLOEXEC, mode 0640), close it, then
 *                                    open PATH.missing read-only (ENOENT)
 *   trigger NAME chdirs N            N chdir(2) calls that fail (ENOENT), then
 *                                    read stdin until it closes
 *   trigger NAME getppid N           fork once; parent and child each call
 *                                    getppid N times (both CPUs busy in the
 *                                    same syscall at once)
 *   trigger NAME family PATH         the signal, vfs, vm and scheduler
 *                                    families: sleep 20 ms; handle SIGUSR1
 *                                    and SIGUSR2, block SIGUSR2, tgkill
 *                                    (self, SIGUSR2), sigpending, unblock
 *                                    it, tkill(self, SIGUSR1); writev 3+4
 *                                    bytes to PATH (created) and readv
 *                                    them back; mmap three anonymous
 *                                    pages, touch, munmap them; grow the
 *                                    heap by 16 KiB with sbrk; fork a
 *                                    child that exits 5, and wait for it
 *   trigger NAME ifflags IFNAME      ioctl(SIOCGIFFLAGS) on IFNAME
 *   trigger NAME threads N           start N threads, each naming itself
 *                                    NAME-N, and join them
 *   trigger NAME sigqueue            a POSIX timer delivers SIGUSR2 (queued
 *                                    by the kernel), taken with sigwaitinfo
 *   trigger NAME segv                a child whose SIGUSR1 handler runs on an
 *                                    alternate stack it cannot write: the
 *                                    kernel forces SIGSEGV on it
 * NAME becomes the process name (execname()) through prctl(PR_SET_NAME). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failing_chdirs_then_wait(int n) {
    for (int i = 0; i < n; i++)
        /* Fails with ENOENT on purpose. */
        if (chdir("/stap-rs-trigger-nonexistent") == 0) return 1;
    char buf[256];
    while (read(0, buf, sizeof buf) > 0) {}
    return 0;
}

static int open_files(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0) { perror("open"); return 1; }
    close(fd);
    char missing[4096];
    snprintf(missing, sizeof missing, "%s.missing", path);
    /* Fails with ENOENT on purpose. */
    if (open(missing, O_RDONLY) >= 0) return 1;
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: trigger NAME connect PORT | udp ADDR PORT | spin SECONDS | send PORT BYTES\n");
    return 2;
}

static int send_to(int type, const char *addr, int port) {
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_port = htons((unsigned short)port);
    if (inet_pton(AF_INET, addr, &to.sin_addr) != 1) return usage();
    int fd = socket(AF_INET, type, 0);
    if (fd < 0) { perror("socket"); return 1; }
    if (type == SOCK_STREAM) {
        /* Refused is the expected outcome: the port is closed. */
        connect(fd, (struct sockaddr *)&to, sizeof to);
    } else if (sendto(fd, "stap-rs", 7, 0, (struct sockaddr *)&to, sizeof to) < 0) {
        perror("sendto");
        return 1;
    }
    close(fd);
    return 0;
}

/* Connects to a listener on loopback PORT and writes BYTES bytes: the
 * send path that the call-graph tests record. */
static int send_bytes(int port, int bytes) {
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_port = htons((unsigned short)port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof to) < 0) { perror("connect"); return 1; }
    char buffer[4096];
    memset(buffer, 'x', sizeof buffer);
    if (bytes < 0 || bytes > (int)sizeof buffer) return usage();
    if (write(fd, buffer, (size_t)bytes) != bytes) { perror("write"); return 1; }
    close(fd);
    return 0;
}

static int spin(double seconds) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    volatile unsigned long work = 0;
    do {
        for (int i = 0; i < 100000; i++) work++;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    return 0;
}

static int unspec_connect(int fd) {
    struct sockaddr unspec;
    memset(&unspec, 0, sizeof unspec);
    unspec.sa_family = AF_UNSPEC;
    return connect(fd, &unspec, sizeof unspec);
}

static int sockops(int port) {
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_port = htons((unsigned short)port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int tcp = socket(AF_INET, SOCK_STREAM, 0);
    if (tcp < 0 || connect(tcp, (struct sockaddr *)&to, sizeof to) < 0) { perror("tcp connect"); return 1; }
    int one = 1;
    if (setsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) { perror("setsockopt"); return 1; }
    if (send(tcp, "hello", 5, 0) != 5) { perror("send"); return 1; }
    if (unspec_connect(tcp) < 0) { perror("tcp disconnect"); return 1; }
    close(tcp);
    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    if (udp < 0 || connect(udp, (struct sockaddr *)&to, sizeof to) < 0) { perror("udp connect"); return 1; }
    if (unspec_connect(udp) < 0) { perror("udp disconnect"); return 1; }
    close(udp);
    return 0;
}

static int getppid_both(long n) {
    pid_t child = fork();
    if (child < 0) { perror("fork"); return 1; }
    /* The raw syscall: no libc caching. */
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    if (child == 0) _exit(0);
    int status;
    if (waitpid(child, &status, 0) < 0) { perror("waitpid"); return 1; }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static volatile sig_atomic_t handled;
static void count_signal(int sig) { (void)sig; handled++; }

static int signals(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = count_signal;
    if (sigaction(SIGUSR1, &action, NULL) < 0 || sigaction(SIGUSR2, &action, NULL) < 0) { perror("sigaction"); return 1; }
    sigset_t usr2, pending;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    if (sigprocmask(SIG_BLOCK, &usr2, NULL) < 0) { perror("sigprocmask"); return 1; }
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (syscall(SYS_tgkill, getpid(), tid, SIGUSR2) < 0) { perror("tgkill"); return 1; }
    if (sigpending(&pending) < 0 || !sigismember(&pending, SIGUSR2)) { perror("sigpending"); return 1; }
    /* The pending SIGUSR2 is delivered on the way out of this call. */
    if (sigprocmask(SIG_UNBLOCK, &usr2, NULL) < 0) { perror("sigprocmask"); return 1; }
    if (syscall(SYS_tkill, tid, SIGUSR1) < 0) { perror("tkill"); return 1; }
    return handled == 2 ? 0 : 1;
}

static int vectors(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) { perror("open"); return 1; }
    char first[3] = "abc", second[4] = "defg";
    struct iovec out[2] = {{first, sizeof first}, {second, sizeof second}};
    if (writev(fd, out, 2) != 7) { perror("writev"); return 1; }
    char a[3], b[4];
    struct iovec in[2] = {{a, sizeof a}, {b, sizeof b}};
    if (lseek(fd, 0, SEEK_SET) != 0 || readv(fd, in, 2) != 7) { perror("readv"); return 1; }
    close(fd);
    return memcmp(a, "abc", 3) == 0 && memcmp(b, "defg", 4) == 0 ? 0 : 1;
}

static int memory(void) {
    long page = sysconf(_SC_PAGESIZE);
    char *area = mmap(NULL, (size_t)(3 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) { perror("mmap"); return 1; }
    /* A page fault on each page. */
    for (long i = 0; i < 3; i++) area[i * page] = 1;
    if (munmap(area, (size_t)(3 * page)) < 0) { perror("munmap"); return 1; }
    if (sbrk(16384) == (void *)-1) { perror("sbrk"); return 1; }
    return 0;
}

static int fork_and_wait(void) {
    pid_t child = fork();
    if (child < 0) { perror("fork"); return 1; }
    if (child == 0) _exit(5);
    int status;
    if (waitpid(child, &status, 0) != child) { perror("waitpid"); return 1; }
    return WIFEXITED(status) && WEXITSTATUS(status) == 5 ? 0 : 1;
}

static int families(const char *path) {
    /* A timer wakes us from this sleep (scheduler.wakeup). */
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
    if (signals() || vectors(path) || memory() || fork_and_wait()) return 1;
    return 0;
}

static int interface_flags(const char *name) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) { perror("socket"); return 1; }
    struct ifreq request;
    memset(&request, 0, sizeof request);
    snprintf(request.ifr_name, sizeof request.ifr_name, "%s", name);
    if (ioctl(fd, SIOCGIFFLAGS, &request) < 0) { perror("SIOCGIFFLAGS"); return 1; }
    close(fd);
    return 0;
}

static const char *thread_base;

static void *named_thread(void *number) {
    char name[16];
    snprintf(name, sizeof name, "%s-%ld", thread_base, (long)number);
    prctl(PR_SET_NAME, name, 0, 0, 0);
    /* Long enough to be seen running under its new name. */
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
    return NULL;
}

static int threads(const char *base, long n) {
    pthread_t ids[16];
    if (n < 1 || n > 16) return usage();
    thread_base = base;
    for (long i = 0; i < n; i++)
        if (pthread_create(&ids[i], NULL, named_thread, (void *)(i + 1)) != 0) return 1;
    for (long i = 0; i < n; i++) pthread_join(ids[i], NULL);
    return 0;
}

/* A one-shot POSIX timer queues SIGUSR2 (blocked, then waited for). */
static int timer_signal(void) {
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    sigprocmask(SIG_BLOCK, &usr2, NULL);
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGUSR2;
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &event, &timer) < 0) { perror("timer_create"); return 1; }
    struct itimerspec when = {{0, 0}, {0, 10 * 1000 * 1000}};
    if (timer_settime(timer, 0, &when, NULL) < 0) { perror("timer_settime"); return 1; }
    siginfo_t info;
    if (sigwaitinfo(&usr2, &info) != SIGUSR2 || info.si_code != SI_TIMER) return 1;
    timer_delete(timer);
    return 0;
}

static void never_runs(int sig) { (void)sig; }

/* The kernel cannot write SIGUSR1's frame on an unwritable alternate stack,
 * so it forces SIGSEGV (force_sigsegv); the child dies of it. */
static int forced_segv(void) {
    pid_t child = fork();
    if (child < 0) { perror("fork"); return 1; }
    if (child == 0) {
        void *unwritable = mmap(NULL, 65536, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        stack_t alternate = {.ss_sp = unwritable, .ss_size = 65536, .ss_flags = 0};
        if (unwritable == MAP_FAILED || sigaltstack(&alternate, NULL) < 0) _exit(3);
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = never_runs;
        action.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR1, &action, NULL);
        raise(SIGUSR1);
        _exit(4);
    }
    int status;
    if (waitpid(child, &status, 0) != child) return 1;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    prctl(PR_SET_NAME, argv[1], 0, 0, 0);
    if (strcmp(argv[2], "connect") == 0 && argc == 4) return send_to(SOCK_STREAM, "127.0.0.1", atoi(argv[3]));
    if (strcmp(argv[2], "udp") == 0 && argc == 5) return send_to(SOCK_DGRAM, argv[3], atoi(argv[4]));
    if (strcmp(argv[2], "spin") == 0 && argc == 4) return spin(atof(argv[3]));
    if (strcmp(argv[2], "send") == 0 && argc == 5) return send_bytes(atoi(argv[3]), atoi(argv[4]));
    if (strcmp(argv[2], "sockops") == 0 && argc == 4) return sockops(atoi(argv[3]));
    if (strcmp(argv[2], "open") == 0 && argc == 4) return open_files(argv[3]);
    if (strcmp(argv[2], "chdirs") == 0 && argc == 4) return failing_chdirs_then_wait(atoi(argv[3]));
    if (strcmp(argv[2], "getppid") == 0 && argc == 4) return getppid_both(atol(argv[3]));
    if (strcmp(argv[2], "family") == 0 && argc == 4) return families(argv[3]);
    if (strcmp(argv[2], "ifflags") == 0 && argc == 4) return interface_flags(argv[3]);
    if (strcmp(argv[2], "threads") == 0 && argc == 4) return threads(argv[1], atol(argv[3]));
    if (strcmp(argv[2], "sigqueue") == 0 && argc == 3) return timer_signal();
    if (strcmp(argv[2], "segv") == 0 && argc == 3) return forced_segv();
    return usage();
}
