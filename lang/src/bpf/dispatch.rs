//! The dispatcher that runs many `syscalls:` probe programs from one raw
//! `sys_enter` or `sys_exit` link (`AttachKind::Syscall`).
//!
//! Attached one by one, N such programs would all run for every system
//! call and each return at its number check; the classic events instead
//! run only the probes of the call that was made. The dispatcher restores
//! that: it reads the call number and tail-calls the program a
//! `BPF_MAP_TYPE_PROG_ARRAY` holds at that index, so one link serves every
//! probe and a call costs one dispatch and one program. Each program still
//! checks the number itself, so it is also correct attached on its own
//! (the runtime does that for a second program on the same call).

use super::insn::{self, DW, FP, Insn, R0, R1, R2, R3, R6, helper};

/// `BPF_MAP_TYPE_PROG_ARRAY`.
pub const MAP_PROG_ARRAY: u32 = 3;

/// x86_64 `struct pt_regs` offset of orig_ax, the call number at exit.
const PT_REGS_ORIG_AX: i32 = 120;

/// The dispatcher for `sys_enter` (or `sys_exit` with `exit`), encoded,
/// and the index of its `ld_imm64` of the program array's fd (map
/// relocation, `BPF_PSEUDO_MAP_FD`). Load it as a raw tracepoint program.
pub fn dispatcher(exit: bool) -> (Vec<u64>, usize) {
    let mut code = vec![Insn::mov_reg(R6, R1)];
    if exit {
        // The number is regs->orig_ax, read with the probe helper (a raw
        // tracepoint's arguments are plain numbers to the verifier).
        let after_read = [
            Insn::load(DW, R3, R1, 0),
            Insn::alu64_imm(insn::ADD, R3, PT_REGS_ORIG_AX),
            Insn::mov_reg(R1, FP),
            Insn::alu64_imm(insn::ADD, R1, -8),
            Insn::mov_imm(R2, 8),
            Insn::call(helper::PROBE_READ_KERNEL),
        ];
        code.extend(after_read);
        // On a failed read, straight to the exit: past the load, the
        // context move, the two-slot map load and the tail call.
        code.push(Insn::jump_imm(insn::JNE, R0, 0, 5));
        code.push(Insn::load(DW, R3, FP, -8));
    } else {
        code.push(Insn::load(DW, R3, R1, 8));
    }
    code.push(Insn::mov_reg(R1, R6));
    let map_at = code.len();
    code.extend(Insn::ld_map_fd(R2));
    code.push(Insn::call(helper::TAIL_CALL));
    // No program at that index: nothing to do.
    code.push(Insn::mov_imm(R0, 0));
    code.push(Insn::exit());
    (code.into_iter().map(Insn::encode).collect(), map_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_read_skips_to_the_exit() {
        let (words, map_at) = dispatcher(true);
        let code: Vec<Insn> = words.iter().map(|w| Insn::decode(*w)).collect();
        let branch = code
            .iter()
            .position(|i| i.is_jump() && i.off != 0)
            .expect("the read check");
        let target = branch + 1 + code[branch].off as usize;
        assert_eq!(target, code.len() - 2, "lands on r0 = 0");
        assert_eq!(code[map_at].src, insn::PSEUDO_MAP_FD);
        let (_, enter_map_at) = dispatcher(false);
        assert_eq!(enter_map_at, 3);
    }
}
