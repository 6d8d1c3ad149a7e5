// The floor: the cheapest count-by-key tracer we can write by hand, to
// measure stap-rs's emitter and loader against. Raw BPF instructions written
// here (not produced by stap-rs), loaded with bpf(2) directly: one hash map,
// one raw tracepoint program on sys_enter (or kfree_skb), attached with
// BPF_RAW_TRACEPOINT_OPEN. Prints READY once attached, then waits for
// SIGINT/SIGTERM.
//   floor id        key = syscall id (ctx[1]), like `c[$id]++`
//   floor comm      key = current comm (16 bytes), like `c[execname()]++`
//   floor location  on kfree_skb, key = the drop location (ctx[1]), like
//                   `c[$location]++`
#include <linux/bpf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

#define INSN(c, d, s, o, i) ((struct bpf_insn){ (c), (d), (s), (o), (i) })
#define MOV64_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD64_IMM(d, i) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define LDX_DW(d, s, o) INSN(BPF_LDX | BPF_MEM | BPF_DW, d, s, o, 0)
#define STX_DW(d, s, o) INSN(BPF_STX | BPF_MEM | BPF_DW, d, s, o, 0)
#define ST_DW(d, o, i) INSN(BPF_ST | BPF_MEM | BPF_DW, d, 0, o, i)
#define ATOMIC_ADD_DW(d, s, o) INSN(BPF_STX | BPF_ATOMIC | BPF_DW, d, s, o, BPF_ADD)
#define JEQ_IMM(d, i, o) INSN(BPF_JMP | BPF_JEQ | BPF_K, d, 0, o, i)
#define JA(o) INSN(BPF_JMP | BPF_JA, 0, 0, o, 0)
#define CALL(f) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
// ld_imm64 of a map fd takes two instruction slots.
#define LD_MAP(d, fd) INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd), INSN(0, 0, 0, 0, 0)

static void on_signal(int sig)
{
	(void)sig;
}

int main(int argc, char **argv)
{
	int comm = argc > 1 && strcmp(argv[1], "comm") == 0;
	int location = argc > 1 && strcmp(argv[1], "location") == 0;
	int key_size = comm ? 16 : 8;
	// Key at fp-16 (16 bytes room), value at fp-24.
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_type = BPF_MAP_TYPE_HASH;
	attr.key_size = key_size;
	attr.value_size = 8;
	attr.max_entries = 10240;
	int map = sys_bpf(BPF_MAP_CREATE, &attr);
	if (map < 0) {
		perror("BPF_MAP_CREATE");
		return 1;
	}

	struct bpf_insn key_id[] = {
		LDX_DW(BPF_REG_1, BPF_REG_1, 8), // ctx[1]: syscall id or location
		STX_DW(BPF_REG_10, BPF_REG_1, -16),
		MOV64_IMM(BPF_REG_1, 0), // pad the insn count to match comm
	};
	struct bpf_insn key_comm[] = {
		MOV64_REG(BPF_REG_1, BPF_REG_10),
		ADD64_IMM(BPF_REG_1, -16),
		MOV64_IMM(BPF_REG_2, 16),
		CALL(BPF_FUNC_get_current_comm),
	};
	struct bpf_insn body[] = {
		MOV64_REG(BPF_REG_2, BPF_REG_10),
		ADD64_IMM(BPF_REG_2, -16),
		LD_MAP(BPF_REG_1, map),
		CALL(BPF_FUNC_map_lookup_elem),
		JEQ_IMM(BPF_REG_0, 0, 3),
		MOV64_IMM(BPF_REG_1, 1),
		ATOMIC_ADD_DW(BPF_REG_0, BPF_REG_1, 0),
		JA(9),
		// First sight of this key: insert 1.
		ST_DW(BPF_REG_10, -24, 1),
		LD_MAP(BPF_REG_1, map),
		MOV64_REG(BPF_REG_2, BPF_REG_10),
		ADD64_IMM(BPF_REG_2, -16),
		MOV64_REG(BPF_REG_3, BPF_REG_10),
		ADD64_IMM(BPF_REG_3, -24),
		MOV64_IMM(BPF_REG_4, BPF_ANY),
		CALL(BPF_FUNC_map_update_elem),
		MOV64_IMM(BPF_REG_0, 0),
		EXIT(),
	};
	struct bpf_insn prog[64];
	size_t n = 0;
	if (comm) {
		memcpy(prog, key_comm, sizeof(key_comm));
		n = sizeof(key_comm) / sizeof(prog[0]);
	} else {
		memcpy(prog, key_id, sizeof(key_id));
		n = sizeof(key_id) / sizeof(prog[0]);
	}
	memcpy(prog + n, body, sizeof(body));
	n += sizeof(body) / sizeof(prog[0]);

	static char log[65536];
	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_RAW_TRACEPOINT;
	attr.insns = (unsigned long)prog;
	attr.insn_cnt = n;
	attr.license = (unsigned long)"GPL";
	attr.log_buf = (unsigned long)log;
	attr.log_size = sizeof(log);
	attr.log_level = 1;
	strcpy(attr.prog_name, "floor");
	int fd = sys_bpf(BPF_PROG_LOAD, &attr);
	if (fd < 0) {
		perror("BPF_PROG_LOAD");
		fputs(log, stderr);
		return 1;
	}
	memset(&attr, 0, sizeof(attr));
	attr.raw_tracepoint.name = (unsigned long)(location ? "kfree_skb" : "sys_enter");
	attr.raw_tracepoint.prog_fd = fd;
	if (sys_bpf(BPF_RAW_TRACEPOINT_OPEN, &attr) < 0) {
		perror("BPF_RAW_TRACEPOINT_OPEN");
		return 1;
	}
	// Block the stop signals before saying READY, so that one arriving
	// right after READY is not lost before we wait for it.
	sigset_t stop, none;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	puts("READY");
	fflush(stdout);
	sigemptyset(&none);
	sigsuspend(&none);
	return 0;
}
