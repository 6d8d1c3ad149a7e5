//! String built-ins in kernel probes, as bounded loops over the
//! NUL-padded string slots: `substr`, `stringat`, `isinstr`/`strpos` (with
//! a literal needle) and `strtol`. Each mirrors the host built-in of the
//! same name byte for byte.

use super::*;

/// The longest literal needle `isinstr`/`strpos` compare inline: the
/// verifier walks every start position, each with one compare per byte.
const MAX_NEEDLE: usize = 64;

impl Emitter<'_> {
    /// The text of string register `reg` when its only definition is a
    /// string constant (a literal argument).
    fn literal(&self, reg: Reg) -> Option<&str> {
        let mut found = None;
        for inst in self.function.blocks.iter().flat_map(|b| &b.insts) {
            let defines = match &inst.op {
                Op::ConstStr { dst, id } if *dst == reg => {
                    found = Some(*id);
                    false
                }
                op => regalloc::op_defs(op).contains(&reg),
            };
            if defines {
                return None;
            }
        }
        found.map(|id| self.module.string(id))
    }

    /// `substr(s, start, len)`: as stap, "" unless `0 <= start <
    /// strlen(s)`; then at most `len` bytes from `start`.
    pub(super) fn substr(&mut self, dst: Reg, s: Reg, start: Reg, len: Reg) {
        let n = self.n as i32;
        let temp = self.scratch.temp;
        let done = self.new_label();
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        // r4 = start: past the slot (or negative) gives "".
        self.load_to(start, R4);
        self.jump(Insn::jump_imm(insn::JSLT, R4, 0, 0), done);
        self.jump(Insn::jump_imm(insn::JSGE, R4, n, 0), done);
        // r2 = len + 1 bytes with the NUL, clamped to [1, n - start].
        self.load_to(len, R2);
        self.jump(Insn::jump_imm(insn::JSLT, R2, 0, 0), done);
        self.push(Insn::jump_imm(insn::JSLT, R2, n, 1));
        self.push(Insn::mov_imm(R2, n));
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.push(Insn::mov_imm(R5, n));
        self.push(Insn::alu64_reg(insn::SUB, R5, R4));
        self.push(Insn::jump_reg(insn::JLE, R2, R5, 1));
        self.push(Insn::mov_reg(R2, R5));
        // Past the string's end the slot holds NULs, so the copy is "".
        self.str_addr(s, R3);
        self.push(Insn::alu64_reg(insn::ADD, R3, R4));
        self.scratch_addr(R1, temp);
        self.call(helper::PROBE_READ_KERNEL_STR);
        self.bind(done);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }

    /// `stringat(s, pos)`: the byte at `pos`, or stap's "Position out of
    /// bounds" error when `pos` is not inside the string.
    pub(super) fn stringat(&mut self, dst: Reg, s: Reg, pos: Reg) {
        let ok = self.new_label();
        let bad = self.new_label();
        self.load_to(pos, R3);
        self.jump(Insn::jump_imm(insn::JSLT, R3, 0, 0), bad);
        self.jump(Insn::jump_imm(insn::JSGE, R3, self.n as i32, 0), bad);
        self.str_addr(s, R1);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::load(B, R0, R1, 0));
        // The slot is NUL-padded: a NUL here is at or past the end.
        self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), ok);
        self.bind(bad);
        self.fail(records::ERROR_POSITION, None);
        self.bind(ok);
        self.set_result(dst, R0);
    }

    /// `isinstr(s, needle)` (1 or 0) and `strpos(s, needle)` (the first
    /// offset, or -1) with a literal needle: at each start position up to
    /// the string's end, the needle's bytes compared inline.
    pub(super) fn find(&mut self, dst: Reg, name: &str, s: Reg, needle: Reg) {
        let Some(text) = self.literal(needle).map(|t| t.as_bytes().to_vec()) else {
            self.unsupported(format!(
                "{name}() in a kernel probe with a second argument that is not a literal string"
            ));
            return;
        };
        let text = &text[..text.iter().position(|b| *b == 0).unwrap_or(text.len())];
        let (hit, miss) = if name == "isinstr" { (1, 0) } else { (0, -1) };
        if text.is_empty() {
            self.push(Insn::mov_imm(R0, hit));
            self.set_result(dst, R0);
            return;
        }
        if text.len() > MAX_NEEDLE || text.len() >= self.n as usize {
            self.unsupported(format!(
                "{name}() in a kernel probe with a literal longer than {MAX_NEEDLE} bytes"
            ));
            return;
        }
        let last_start = self.n as i32 - 1 - text.len() as i32;
        let top = self.new_label();
        let next = self.new_label();
        let found = self.new_label();
        let missing = self.new_label();
        let done = self.new_label();
        self.push(Insn::mov_imm(R3, 0));
        self.bind(top);
        self.jump(Insn::jump_imm(insn::JSGT, R3, last_start, 0), missing);
        self.str_addr(s, R1);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        for (j, byte) in text.iter().enumerate() {
            self.push(Insn::load(B, R4, R1, j as i16));
            self.jump(Insn::jump_imm(insn::JNE, R4, *byte as i32, 0), next);
        }
        self.goto(found);
        self.bind(next);
        self.push(Insn::load(B, R4, R1, 0));
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), missing);
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.goto(top);
        self.bind(found);
        if name == "isinstr" {
            self.push(Insn::mov_imm(R0, hit));
        } else {
            self.push(Insn::mov_reg(R0, R3));
        }
        self.goto(done);
        self.bind(missing);
        self.push(Insn::mov_imm(R0, miss));
        self.bind(done);
        self.set_result(dst, R0);
    }

    /// `strtol(s, base)` as the kernel's `simple_strtol`: an optional `-`,
    /// base 0 chooses 16 for `0x`, 8 for a leading `0`, else 10; base 16
    /// skips a `0x`; digits are read until one is not below the base.
    pub(super) fn strtol(&mut self, dst: Reg, s: Reg, base: Reg) {
        let n = self.n as i32;
        // Registers: r1 the string, r2 the base, r3 the index, r0 the
        // value, r5 the sign, r4 a byte.
        let not_neg = self.new_label();
        let chosen = self.new_label();
        let top = self.new_label();
        let letter = self.new_label();
        let upper = self.new_label();
        let digit = self.new_label();
        let end = self.new_label();
        self.load_to(base, R2);
        self.str_addr(s, R1);
        self.push(Insn::mov_imm(R0, 0));
        self.push(Insn::mov_imm(R3, 0));
        self.push(Insn::mov_imm(R5, 0));
        self.push(Insn::load(B, R4, R1, 0));
        self.jump(Insn::jump_imm(insn::JNE, R4, b'-' as i32, 0), not_neg);
        self.push(Insn::mov_imm(R5, 1));
        self.push(Insn::mov_imm(R3, 1));
        self.bind(not_neg);
        // Base 0 or 16: look for "0x" at r3 (r1 + r3 + 1 is inside the
        // slot: r3 <= 1 and the slot has at least 8 bytes).
        let auto = self.new_label();
        let hex_prefix = self.new_label();
        self.jump(Insn::jump_imm(insn::JEQ, R2, 0, 0), auto);
        self.jump(Insn::jump_imm(insn::JNE, R2, 16, 0), chosen);
        self.bind(auto);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(B, R4, R4, 0));
        let not_zero = self.new_label();
        self.jump(Insn::jump_imm(insn::JNE, R4, b'0' as i32, 0), not_zero);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(B, R4, R4, 1));
        self.push(Insn::alu64_imm(insn::OR, R4, 0x20));
        self.jump(Insn::jump_imm(insn::JEQ, R4, b'x' as i32, 0), hex_prefix);
        // "0" without "x": octal under base 0; a plain digit under 16.
        self.jump(Insn::jump_imm(insn::JNE, R2, 0, 0), chosen);
        self.push(Insn::mov_imm(R2, 8));
        self.goto(chosen);
        self.bind(hex_prefix);
        self.push(Insn::mov_imm(R2, 16));
        self.push(Insn::alu64_imm(insn::ADD, R3, 2));
        self.goto(chosen);
        self.bind(not_zero);
        self.jump(Insn::jump_imm(insn::JNE, R2, 0, 0), chosen);
        self.push(Insn::mov_imm(R2, 10));
        self.bind(chosen);
        self.bind(top);
        self.jump(Insn::jump_imm(insn::JSGE, R3, n, 0), end);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(B, R4, R4, 0));
        self.jump(Insn::jump_imm(insn::JGT, R4, b'9' as i32, 0), letter);
        self.jump(Insn::jump_imm(insn::JLT, R4, b'0' as i32, 0), end);
        self.push(Insn::alu64_imm(insn::SUB, R4, b'0' as i32));
        self.goto(digit);
        self.bind(letter);
        self.jump(Insn::jump_imm(insn::JLT, R4, b'a' as i32, 0), upper);
        self.jump(Insn::jump_imm(insn::JGT, R4, b'z' as i32, 0), end);
        self.push(Insn::alu64_imm(insn::SUB, R4, b'a' as i32 - 10));
        self.goto(digit);
        self.bind(upper);
        self.jump(Insn::jump_imm(insn::JLT, R4, b'A' as i32, 0), end);
        self.jump(Insn::jump_imm(insn::JGT, R4, b'Z' as i32, 0), end);
        self.push(Insn::alu64_imm(insn::SUB, R4, b'A' as i32 - 10));
        self.bind(digit);
        self.jump(Insn::jump_reg(insn::JGE, R4, R2, 0), end);
        self.push(Insn::alu64_reg(insn::MUL, R0, R2));
        self.push(Insn::alu64_reg(insn::ADD, R0, R4));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.goto(top);
        self.bind(end);
        self.push(Insn::jump_imm(insn::JEQ, R5, 0, 1));
        self.push(Insn::alu64_imm(insn::NEG, R0, 0));
        self.set_result(dst, R0);
    }
}
