//! String operations: constants, comparison, concatenation, reads of
//! kernel/user strings and `bpf_snprintf`. Results go through a work
//! space and are copied with their NUL padding, since an operand may be
//! the destination.

use super::*;

impl Emitter<'_> {
    pub(super) fn const_str(&mut self, dst: Reg, text: &str) {
        let bytes = text.as_bytes();
        let bytes = &bytes[..bytes.len().min(self.n as usize - 1)];
        // The text in whole words (the last one NUL-padded), then zeros as
        // far as a use reads (`str_width`).
        let words = bytes.len().div_ceil(8) as u32;
        self.zero_str_bytes(dst, words * 8, self.str_width(dst));
        if bytes.is_empty() {
            return;
        }
        self.str_addr(dst, R1);
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.push2(Insn::ld_imm64(R2, i64::from_le_bytes(word)));
            self.push(Insn::store(DW, R1, (i * 8) as i16, R2));
        }
    }

    /// strcmp of two string slots, then `op` against 0; the result is
    /// left in r0.
    ///
    /// The verifier walks the loop once per round and keeps each round's
    /// undecided branches pending (at most 8192 in a whole program), so a
    /// loop of MAXSTRINGLEN byte rounds, two branches each, inside a
    /// script's own loop (`__sys_argv` tests each argument) was rejected
    /// as "too complex". The rounds are words: a word that differs is
    /// searched bytewise for the first difference, a word that does not
    /// ends the compare when it holds the NUL. With a literal operand the
    /// rounds stop at the word holding its NUL.
    pub(super) fn str_compare(&mut self, op: CmpOp, lhs: Reg, rhs: Reg) {
        if !self.n.is_multiple_of(8) {
            self.str_compare_bytes(op, lhs, rhs);
            return;
        }
        let literal_words = [lhs, rhs]
            .iter()
            .filter_map(|reg| self.literal(*reg))
            .map(|text| text.len().min(self.n as usize - 1) as u32 / 8 + 1)
            .min();
        let end = literal_words.map_or(self.n, |words| (words * 8).min(self.n));
        let top = self.new_label();
        let word_differs = self.new_label();
        let equal = self.new_label();
        let differ = self.new_label();
        let done = self.new_label();
        self.str_addr(lhs, R1);
        self.str_addr(rhs, R2);
        self.push(Insn::mov_imm(R3, 0));
        self.bind(top);
        self.jump(Insn::jump_imm(insn::JGE, R3, end as i32, 0), equal);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(DW, R4, R4, 0));
        self.push(Insn::mov_reg(R5, R2));
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::load(DW, R5, R5, 0));
        self.jump(Insn::jump_reg(insn::JNE, R4, R5, 0), word_differs);
        // A zero byte in the word: (w - 0x01..01) & !w & 0x80..80 != 0.
        self.push2(Insn::ld_imm64(R5, 0x0101_0101_0101_0101));
        self.push(Insn::mov_reg(R0, R4));
        self.push(Insn::alu64_reg(insn::SUB, R0, R5));
        self.push(Insn::alu64_imm(insn::XOR, R4, -1));
        self.push(Insn::alu64_reg(insn::AND, R0, R4));
        self.push2(Insn::ld_imm64(R5, 0x8080_8080_8080_8080_u64 as i64));
        self.push(Insn::alu64_reg(insn::AND, R0, R5));
        self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), equal);
        self.push(Insn::alu64_imm(insn::ADD, R3, 8));
        self.goto(top);
        // The first byte that differs, unless a NUL both share comes first.
        self.bind(word_differs);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::alu64_reg(insn::ADD, R2, R3));
        for at in 0..8 {
            self.push(Insn::load(B, R4, R1, at));
            self.push(Insn::load(B, R5, R2, at));
            self.jump(Insn::jump_reg(insn::JNE, R4, R5, 0), differ);
            self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), equal);
        }
        self.bind(equal);
        self.push(Insn::mov_imm(R0, 0));
        self.goto(done);
        self.bind(differ);
        self.push(Insn::mov_reg(R0, R4));
        self.push(Insn::alu64_reg(insn::SUB, R0, R5));
        self.bind(done);
        self.push(Insn::mov_reg(R4, R0));
        self.push(Insn::mov_imm(R0, 1));
        self.push(Insn::jump_imm(jump_op(op), R4, 0, 1));
        self.push(Insn::mov_imm(R0, 0));
    }

    /// `str_compare` a byte per round, for a MAXSTRINGLEN that is not a
    /// whole number of words.
    fn str_compare_bytes(&mut self, op: CmpOp, lhs: Reg, rhs: Reg) {
        let top = self.new_label();
        let differ = self.new_label();
        let done = self.new_label();
        self.str_addr(lhs, R1);
        self.str_addr(rhs, R2);
        self.push(Insn::mov_imm(R3, 0));
        self.push(Insn::mov_imm(R0, 0));
        self.bind(top);
        self.jump(Insn::jump_imm(insn::JGE, R3, self.n as i32, 0), done);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(B, R4, R4, 0));
        self.push(Insn::mov_reg(R5, R2));
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::load(B, R5, R5, 0));
        self.jump(Insn::jump_reg(insn::JNE, R4, R5, 0), differ);
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), done);
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.goto(top);
        self.bind(differ);
        self.push(Insn::mov_reg(R0, R4));
        self.push(Insn::alu64_reg(insn::SUB, R0, R5));
        self.bind(done);
        self.push(Insn::mov_reg(R4, R0));
        self.push(Insn::mov_imm(R0, 1));
        self.push(Insn::jump_imm(jump_op(op), R4, 0, 1));
        self.push(Insn::mov_imm(R0, 0));
    }

    /// Clamps a `probe_read_*_str` result in r0 to a text length in
    /// `[0, max_string_len - 1]` (the helper counts the NUL).
    pub(super) fn clamp_str_result(&mut self) {
        self.push(Insn::jump_imm(insn::JSGT, R0, 0, 1));
        self.push(Insn::mov_imm(R0, 1));
        self.push(Insn::jump_imm(insn::JLE, R0, self.n as i32, 1));
        self.push(Insn::mov_imm(R0, self.n as i32));
        self.push(Insn::alu64_imm(insn::SUB, R0, 1));
    }

    pub(super) fn concat(&mut self, dst: Reg, lhs: Reg, rhs: Reg) {
        // Built in the work space (2 × MAXSTRINGLEN, so the verifier can
        // see the second copy stays inside), then copied to `dst`: either
        // operand may be `dst` itself.
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.scratch_addr(R1, temp);
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.str_addr(lhs, R3);
        self.call(helper::PROBE_READ_KERNEL_STR);
        self.clamp_str_result();
        self.scratch_addr(R1, temp);
        self.push(Insn::alu64_reg(insn::ADD, R1, R0));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::alu64_reg(insn::SUB, R2, R0));
        self.str_addr(rhs, R3);
        self.call(helper::PROBE_READ_KERNEL_STR);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }

    /// `kernel_string(addr [, fallback])` and friends.
    pub(super) fn read_string(
        &mut self,
        dst: Reg,
        addr: Reg,
        limit: Option<Reg>,
        fallback: Option<Reg>,
        user: bool,
    ) {
        let done = self.new_label();
        let fault = self.new_label();
        // Into the work space first: `fallback` or `addr` may live in `dst`.
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        match limit {
            Some(limit) => {
                // n bytes and the NUL, clamped to [1, MAXSTRINGLEN].
                self.load_to(limit, R2);
                self.push(Insn::alu64_imm(insn::ADD, R2, 1));
                self.push(Insn::jump_imm(insn::JSGT, R2, 0, 1));
                self.push(Insn::mov_imm(R2, 1));
                self.push(Insn::jump_imm(insn::JLE, R2, self.n as i32, 1));
                self.push(Insn::mov_imm(R2, self.n as i32));
            }
            None => self.push(Insn::mov_imm(R2, self.n as i32)),
        }
        self.scratch_addr(R1, temp);
        self.load_to(addr, R3);
        self.call(if user {
            helper::PROBE_READ_USER_STR
        } else {
            helper::PROBE_READ_KERNEL_STR
        });
        self.jump(Insn::jump_imm(insn::JSLT, R0, 0, 0), fault);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
        self.goto(done);
        self.bind(fault);
        match fallback {
            Some(fallback) => self.copy_str(dst, fallback),
            None => {
                let kind = if user {
                    records::ERROR_USER_STRING
                } else {
                    records::ERROR_KERNEL_STRING
                };
                self.fail(kind, Some(addr));
            }
        }
        self.bind(done);
    }

    /// `dst = bpf_snprintf(format at `offset` of the formats map, args)`,
    /// written to the work space first (an argument may be `dst`), then
    /// copied with its NUL padding.
    pub(super) fn snprintf(&mut self, dst: Reg, offset: u32, args: &[Reg]) {
        let Some(map) = self.maps.formats.as_ref().map(|f| f.map) else {
            return;
        };
        let data = self.scratch.sprintf;
        for (index, arg) in args.iter().enumerate() {
            let at = (index * 8) as i16;
            self.scratch_addr(R1, data);
            match self.function.reg_type(*arg) {
                ValType::Str => self.str_addr(*arg, R2),
                ValType::Long => self.load_to(*arg, R2),
            }
            self.push(Insn::store(DW, R1, at, R2));
        }
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.scratch_addr(R1, temp);
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.ld_map_value(R3, map, offset as i32);
        if args.is_empty() {
            self.push(Insn::mov_imm(R4, 0));
        } else {
            self.scratch_addr(R4, data);
        }
        self.push(Insn::mov_imm(R5, 8 * args.len() as i32));
        self.call(helper::SNPRINTF);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }
}
