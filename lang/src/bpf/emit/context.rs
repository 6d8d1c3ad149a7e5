//! Probe context, memory reads and the builtins usable in kernel probes.

use super::*;
use crate::bpf::facts::{CompatCheck, TS_COMPAT, TaskChain};
use crate::ir::identity::{self, Identity};

/// Stack-passed arguments a kprobe or uprobe reads (stap's limit for a
/// function's parameters is the same order: the kernel has none past 13).
const MAX_STACK_ARGS: u32 = 16;

impl Emitter<'_> {
    pub(super) fn context_arg(&mut self, dst: Reg, index: u32) {
        if self.arg_to_r0(index) {
            self.set_result(dst, R0);
        }
    }

    /// Argument `index` into r0 (clobbers r1-r5); false, with the error
    /// reported, where this context has no such argument.
    pub(super) fn arg_to_r0(&mut self, index: u32) -> bool {
        match self.context {
            ContextStyle::U64Array { btf_typed, .. } if index < 12 => {
                self.context_slot(index, btf_typed && self.is_pointer_slot(index));
            }
            ContextStyle::PtRegs { .. } if (index as usize) < PT_REGS_ARGS.len() => {
                self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                self.push(Insn::load(DW, R0, R1, PT_REGS_ARGS[index as usize]))
            }
            ContextStyle::PtRegs { user } if index < MAX_STACK_ARGS => {
                self.stack_passed_arg(index, user)
            }
            _ => {
                self.unsupported(format!(
                    "argument {index} of this probe point in a kernel probe"
                ));
                return false;
            }
        }
        true
    }

    /// Arguments past the sixth, which the x86_64 calling convention passes
    /// on the stack: at a function's first instruction sp points at the
    /// return address, and argument 7 is the word above it. A failed read
    /// leaves 0 (the helper zeroes its buffer).
    fn stack_passed_arg(&mut self, index: u32, user: bool) {
        let offset = 8 * (index as i32 - PT_REGS_ARGS.len() as i32 + 1);
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        self.push(Insn::load(DW, R3, R1, PT_REGS_SP));
        self.push(Insn::alu64_imm(insn::ADD, R3, offset));
        self.frame_ptr(R1, FRAME_TMP);
        self.push(Insn::mov_imm(R2, 8));
        self.call(if user {
            helper::PROBE_READ_USER
        } else {
            helper::PROBE_READ_KERNEL
        });
        self.push(Insn::load(DW, R0, FP, FRAME_TMP));
    }

    /// The start of a raw `sys_enter`/`sys_exit` program: return unless
    /// the call is one the classic events would report for this program's
    /// events, that is a native (not ia32) call with one of its numbers.
    pub(super) fn syscall_filter(&mut self, bail: Label) {
        // The number first: a probe on one call returns here for every
        // other call on the system, so that path must be the short one.
        self.syscall_number();
        self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), bail);
        self.push(Insn::load(DW, R2, FP, FRAME_TMP));
        // Sorted numbers as ranges: one or two compares each.
        let mut calls = self.syscall_calls.clone();
        calls.sort_unstable();
        calls.dedup();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for nr in calls {
            match ranges.last_mut() {
                Some((_, hi)) if *hi + 1 == nr => *hi = nr,
                _ => ranges.push((nr, nr)),
            }
        }
        let wanted = self.new_label();
        for (lo, hi) in ranges {
            if lo == hi {
                self.jump(Insn::jump_imm(insn::JEQ, R2, lo as i32, 0), wanted);
                continue;
            }
            let next = self.new_label();
            self.jump(Insn::jump_imm(insn::JLT, R2, lo as i32, 0), next);
            self.jump(Insn::jump_imm(insn::JLE, R2, hi as i32, 0), wanted);
            self.bind(next);
        }
        self.goto(bail);
        self.bind(wanted);
        if let CompatCheck::Status(offset) = self.compat {
            self.call(helper::GET_CURRENT_TASK);
            self.push(Insn::mov_reg(R3, R0));
            self.push(Insn::alu64_imm(insn::ADD, R3, offset as i32));
            self.frame_ptr(R1, FRAME_TMP);
            self.push(Insn::mov_imm(R2, 4));
            self.call(helper::PROBE_READ_KERNEL);
            self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), bail);
            self.push(Insn::load(W, R0, FP, FRAME_TMP));
            self.jump(Insn::jump_imm(insn::JSET, R0, TS_COMPAT, 0), bail);
        }
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
    }

    /// The system call number into `FRAME_TMP`: `sys_enter`'s `id`
    /// argument, or at `sys_exit` the registers' `orig_ax` (as the classic
    /// event takes it); r0 is 0 when that worked.
    fn syscall_number(&mut self) {
        let ContextStyle::Syscall { exit } = self.context else {
            return;
        };
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        if exit {
            self.push(Insn::load(DW, R3, R1, 0));
            self.push(Insn::alu64_imm(insn::ADD, R3, i32::from(PT_REGS_ORIG_AX)));
            self.frame_ptr(R1, FRAME_TMP);
            self.push(Insn::mov_imm(R2, 8));
            self.call(helper::PROBE_READ_KERNEL);
        } else {
            self.push(Insn::load(DW, R0, R1, 8));
            self.push(Insn::store(DW, FP, FRAME_TMP, R0));
            self.push(Insn::mov_imm(R0, 0));
        }
    }

    /// A `syscalls:` record field into r0, read from where the classic
    /// event copies it: `__syscall_nr` is the call number, an entry's
    /// argument slot N is the Nth argument register of the task's
    /// `pt_regs`, and an exit's `ret` is `sys_exit`'s own argument. A
    /// failed read gives 0.
    pub(super) fn syscall_field(&mut self, offset: u32, size: u32, signed: bool) {
        let ContextStyle::Syscall { exit } = self.context else {
            return;
        };
        let Some(width) = size_code(size) else {
            self.unsupported(format!("a {size}-byte tracepoint field"));
            return;
        };
        let slot = offset
            .checked_sub(SYSCALL_FIRST_SLOT)
            .filter(|at| at % 8 == 0)
            .map(|at| (at / 8) as usize);
        match slot {
            _ if offset == SYSCALL_NR_FIELD => self.syscall_number(),
            Some(0) if exit => {
                self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                self.push(Insn::load(DW, R0, R1, 8));
                self.push(Insn::store(DW, FP, FRAME_TMP, R0));
            }
            Some(arg) if !exit && arg < PT_REGS_SYSCALL_ARGS.len() => {
                self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                self.push(Insn::load(DW, R3, R1, 0));
                self.push(Insn::alu64_imm(
                    insn::ADD,
                    R3,
                    i32::from(PT_REGS_SYSCALL_ARGS[arg]),
                ));
                self.frame_ptr(R1, FRAME_TMP);
                self.push(Insn::mov_imm(R2, 8));
                self.call(helper::PROBE_READ_KERNEL);
            }
            _ => {
                self.unsupported(format!("the system call record field at offset {offset}"));
                return;
            }
        }
        // The field's own width out of the 8-byte value (little-endian).
        self.push(Insn::load(width, R0, FP, FRAME_TMP));
        if signed {
            sign_extend(self, R0, size);
        }
    }

    pub(super) fn context_return(&mut self, dst: Reg) {
        if self.return_to_r0() {
            self.set_result(dst, R0);
        }
    }

    /// The return value into r0 (clobbers r1-r5); false, with the error
    /// reported, outside a return probe.
    pub(super) fn return_to_r0(&mut self) -> bool {
        match self.context {
            ContextStyle::U64Array {
                ret_index: Some(index),
                btf_typed,
            } => self.context_slot(index, btf_typed && self.is_pointer_slot(index)),
            ContextStyle::PtRegs { .. } => {
                self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                self.push(Insn::load(DW, R0, R1, PT_REGS_AX));
            }
            _ => {
                self.unsupported("$return outside a .return probe");
                return false;
            }
        }
        true
    }

    fn is_pointer_slot(&self, index: u32) -> bool {
        index >= 64 || self.pointer_slots & (1 << index) != 0
    }

    /// `ctx[index]` into r0 as a plain number. In BTF-typed contexts
    /// (fentry/fexit, tp_btf, netfilter) a direct load of a struct pointer
    /// slot gives a typed kernel pointer: the verifier then refuses
    /// arithmetic and bit operations on it, refuses the load outright for
    /// a pointer to a pointer, and takes it to be non-NULL (so `$p == 0`
    /// would be compiled away). A script value is a long, so the slot is
    /// copied with `bpf_probe_read_kernel`, whose output is a scalar.
    fn context_slot(&mut self, index: u32, typed_pointer: bool) {
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        if !typed_pointer {
            self.push(Insn::load(DW, R0, R1, (index * 8) as i16));
            return;
        }
        self.push(Insn::mov_reg(R3, R1));
        if index > 0 {
            self.push(Insn::alu64_imm(insn::ADD, R3, (index * 8) as i32));
        }
        self.frame_ptr(R1, FRAME_TMP);
        self.push(Insn::mov_imm(R2, 8));
        self.call(helper::PROBE_READ_KERNEL);
        self.push(Insn::load(DW, R0, FP, FRAME_TMP));
    }

    pub(super) fn read_memory(&mut self, dst: Reg, addr: Reg, size: u32, signed: bool, user: bool) {
        self.read_memory_or(dst, addr, size, signed, user, true);
    }

    /// [`read_memory`](Self::read_memory), where a fault either raises
    /// stap's read error (`raise`) or reads as 0 (stap's `user_int` and
    /// friends, whose `_error` forms raise).
    fn read_memory_or(
        &mut self,
        dst: Reg,
        addr: Reg,
        size: u32,
        signed: bool,
        user: bool,
        raise: bool,
    ) {
        let Some(width) = size_code(size) else {
            self.unsupported(format!("a {size}-byte memory read"));
            return;
        };
        let ok = self.new_label();
        self.frame_ptr(R1, FRAME_TMP);
        self.push(Insn::mov_imm(R2, size as i32));
        self.load_to(addr, R3);
        self.call(if user {
            helper::PROBE_READ_USER
        } else {
            helper::PROBE_READ_KERNEL
        });
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        if raise {
            let kind = if user {
                records::ERROR_USER_READ
            } else {
                records::ERROR_KERNEL_READ
            };
            self.fail(kind, Some(addr));
        } else {
            // The helper zeroes the destination on a fault, but say so.
            self.push(Insn::store_imm(DW, FP, FRAME_TMP, 0));
        }
        self.bind(ok);
        self.push(Insn::load(width, R0, FP, FRAME_TMP));
        if signed {
            sign_extend(self, R0, size);
        }
        self.set_result(dst, R0);
    }

    pub(super) fn builtin(&mut self, dst: Option<Reg>, name: &str, args: &[Reg]) {
        let long_result = |this: &mut Self| {
            if let Some(dst) = dst {
                this.set_result(dst, R0);
            }
        };
        match name {
            "pid" | "tid" => {
                self.call(helper::GET_CURRENT_PID_TGID);
                if name == "pid" {
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                } else {
                    self.push(Insn::alu64_imm(insn::LSH, R0, 32));
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                }
                long_result(self);
            }
            "uid" | "gid" => {
                self.call(helper::GET_CURRENT_UID_GID);
                if name == "gid" {
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                } else {
                    self.push(Insn::alu64_imm(insn::LSH, R0, 32));
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                }
                long_result(self);
            }
            "cpu" => {
                self.call(helper::GET_SMP_PROCESSOR_ID);
                long_result(self);
            }
            "ppid" | "euid" => {
                let chain = if name == "ppid" {
                    self.task.ppid
                } else {
                    self.task.euid
                };
                let Some(chain) = chain else {
                    self.unsupported(format!(
                        "{name}() in kernel probes (the kernel's BTF lacks the task fields it reads)"
                    ));
                    return;
                };
                self.current_task_chain(chain);
                long_result(self);
            }
            // BPF has no cycle-counter helper and this host has no hardware
            // PMU; like the host side, the monotonic clock in nanoseconds.
            "ktime_get_ns" | "local_clock_ns" | "get_cycles" => {
                self.call(helper::KTIME_GET_NS);
                long_result(self);
            }
            "addr" => {
                match &self.module.probes[self.probe as usize].kind {
                    // The entry address of the probed function, for entry
                    // and return probes alike (kprobe, kprobe_multi,
                    // fentry/fexit all implement the helper).
                    ProbeKind::KernelFunction { .. } => {
                        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                        self.call(helper::GET_FUNC_IP);
                    }
                    // A uprobe's pt_regs: the instruction pointer.
                    ProbeKind::Process { .. } => {
                        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                        self.push(Insn::load(DW, R0, R1, PT_REGS_IP));
                    }
                    _ => self.push(Insn::mov_imm(R0, 0)),
                }
                long_result(self);
            }
            "jiffies" => {
                self.call(helper::JIFFIES64);
                long_result(self);
            }
            "gettimeofday_s" | "gettimeofday_ms" | "gettimeofday_us" | "gettimeofday_ns" => {
                self.call(helper::KTIME_GET_NS);
                self.ld_map_value(
                    R1,
                    self.maps.control,
                    (maps::CONTROL_TIME_OFFSET * 8) as i32,
                );
                self.push(Insn::load(DW, R1, R1, 0));
                self.push(Insn::alu64_reg(insn::ADD, R0, R1));
                let divisor = match name {
                    "gettimeofday_s" => 1_000_000_000,
                    "gettimeofday_ms" => 1_000_000,
                    "gettimeofday_us" => 1_000,
                    _ => 1,
                };
                if divisor != 1 {
                    self.push(Insn::alu64_imm(insn::DIV, R0, divisor));
                }
                long_result(self);
            }
            "stp_pid" => {
                // Written by the session with target().
                self.ld_map_value(R1, self.maps.control, (maps::CONTROL_STP_PID * 8) as i32);
                self.push(Insn::load(DW, R0, R1, 0));
                long_result(self);
            }
            "tz_gmtoff" => {
                self.push(Insn::mov_imm(R0, -self.local_time.offset_east as i32));
                long_result(self);
            }
            "tz_name" => {
                if let Some(dst) = dst {
                    let name = self.local_time.name().to_string();
                    self.const_str(dst, &name);
                }
            }
            crate::sema::builtins::RANDOM_U32 => {
                self.call(helper::GET_PRANDOM_U32);
                long_result(self);
            }
            "target" => {
                // Written by the session before the handlers go live.
                self.ld_map_value(R1, self.maps.control, (maps::CONTROL_TARGET * 8) as i32);
                self.push(Insn::load(DW, R0, R1, 0));
                long_result(self);
            }
            "execname" => {
                let Some(dst) = dst else { return };
                // The helper NUL-pads its 16 bytes; the rest is zeroed as
                // far as a use reads it (none past 16 for a 16-byte key).
                let comm = self.n.min(16);
                self.str_addr(dst, R1);
                self.push(Insn::mov_imm(R2, comm as i32));
                self.call(helper::GET_CURRENT_COMM);
                self.zero_str_bytes(dst, comm, self.str_width(dst));
            }
            "kernel_string" | "kernel_string2" | "kernel_string_n" | "user_string"
            | "user_string_n" => {
                let Some(dst) = dst else { return };
                let user = name.starts_with("user");
                let with_n = name.ends_with("_n");
                let addr = args.first().copied();
                let limit = if with_n { args.get(1).copied() } else { None };
                let fallback = args.get(if with_n { 2 } else { 1 }).copied();
                if let Some(addr) = addr {
                    self.read_string(dst, addr, limit, fallback, user);
                }
            }
            "kernel_long" | "kernel_int" | "kernel_short" | "kernel_char" | "kernel_pointer" => {
                let (Some(dst), Some(addr)) = (dst, args.first().copied()) else {
                    return;
                };
                let (size, signed) = match name {
                    "kernel_long" => (8, true),
                    "kernel_pointer" => (8, false),
                    "kernel_int" => (4, true),
                    "kernel_short" => (2, true),
                    _ => (1, true),
                };
                self.read_memory(dst, addr, size, signed, false);
            }
            name if user_integer(name).is_some() => {
                let (Some(dst), Some(addr), Some((size, signed, raise))) =
                    (dst, args.first().copied(), user_integer(name))
                else {
                    return;
                };
                // Each width is its own read: a wider one could fault at
                // the end of a mapping where this one would not.
                self.read_memory_or(dst, addr, size, signed, true, raise);
            }
            "strlen" => {
                let (Some(dst), Some(s)) = (dst, args.first().copied()) else {
                    return;
                };
                self.scratch_addr(R1, self.scratch.temp);
                self.push(Insn::mov_imm(R2, self.n as i32));
                self.str_addr(s, R3);
                self.call(helper::PROBE_READ_KERNEL_STR);
                self.clamp_str_result();
                self.set_result(dst, R0);
            }
            "symname" | "symdata" => {
                let (Some(dst), Some(addr), Some(formats)) =
                    (dst, args.first().copied(), self.maps.formats.as_ref())
                else {
                    return;
                };
                let offset = if name == "symname" {
                    formats.symname
                } else {
                    formats.symdata
                };
                self.snprintf(dst, offset, &[addr]);
            }
            "modname" => {
                let (Some(dst), Some(addr), Some(formats)) =
                    (dst, args.first().copied(), self.maps.formats.as_ref())
                else {
                    return;
                };
                let offset = formats.symdata;
                self.snprintf(dst, offset, &[addr]);
                self.module_of_symbol(dst);
            }
            name if identity::is_identity(name) => {
                let Some(dst) = dst else { return };
                let probe = &self.module.probes[self.probe as usize];
                match identity::constant(name, probe) {
                    Some(Identity::Text(text)) => self.const_str(dst, &text),
                    Some(Identity::Long(value)) => {
                        self.push(Insn::mov_imm(R0, value as i32));
                        long_result(self);
                    }
                    None => self.probefunc_from_stack(dst),
                }
            }
            "stack" | "ustack" => {
                if let (Some(dst), Some(depth)) = (dst, args.first().copied()) {
                    self.stack_frame(dst, depth, name == "ustack");
                }
            }
            "caller_addr" => {
                if let Some(dst) = dst {
                    self.caller_addr(dst);
                }
            }
            "__lsm_ctx" => {
                if let Some(dst) = dst {
                    self.lsm_ctx(dst);
                }
            }
            super::SET_VERDICT => {
                if let Some(value) = args.first().copied() {
                    self.set_verdict(value);
                }
            }
            "warn" => {
                if let Some(message) = args.first().copied() {
                    self.message_record(records::ERROR_WARNING, message);
                }
            }
            "system" => {
                if let Some(command) = args.first().copied() {
                    self.system_record(command);
                }
            }
            "speculation" => {
                // One counter for every CPU: the old value of an atomic add.
                self.ld_map_value(
                    R1,
                    self.maps.control,
                    (maps::CONTROL_SPECULATION * 8) as i32,
                );
                self.push(Insn::mov_imm(R0, 1));
                self.push(Insn::atomic_fetch_add64(R1, 0, R0));
                self.push(Insn::alu64_imm(insn::ADD, R0, 1));
                long_result(self);
            }
            "speculate" => {
                if let [id, text] = args {
                    self.speculate_record(*id, *text);
                }
            }
            "commit" | "discard" => {
                if let Some(id) = args.first().copied() {
                    let op = if name == "commit" {
                        records::SPECULATE_COMMIT
                    } else {
                        records::SPECULATE_DISCARD
                    };
                    self.speculation_end_record(op, id);
                }
            }
            "abort" => {
                self.abort_record();
                // Always taken, as for `error` below.
                self.push(Insn::mov_imm(R0, 1));
                self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), self.epilogue);
            }
            "substr" => {
                if let (Some(dst), [s, start, len]) = (dst, args) {
                    self.substr(dst, *s, *start, *len);
                }
            }
            "stringat" => {
                if let (Some(dst), [s, pos]) = (dst, args) {
                    self.stringat(dst, *s, *pos);
                }
            }
            "isinstr" | "strpos" => {
                if let (Some(dst), [s, needle]) = (dst, args) {
                    self.find(dst, name, *s, *needle);
                }
            }
            "strtol" => {
                if let (Some(dst), [s, base]) = (dst, args) {
                    self.strtol(dst, *s, *base);
                }
            }
            "str_replace" => {
                if let (Some(dst), [s, old, new]) = (dst, args) {
                    self.str_replace(dst, *s, *old, *new);
                }
            }
            "ctime" | "tz_ctime" => {
                if let (Some(dst), [secs]) = (dst, args) {
                    self.ctime(dst, *secs, name == "tz_ctime");
                }
            }
            "backtrace" | "ubacktrace" => {
                if let Some(dst) = dst {
                    self.backtrace_value(dst, name == "ubacktrace");
                }
            }
            "cmdline_args" => {
                if let (Some(dst), [first, last, delim]) = (dst, args) {
                    self.cmdline_args(dst, *first, *last, *delim);
                }
            }
            "text_str" => {
                if let (Some(dst), [s]) = (dst, args) {
                    self.text_str(dst, *s);
                }
            }
            "text_strn" => {
                if let (Some(dst), [s, len, quoted]) = (dst, args) {
                    self.text_strn(dst, *s, *len, *quoted);
                }
            }
            "regex_match" => {
                if let (Some(dst), [s, pattern]) = (dst, args) {
                    self.regex_match(dst, *s, *pattern);
                }
            }
            "user_mode" => {
                let kind = &self.module.probes[self.probe as usize].kind;
                match kind {
                    ProbeKind::Process { .. } => self.push(Insn::mov_imm(R0, 1)),
                    // A sample's registers: user mode when CS has a
                    // nonzero privilege level (x86_64 `pt_regs.cs`).
                    ProbeKind::Perf { .. } | ProbeKind::TimerProfile => {
                        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                        self.push(Insn::load(DW, R0, R1, PT_REGS_CS));
                        self.push(Insn::alu64_imm(insn::AND, R0, 3));
                        self.push(Insn::jump_imm(insn::JEQ, R0, 0, 1));
                        self.push(Insn::mov_imm(R0, 1));
                    }
                    _ => self.push(Insn::mov_imm(R0, 0)),
                }
                long_result(self);
            }
            "task_current" => {
                self.call(helper::GET_CURRENT_TASK);
                long_result(self);
            }
            "pid2task" => {
                let Some(pid) = args.first().copied() else {
                    return;
                };
                if self.task_from_pid(name, pid) {
                    long_result(self);
                }
            }
            "pid2execname" => {
                let (Some(dst), Some(pid)) = (dst, args.first().copied()) else {
                    return;
                };
                let Some(comm) = self.task.comm else {
                    self.unsupported(
                        "pid2execname() in kernel probes (the kernel's BTF lacks task_struct.comm)"
                            .to_string(),
                    );
                    return;
                };
                if !self.task_from_pid(name, pid) {
                    return;
                }
                // No task: "" (the zero-filled slot); else its 16-byte comm.
                let width = self.n.min(16);
                self.str_addr(dst, R1);
                self.call_memset(self.n);
                let done = self.new_label();
                self.push(Insn::load(DW, R3, FP, FRAME_TMP));
                self.jump(Insn::jump_imm(insn::JEQ, R3, 0, 0), done);
                self.push(Insn::alu64_imm(insn::ADD, R3, comm as i32));
                self.str_addr(dst, R1);
                self.push(Insn::mov_imm(R2, width as i32));
                self.call(helper::PROBE_READ_KERNEL_STR);
                self.bind(done);
            }
            "error" => {
                let Some(message) = args.first().copied() else {
                    return;
                };
                self.fail_explicit(message);
            }
            _ => self.unsupported(format!("{name}() in kernel probes")),
        }
    }

    /// The task whose thread id is `pid` (0 if none) into r0 and
    /// FRAME_TMP, as a plain address: `bpf_task_from_pid` takes a
    /// reference, which is dropped at once, so the verifier turns every
    /// copy into a number. The fields read through it later go through
    /// probe reads, as for any task address. False (after an `unsupported`
    /// error naming `name`) on a kernel without the kfuncs (before 6.2).
    fn task_from_pid(&mut self, name: &str, pid: Reg) -> bool {
        let Some(lookup) = self.task.pid_lookup else {
            self.unsupported(format!(
                "{name}() in kernel probes on this kernel (it needs the bpf_task_from_pid kfunc, Linux 6.2 or later)"
            ));
            return false;
        };
        let tracing_program = match &self.module.probes[self.probe as usize].kind {
            ProbeKind::Tracepoint { .. } | ProbeKind::KernelFunction { .. } => matches!(
                self.context,
                ContextStyle::U64Array {
                    btf_typed: true,
                    ..
                }
            ),
            _ => false,
        };
        if !tracing_program {
            let mechanism = self.module.probes[self.probe as usize].kind.mechanism();
            self.unsupported(format!(
                "{name}() in a probe that runs as {mechanism}: the kernel offers bpf_task_from_pid to tracing programs only (raw tracepoints through tp_btf, fentry/fexit), not to classic tracepoints, kprobes, uprobes or perf events"
            ));
            return false;
        }
        let done = self.new_label();
        self.load_to(pid, R1);
        self.push(Insn::call_kfunc(lookup.from_pid));
        self.push(Insn::store(DW, FP, FRAME_TMP, R0));
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), done);
        self.push(Insn::mov_reg(R1, R0));
        self.push(Insn::call_kfunc(lookup.release));
        self.bind(done);
        self.push(Insn::load(DW, R0, FP, FRAME_TMP));
        true
    }

    /// `current->POINTER->VALUE` as an unsigned 4-byte value, into r0. The
    /// current task and its parent and credentials cannot fault; were a
    /// read to fail, the helper zero-fills and the result is 0.
    fn current_task_chain(&mut self, chain: TaskChain) {
        self.call(helper::GET_CURRENT_TASK);
        for (offset, size) in [(chain.pointer, 8), (chain.value, 4)] {
            self.push(Insn::mov_reg(R3, R0));
            self.push(Insn::alu64_imm(insn::ADD, R3, offset as i32));
            self.push(Insn::store_imm(DW, FP, FRAME_TMP, 0));
            self.frame_ptr(R1, FRAME_TMP);
            self.push(Insn::mov_imm(R2, size));
            self.call(helper::PROBE_READ_KERNEL);
            let width = if size == 8 { DW } else { W };
            self.push(Insn::load(width, R0, FP, FRAME_TMP));
        }
    }

    /// Rewrites `%pS` text in string `dst` ("tcp_v4_rcv+0x91/0x1c0" or
    /// "nf_hook+0x10/0x80 [nf_tables]", possibly with a build id after the
    /// module) to the module name, or "kernel" when there is none: stap's
    /// `modname()`. The name is built in the zeroed work space (so it comes
    /// NUL-padded) with bounded byte loops, then copied over `dst`.
    fn module_of_symbol(&mut self, dst: Reg) {
        let n = self.n as i32;
        let temp = self.scratch.temp;
        let scan = self.new_label();
        let found = self.new_label();
        let copy = self.new_label();
        let finish = self.new_label();
        let core = self.new_label();
        let done = self.new_label();
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.str_addr(dst, R1);
        // r3: read index, looking for '['.
        self.push(Insn::mov_imm(R3, 0));
        self.bind(scan);
        self.jump(Insn::jump_imm(insn::JGE, R3, n, 0), core);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(B, R4, R4, 0));
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), core);
        self.jump(Insn::jump_imm(insn::JEQ, R4, b'[' as i32, 0), found);
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.goto(scan);
        self.bind(found);
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        // Through map memory, so the verifier forgets where '[' was and
        // checks the copy loop once, not once per position.
        self.scratch_addr(R2, temp + self.stride);
        self.push(Insn::store(DW, R2, 0, R3));
        self.push(Insn::load(DW, R3, R2, 0));
        // r5: write index into the work space.
        self.push(Insn::mov_imm(R5, 0));
        self.bind(copy);
        self.jump(Insn::jump_imm(insn::JGE, R3, n, 0), finish);
        self.jump(Insn::jump_imm(insn::JGE, R5, n - 1, 0), finish);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(B, R4, R4, 0));
        for end in [0, b']' as i32, b' ' as i32] {
            self.jump(Insn::jump_imm(insn::JEQ, R4, end, 0), finish);
        }
        self.scratch_addr(R0, temp);
        self.push(Insn::alu64_reg(insn::ADD, R0, R5));
        self.push(Insn::store(B, R0, 0, R4));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.push(Insn::alu64_imm(insn::ADD, R5, 1));
        self.goto(copy);
        self.bind(finish);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
        self.goto(done);
        self.bind(core);
        self.const_str(dst, "kernel");
        self.bind(done);
    }
}

/// `(bytes, signed, raises on fault)` of a `user_<type>[_error]` read, as
/// stap's uconversions tapset names them; `None` for any other name.
fn user_integer(name: &str) -> Option<(u32, bool, bool)> {
    let rest = name.strip_prefix("user_")?;
    let (ty, raise) = match rest.strip_suffix("_error") {
        Some(ty) => (ty, true),
        None => (rest, false),
    };
    let (size, signed) = match ty {
        "char" | "int8" => (1, true),
        "uint8" => (1, false),
        "short" | "int16" => (2, true),
        "ushort" | "uint16" => (2, false),
        "int" | "int32" => (4, true),
        "uint32" => (4, false),
        "long" | "int64" => (8, true),
        "ulong" | "uint64" => (8, false),
        _ => return None,
    };
    Some((size, signed, raise))
}
