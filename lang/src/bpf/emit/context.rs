//! Probe context, memory reads and the builtins usable in kernel probes.

use super::*;

impl Emitter<'_> {
    pub(super) fn context_arg(&mut self, dst: Reg, index: u32) {
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        match self.context {
            ContextStyle::U64Array { .. } if index < 12 => {
                self.push(Insn::load(DW, R0, R1, (index * 8) as i16))
            }
            ContextStyle::PtRegs if (index as usize) < PT_REGS_ARGS.len() => {
                self.push(Insn::load(DW, R0, R1, PT_REGS_ARGS[index as usize]))
            }
            _ => {
                self.unsupported(format!(
                    "argument {index} of this probe point in a kernel probe"
                ));
                return;
            }
        }
        self.set_result(dst, R0);
    }

    pub(super) fn read_memory(&mut self, dst: Reg, addr: Reg, size: u32, signed: bool, user: bool) {
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
        let kind = if user {
            records::ERROR_USER_READ
        } else {
            records::ERROR_KERNEL_READ
        };
        self.error_record(kind, Some(addr));
        self.goto(self.epilogue);
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
            "ktime_get_ns" | "local_clock_ns" => {
                self.call(helper::KTIME_GET_NS);
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
            "target" => {
                // Written by the session before the handlers go live.
                self.ld_map_value(R1, self.maps.control, (maps::CONTROL_TARGET * 8) as i32);
                self.push(Insn::load(DW, R0, R1, 0));
                long_result(self);
            }
            "execname" => {
                let Some(dst) = dst else { return };
                self.str_addr(dst, R1);
                self.call_memset(self.n);
                self.str_addr(dst, R1);
                self.push(Insn::mov_imm(R2, self.n.min(16) as i32));
                self.call(helper::GET_CURRENT_COMM);
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
            "kernel_long" | "kernel_int" | "kernel_short" | "kernel_char" | "kernel_pointer"
            | "user_long" | "user_int" => {
                let (Some(dst), Some(addr)) = (dst, args.first().copied()) else {
                    return;
                };
                let (size, signed) = match name {
                    "kernel_long" | "user_long" => (8, true),
                    "kernel_pointer" => (8, false),
                    "kernel_int" | "user_int" => (4, true),
                    "kernel_short" => (2, true),
                    _ => (1, true),
                };
                self.read_memory(dst, addr, size, signed, name.starts_with("user"));
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
            "error" => {
                let Some(message) = args.first().copied() else {
                    return;
                };
                self.explicit_error(message);
                // A conditional jump keeps the rest of the block reachable
                // in the verifier's CFG check; it is always taken.
                self.push(Insn::mov_imm(R0, 1));
                self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), self.epilogue);
            }
            _ => self.unsupported(format!("{name}() in kernel probes")),
        }
    }
}
