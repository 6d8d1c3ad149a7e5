//! String built-ins in kernel probes, as bounded loops over the
//! NUL-padded string slots: `substr`, `stringat`, `isinstr`/`strpos` (with
//! a literal needle), `str_replace` (a literal search string), `text_str`,
//! `strtol` and `=~` (a literal pattern's DFA, built by `bpf::regex`).
//! Each mirrors the host built-in of the same name byte for byte.
//!
//! The verifier walks a plain loop once per iteration and keeps every
//! undecided branch of the walk pending (at most 8192), so a loop over
//! MAXSTRINGLEN bytes must branch little: `=~` walks its table with no
//! branch but one per 8 bytes. `str_replace` and `text_str` branch on
//! every byte, so their body is a `bpf_loop` callback (kernel 5.17+) that
//! the verifier checks as one function: all its running state lives in
//! the scratch map, where it is an unknown the checks bound, so the
//! callback's states converge at once.

use super::*;
use crate::bpf::regex;

/// The longest literal needle `isinstr`/`strpos`/`str_replace` compare
/// inline, one compare per byte in their loop's callback.
const MAX_NEEDLE: usize = 64;

/// The text of string register `reg` of `function` when its only
/// definition is a string constant (a literal argument).
pub(in crate::bpf) fn literal<'m>(
    module: &'m Module,
    function: &Function,
    reg: Reg,
) -> Option<&'m str> {
    let mut found = None;
    for inst in function.blocks.iter().flat_map(|b| &b.insts) {
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
    found.map(|id| module.string(id))
}

impl Emitter<'_> {
    pub(super) fn literal(&self, reg: Reg) -> Option<&str> {
        literal(self.module, self.function, reg)
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

    /// The literal string in `needle` up to its NUL, or an `unsupported`
    /// error naming `name`: the needle is compared inline, so it must be
    /// known at compile time.
    fn literal_needle(&mut self, name: &str, needle: Reg) -> Option<Vec<u8>> {
        let Some(text) = self.literal(needle).map(|t| t.as_bytes().to_vec()) else {
            self.unsupported(format!(
                "{name}() in a kernel probe with a second argument that is not a literal string"
            ));
            return None;
        };
        let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
        Some(text[..end].to_vec())
    }

    /// Whether `needle` is short enough for the inline compare; an
    /// `unsupported` error naming `name` when it is not.
    fn needle_fits(&mut self, name: &str, needle: &[u8]) -> bool {
        if needle.len() > MAX_NEEDLE || needle.len() >= self.n as usize - 1 {
            self.unsupported(format!(
                "{name}() in a kernel probe with a literal longer than {MAX_NEEDLE} bytes"
            ));
            return false;
        }
        true
    }

    /// `isinstr(s, needle)` (1 or 0) and `strpos(s, needle)` (the first
    /// offset, or -1) with a literal needle: a `bpf_loop` over the start
    /// positions up to the string's end, the needle's bytes compared
    /// inline; the answer is left in the loop's first slot.
    pub(super) fn find(&mut self, dst: Reg, name: &str, s: Reg, needle: Reg) {
        let Some(text) = self.literal_needle(name, needle) else {
            return;
        };
        let strpos = name == "strpos";
        if text.is_empty() {
            self.push(Insn::mov_imm(R0, if strpos { 0 } else { 1 }));
            self.set_result(dst, R0);
            return;
        }
        if !self.needle_fits(name, &text) {
            return;
        }
        let miss = if strpos { -1 } else { 0 };
        if self.start_loop(
            ByteLoop::Find {
                s,
                needle: text,
                strpos,
            },
            miss,
        ) {
            self.scratch_addr(R1, self.loop_slot(0));
            self.push(Insn::load(DW, R0, R1, 0));
            self.set_result(dst, R0);
        }
    }

    /// One round of `isinstr`/`strpos`: does the needle start at index i
    /// (slot 1)? r2 the index, r1 and r4 the text, r5 a byte.
    fn find_round(&mut self, s: Reg, needle: &[u8], strpos: bool, stop: Label, more: Label) {
        let last = self.n as i32 - 1;
        let next = self.new_label();
        self.scratch_addr(R1, self.loop_slot(1));
        self.push(Insn::load(DW, R2, R1, 0));
        self.jump(
            Insn::jump_imm(insn::JGT, R2, last - needle.len() as i32, 0),
            stop,
        );
        self.str_addr(s, R4);
        self.push(Insn::alu64_reg(insn::ADD, R4, R2));
        self.push(Insn::load(B, R5, R4, 0));
        self.jump(Insn::jump_imm(insn::JEQ, R5, 0, 0), stop);
        for (j, byte) in needle.iter().enumerate() {
            self.push(Insn::load(B, R5, R4, j as i16));
            self.jump(Insn::jump_imm(insn::JNE, R5, *byte as i32, 0), next);
        }
        if strpos {
            self.push(Insn::store(DW, R1, 8, R2));
        } else {
            self.push(Insn::store_imm(DW, R1, 8, 1));
        }
        self.goto(stop);
        self.bind(next);
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.push(Insn::store(DW, R1, 0, R2));
        self.goto(more);
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

    /// `s =~ pattern` (1 or 0) with a literal pattern: the DFA table walks
    /// the string and its NUL (`bpf::regex`), 8 bytes per round, stopping
    /// after a round that read a NUL (the state no longer changes).
    /// Registers: r1 the string, r2 the index, r3 the state, r4 the table,
    /// r0 and r5 per byte.
    pub(super) fn regex_match(&mut self, dst: Reg, s: Reg, pattern: Reg) {
        let Some(text) = self.literal(pattern).map(str::to_string) else {
            self.unsupported("=~ in a kernel probe with a pattern that is not a literal string");
            return;
        };
        let formats = self.maps.formats.as_ref();
        let found = formats.and_then(|f| Some((f.map, *f.regexes.get(&text)?)));
        let Some((map, place)) = found else {
            // compile.rs reported why the pattern has no table.
            return;
        };
        let top = self.new_label();
        let end = self.new_label();
        self.str_addr(s, R1);
        self.push(Insn::mov_imm(R2, 0));
        self.push(Insn::mov_imm(R3, place.start as i32));
        self.ld_map_value(R4, map, place.offset as i32);
        self.bind(top);
        // The index is a multiple of 8 below MAXSTRINGLEN, so a round's
        // bytes stay inside the slot (a multiple of 8 bytes long).
        self.jump(Insn::jump_imm(insn::JGE, R2, self.n as i32, 0), end);
        for k in 0..8 {
            self.push(Insn::mov_reg(R5, R1));
            self.push(Insn::alu64_reg(insn::ADD, R5, R2));
            self.push(Insn::load(B, R5, R5, k));
            self.push(Insn::mov_reg(R0, R4));
            self.push(Insn::alu64_reg(insn::ADD, R0, R5));
            self.push(Insn::load(B, R0, R0, 0));
            self.push(Insn::mov_reg(R5, R3));
            self.push(Insn::alu64_imm(insn::MUL, R5, place.row as i32));
            self.push(Insn::alu64_reg(insn::ADD, R5, R0));
            self.push(Insn::alu64_imm(insn::AND, R5, place.mask as i32));
            self.push(Insn::alu64_imm(insn::LSH, R5, 1));
            self.push(Insn::alu64_reg(insn::ADD, R5, R4));
            self.push(Insn::load(H, R3, R5, regex::CLASS_BYTES as i16));
        }
        self.push(Insn::mov_reg(R5, R1));
        self.push(Insn::alu64_reg(insn::ADD, R5, R2));
        self.push(Insn::load(B, R5, R5, 7));
        self.jump(Insn::jump_imm(insn::JEQ, R5, 0, 0), end);
        self.push(Insn::alu64_imm(insn::ADD, R2, 8));
        self.goto(top);
        self.bind(end);
        self.push(Insn::mov_imm(R0, 0));
        self.push(Insn::jump_imm(insn::JNE, R3, regex::MATCH as i32, 1));
        self.push(Insn::mov_imm(R0, 1));
        self.set_result(dst, R0);
    }

    /// Where a string loop keeps its running values in the work space,
    /// past the text it builds there (at most MAXSTRINGLEN bytes from its
    /// start): the result's length (or the answer), then the input index.
    fn loop_slot(&self, slot: u32) -> u32 {
        self.scratch.temp + 2 * self.stride - 8 - 8 * slot
    }

    /// Runs `body` as a `bpf_loop` callback over at most MAXSTRINGLEN - 1
    /// rounds, with the index (slot 1) at 0 and slot 0 at `first`; the
    /// callback ends the loop early by returning 1. False when the work
    /// space is too small for the slots (said as unsupported).
    fn start_loop(&mut self, body: ByteLoop, first: i32) -> bool {
        if self.stride < 24 {
            self.unsupported("this string function in a kernel probe with MAXSTRINGLEN below 24");
            return false;
        }
        self.scratch_addr(R1, self.loop_slot(0));
        self.push(Insn::store_imm(DW, R1, 0, first));
        self.push(Insn::store_imm(DW, R1, -8, 0));
        self.call_loop(body);
        true
    }

    /// The `bpf_loop` call of `start_loop`, its slots already set.
    fn call_loop(&mut self, body: ByteLoop) {
        let callback = self.new_label();
        self.byte_loops.push((callback, self.span, body));
        self.push(Insn::mov_imm(R1, self.n as i32 - 1));
        self.func_fixups.push((self.insns.len(), callback));
        self.push2(Insn::ld_func(R2, 0));
        // The context is the handler's slot holding the scratch pointer.
        self.frame_ptr(R3, FRAME_SCRATCH);
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::LOOP);
    }

    /// A loop building a string in the zeroed work space from length 0
    /// (slot 0), then copied to `dst`.
    fn byte_loop(&mut self, dst: Reg, body: ByteLoop) {
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        if self.start_loop(body, 0) {
            self.str_addr(dst, R1);
            self.scratch_addr(R3, temp);
            self.call_memcpy(self.n);
        }
    }

    /// The callbacks `byte_loop` asked for: `long cb(u64 index, void
    /// *ctx)`, with the scratch pointer copied into their own frame so the
    /// usual addressing works.
    pub(super) fn emit_byte_loops(&mut self) {
        for (label, span, body) in std::mem::take(&mut self.byte_loops) {
            self.bind(label);
            self.callback_starts.push((self.insns.len(), usize::MAX));
            self.force_span(span);
            self.push(Insn::load(DW, R2, R2, 0));
            self.push(Insn::store(DW, FP, FRAME_SCRATCH, R2));
            let stop = self.new_label();
            let more = self.new_label();
            match body {
                ByteLoop::TextStr { s, bounded } => self.text_str_round(s, bounded, stop, more),
                ByteLoop::Find { s, needle, strpos } => {
                    self.find_round(s, &needle, strpos, stop, more)
                }
                ByteLoop::Cmdline { raw, delim } => self.cmdline_round(raw, &delim, stop, more),
                ByteLoop::StrReplace { s, needle, new } => {
                    self.str_replace_round(s, &needle, new, stop, more)
                }
            }
            self.bind(more);
            self.push(Insn::mov_imm(R0, 0));
            self.push(Insn::exit());
            self.bind(stop);
            self.push(Insn::mov_imm(R0, 1));
            self.push(Insn::exit());
        }
    }

    /// `str_replace(s, old, new)` with a literal `old`: every occurrence,
    /// left to right, replaced by `new` (copied by the string helper, so
    /// `new` may be any string); the result is cut at MAXSTRINGLEN - 1
    /// bytes as every string is.
    pub(super) fn str_replace(&mut self, dst: Reg, s: Reg, old: Reg, new: Reg) {
        let Some(needle) = self.literal_needle("str_replace", old) else {
            return;
        };
        // As stap: nothing to search for leaves the string as it is.
        if needle.is_empty() {
            self.copy_str(dst, s);
            return;
        }
        if !self.needle_fits("str_replace", &needle) {
            return;
        }
        self.byte_loop(dst, ByteLoop::StrReplace { s, needle, new });
    }

    /// One round of `str_replace`: at input index i (slot 1), `new` if the
    /// needle starts there, else the byte. r2 the index, r3 the length,
    /// r4 the byte, r1 and r5 addresses.
    fn str_replace_round(&mut self, s: Reg, needle: &[u8], new: Reg, stop: Label, more: Label) {
        let last = self.n as i32 - 1;
        let temp = self.scratch.temp;
        let copy_one = self.new_label();
        self.scratch_addr(R1, self.loop_slot(1));
        self.push(Insn::load(DW, R2, R1, 0));
        self.jump(Insn::jump_imm(insn::JGE, R2, last, 0), stop);
        self.str_addr(s, R1);
        self.push(Insn::alu64_reg(insn::ADD, R1, R2));
        self.push(Insn::load(B, R4, R1, 0));
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), stop);
        self.jump(
            Insn::jump_imm(insn::JGT, R2, last - needle.len() as i32, 0),
            copy_one,
        );
        for (j, byte) in needle.iter().enumerate() {
            self.push(Insn::load(B, R5, R1, j as i16));
            self.jump(Insn::jump_imm(insn::JNE, R5, *byte as i32, 0), copy_one);
        }
        // A match: `new` goes at the length, with what room is left.
        self.scratch_addr(R1, self.loop_slot(0));
        self.push(Insn::load(DW, R3, R1, 0));
        self.jump(Insn::jump_imm(insn::JGE, R3, last, 0), stop);
        self.scratch_addr(R1, temp);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::alu64_reg(insn::SUB, R2, R3));
        self.str_addr(new, R3);
        self.call(helper::PROBE_READ_KERNEL_STR);
        // r0 counts the NUL; a failed copy added nothing.
        self.push(Insn::jump_imm(insn::JSGT, R0, 0, 1));
        self.push(Insn::mov_imm(R0, 1));
        self.scratch_addr(R1, self.loop_slot(0));
        self.push(Insn::load(DW, R3, R1, 0));
        self.push(Insn::alu64_reg(insn::ADD, R3, R0));
        self.push(Insn::alu64_imm(insn::SUB, R3, 1));
        self.push(Insn::store(DW, R1, 0, R3));
        self.push(Insn::load(DW, R2, R1, -8));
        self.push(Insn::alu64_imm(insn::ADD, R2, needle.len() as i32));
        self.push(Insn::store(DW, R1, -8, R2));
        self.goto(more);
        // No match here: byte r4 is copied.
        self.bind(copy_one);
        self.scratch_addr(R1, self.loop_slot(0));
        self.push(Insn::load(DW, R3, R1, 0));
        self.jump(Insn::jump_imm(insn::JGE, R3, last, 0), stop);
        self.scratch_addr(R5, temp);
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::store(B, R5, 0, R4));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.push(Insn::store(DW, R1, 0, R3));
        self.push(Insn::load(DW, R2, R1, -8));
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.push(Insn::store(DW, R1, -8, R2));
    }

    /// `text_str(s)`: printable ASCII as it is, stap's C escapes for
    /// `\a \b \f \n \r \t \v " \\`, three octal digits for every
    /// other byte. An escape that would not fit in MAXSTRINGLEN - 1 bytes
    /// ends the text before it, as in stap.
    pub(super) fn text_str(&mut self, dst: Reg, s: Reg) {
        self.byte_loop(dst, ByteLoop::TextStr { s, bounded: false });
    }

    /// `text_strn(s, len, quoted)` with the host's rules (`runtime::host`
    /// `text_strn`, stap's `_stp_text_str`): the `text_str` loop with the
    /// escapes bounded by `len` (0, negative or past MAXSTRINGLEN - 1:
    /// that) at a run-time end kept in slot 2; `quoted` writes the quotes
    /// within the bound (at least 5), and a text cut short (the walk
    /// stopped before a NUL with input left) ends in `"...` at the bound.
    pub(super) fn text_strn(&mut self, dst: Reg, s: Reg, len: Reg, quoted: Reg) {
        if self.stride < 32 {
            self.unsupported("text_strn() in a kernel probe with MAXSTRINGLEN below 32");
            return;
        }
        let limit = self.n as i32 - 1;
        let temp = self.scratch.temp;
        let slots = self.loop_slot(0);
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        // The room, r3: `len` when 0 < len <= limit, else the limit.
        let room = self.operand(len, R3);
        if room != R3 {
            self.push(Insn::mov_reg(R3, room));
        }
        let clamp = self.new_label();
        let sized = self.new_label();
        self.jump(Insn::jump_imm(insn::JSLE, R3, 0, 0), clamp);
        self.jump(Insn::jump_imm(insn::JSLE, R3, limit, 0), sized);
        self.bind(clamp);
        self.push(Insn::mov_imm(R3, limit));
        self.bind(sized);
        self.scratch_addr(R1, slots);
        self.push(Insn::store(DW, R1, -16, R3));
        self.push(Insn::store_imm(DW, R1, 0, 0));
        let q = self.operand(quoted, R4);
        self.scratch_addr(R1, slots);
        self.push(Insn::store(DW, R1, -24, q));
        let plain = self.new_label();
        self.jump(Insn::jump_imm(insn::JEQ, q, 0, 0), plain);
        // Quoted: the opening quote, then max(room, 5) - 2 bytes of text.
        let roomy = self.new_label();
        self.push(Insn::load(DW, R3, R1, -16));
        self.jump(Insn::jump_imm(insn::JGE, R3, 5, 0), roomy);
        self.push(Insn::mov_imm(R3, 5));
        self.bind(roomy);
        self.push(Insn::alu64_imm(insn::SUB, R3, 1));
        self.push(Insn::store(DW, R1, -16, R3));
        self.push(Insn::store_imm(DW, R1, 0, 1));
        self.scratch_addr(R5, temp);
        self.push(Insn::store_imm(B, R5, 0, b'"' as i32));
        self.bind(plain);
        self.scratch_addr(R1, slots);
        self.push(Insn::store_imm(DW, R1, -8, 0));
        self.call_loop(ByteLoop::TextStr { s, bounded: true });
        // The closing quote, or `"...` where the walk stopped early.
        let done = self.new_label();
        let closed = self.new_label();
        self.scratch_addr(R1, slots);
        self.push(Insn::load(DW, R4, R1, -24));
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), done);
        self.push(Insn::load(DW, R2, R1, -8));
        self.jump(Insn::jump_imm(insn::JGE, R2, limit, 0), closed);
        self.str_addr(s, R5);
        self.push(Insn::alu64_reg(insn::ADD, R5, R2));
        self.push(Insn::load(B, R4, R5, 0));
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), closed);
        self.push(Insn::load(DW, R3, R1, -16));
        self.push(Insn::alu64_imm(insn::SUB, R3, 3));
        self.jump(Insn::jump_imm(insn::JGT, R3, limit - 4, 0), done);
        self.scratch_addr(R5, temp);
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        for (at, byte) in [(0i16, b'"'), (1, b'.'), (2, b'.'), (3, b'.')] {
            self.push(Insn::store_imm(B, R5, at, byte as i32));
        }
        self.goto(done);
        self.bind(closed);
        self.push(Insn::load(DW, R3, R1, 0));
        self.jump(Insn::jump_imm(insn::JGE, R3, limit, 0), done);
        self.scratch_addr(R5, temp);
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::store_imm(B, R5, 0, b'"' as i32));
        self.bind(done);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }

    /// One round of `text_str`: input byte i (slot 1) escaped. r2 the
    /// index, r4 the byte, r3 the length, r1 (the length's address) and
    /// r5 addresses. `bounded` (`text_strn`): an escape that would take
    /// the length past the end in slot 2 stops the walk too.
    fn text_str_round(&mut self, s: Reg, bounded: bool, stop: Label, more: Label) {
        let last = self.n as i32 - 1;
        let temp = self.scratch.temp;
        let next = self.new_label();
        let octal = self.new_label();
        let past_end = |this: &mut Self, width: i32| {
            if bounded {
                this.push(Insn::mov_reg(R0, R3));
                this.push(Insn::alu64_imm(insn::ADD, R0, width));
                this.push(Insn::load(DW, R5, R1, -16));
                this.jump(Insn::jump_reg(insn::JGT, R0, R5, 0), stop);
            }
        };
        self.scratch_addr(R1, self.loop_slot(1));
        self.push(Insn::load(DW, R2, R1, 0));
        self.jump(Insn::jump_imm(insn::JGE, R2, last, 0), stop);
        self.str_addr(s, R1);
        self.push(Insn::alu64_reg(insn::ADD, R1, R2));
        self.push(Insn::load(B, R4, R1, 0));
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), stop);
        self.scratch_addr(R1, self.loop_slot(0));
        self.push(Insn::load(DW, R3, R1, 0));
        // Two-byte escapes, each with its own letter.
        const ESCAPES: [(u8, u8); 9] = [
            (7, b'a'),
            (8, b'b'),
            (12, b'f'),
            (b'\n', b'n'),
            (b'\r', b'r'),
            (b'\t', b't'),
            (11, b'v'),
            (b'"', b'"'),
            (b'\\', b'\\'),
        ];
        for (byte, letter) in ESCAPES {
            let other = self.new_label();
            self.jump(Insn::jump_imm(insn::JNE, R4, byte as i32, 0), other);
            past_end(self, 2);
            self.jump(Insn::jump_imm(insn::JGE, R3, last - 1, 0), stop);
            self.scratch_addr(R5, temp);
            self.push(Insn::alu64_reg(insn::ADD, R5, R3));
            self.push(Insn::store_imm(B, R5, 0, b'\\' as i32));
            self.push(Insn::store_imm(B, R5, 1, letter as i32));
            self.push(Insn::alu64_imm(insn::ADD, R3, 2));
            self.goto(next);
            self.bind(other);
        }
        self.jump(Insn::jump_imm(insn::JLT, R4, 0x20, 0), octal);
        self.jump(Insn::jump_imm(insn::JGT, R4, 0x7e, 0), octal);
        past_end(self, 1);
        self.jump(Insn::jump_imm(insn::JGE, R3, last, 0), stop);
        self.scratch_addr(R5, temp);
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::store(B, R5, 0, R4));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.goto(next);
        self.bind(octal);
        past_end(self, 4);
        self.jump(Insn::jump_imm(insn::JGE, R3, last - 3, 0), stop);
        self.scratch_addr(R5, temp);
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::store_imm(B, R5, 0, b'\\' as i32));
        for (at, shift) in [(1i16, 6i32), (2, 3), (3, 0)] {
            self.push(Insn::mov_reg(R0, R4));
            if shift > 0 {
                self.push(Insn::alu64_imm(insn::RSH, R0, shift));
            }
            self.push(Insn::alu64_imm(insn::AND, R0, 7));
            self.push(Insn::alu64_imm(insn::ADD, R0, b'0' as i32));
            self.push(Insn::store(B, R5, at, R0));
        }
        self.push(Insn::alu64_imm(insn::ADD, R3, 4));
        self.bind(next);
        self.push(Insn::store(DW, R1, 0, R3));
        self.push(Insn::load(DW, R2, R1, -8));
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.push(Insn::store(DW, R1, -8, R2));
        self.goto(more);
    }

    /// `cmdline_args(n, m, delim)` with a literal `delim`: the current
    /// process's argument block (`current->mm->arg_start..arg_end`, NUL-
    /// separated, at most MAXSTRINGLEN - 1 bytes of it) is read from user
    /// memory into `dst`'s slot, then a loop joins arguments n to m as
    /// stap's tapset does. A kernel thread (no `mm`) or a failed read
    /// gives "".
    pub(super) fn cmdline_args(&mut self, dst: Reg, first: Reg, last: Reg, delim: Reg) {
        let Some(layout) = self.task.cmdline else {
            self.unsupported(
                "cmdline_args() in kernel probes (the kernel's BTF lacks task_struct.mm or mm_struct.arg_start/arg_end)",
            );
            return;
        };
        let Some(delim) = self.literal(delim).map(|d| d.as_bytes().to_vec()) else {
            self.unsupported(
                "cmdline_args() in a kernel probe with a delimiter that is not a literal string",
            );
            return;
        };
        let delim = delim[..delim.iter().position(|b| *b == 0).unwrap_or(delim.len())].to_vec();
        if delim.len() > MAX_NEEDLE {
            self.unsupported(format!(
                "cmdline_args() in a kernel probe with a delimiter longer than {MAX_NEEDLE} bytes"
            ));
            return;
        }
        if self.stride < 64 {
            self.unsupported("cmdline_args() in a kernel probe with MAXSTRINGLEN below 64");
            return;
        }
        let last_byte = self.n as i32 - 1;
        let empty = self.new_label();
        let go = self.new_label();
        // The bounds, before the helpers clobber r1-r5.
        let slots = self.loop_slot(0);
        let f = self.operand(first, R2);
        self.scratch_addr(R1, slots);
        self.push(Insn::store(DW, R1, -32, f));
        let l = self.operand(last, R2);
        self.scratch_addr(R1, slots);
        self.push(Insn::store(DW, R1, -40, l));
        self.str_addr(dst, R1);
        self.call_memset(self.n);
        // mm, then arg_start and arg_end, each read into FRAME_TMP.
        self.call(helper::GET_CURRENT_TASK);
        self.push(Insn::mov_reg(R3, R0));
        self.push(Insn::alu64_imm(insn::ADD, R3, layout.mm as i32));
        self.read_u64_to_frame(FRAME_TMP);
        self.push(Insn::load(DW, R3, FP, FRAME_TMP));
        self.jump(Insn::jump_imm(insn::JEQ, R3, 0, 0), empty);
        self.push(Insn::alu64_imm(insn::ADD, R3, layout.arg_start as i32));
        self.read_u64_to_frame(FRAME_SMALL);
        self.push(Insn::load(DW, R3, FP, FRAME_TMP));
        self.push(Insn::alu64_imm(insn::ADD, R3, layout.arg_end as i32));
        self.read_u64_to_frame(FRAME_SMALL + 8);
        self.push(Insn::load(DW, R3, FP, FRAME_SMALL));
        self.push(Insn::load(DW, R2, FP, FRAME_SMALL + 8));
        self.jump(Insn::jump_imm(insn::JEQ, R3, 0, 0), empty);
        self.jump(Insn::jump_reg(insn::JLE, R2, R3, 0), empty);
        self.push(Insn::alu64_reg(insn::SUB, R2, R3));
        self.push(Insn::jump_imm(insn::JLE, R2, last_byte, 1));
        self.push(Insn::mov_imm(R2, last_byte));
        self.scratch_addr(R1, slots);
        self.push(Insn::store(DW, R1, -48, R2));
        self.str_addr(dst, R1);
        self.call(helper::PROBE_READ_USER);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), go);
        self.bind(empty);
        self.scratch_addr(R1, slots);
        self.push(Insn::store_imm(DW, R1, -48, 0));
        self.bind(go);
        // Argument 0, at its start.
        self.scratch_addr(R1, slots);
        self.push(Insn::store_imm(DW, R1, -16, 0));
        self.push(Insn::store_imm(DW, R1, -24, 1));
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        if self.start_loop(ByteLoop::Cmdline { raw: dst, delim }, 0) {
            self.str_addr(dst, R1);
            self.scratch_addr(R3, temp);
            self.call_memcpy(self.n);
        }
    }

    /// 8 bytes at kernel address r3 into the frame at `at` (0 on a fault).
    fn read_u64_to_frame(&mut self, at: i16) {
        self.push(Insn::store_imm(DW, FP, at, 0));
        self.frame_ptr(R1, at);
        self.push(Insn::mov_imm(R2, 8));
        self.call(helper::PROBE_READ_KERNEL);
    }

    /// One round of `cmdline_args` at byte i of the argument block. The
    /// loop's slots, from r1 (slot 0) down: the result's length, i, the
    /// argument number, "at an argument's start", n, m, the block's
    /// length. r2 the index, r4 the byte, r0/r3/r5 per step.
    fn cmdline_round(&mut self, raw: Reg, delim: &[u8], stop: Label, more: Label) {
        let last = self.n as i32 - 1;
        let bytes = self.new_label();
        let ended = self.new_label();
        let body = self.new_label();
        let next = self.new_label();
        self.scratch_addr(R1, self.loop_slot(0));
        self.push(Insn::load(DW, R2, R1, -8));
        self.push(Insn::load(DW, R3, R1, -48));
        self.jump(Insn::jump_reg(insn::JGE, R2, R3, 0), stop);
        self.jump(Insn::jump_imm(insn::JGE, R2, last, 0), stop);
        self.str_addr(raw, R4);
        self.push(Insn::alu64_reg(insn::ADD, R4, R2));
        self.push(Insn::load(B, R4, R4, 0));
        self.jump(Insn::jump_imm(insn::JNE, R4, 0, 0), bytes);
        // A NUL ends argument nr; an empty one after the first is `""`.
        self.push(Insn::load(DW, R5, R1, -24));
        self.jump(Insn::jump_imm(insn::JEQ, R5, 0, 0), ended);
        self.push(Insn::load(DW, R5, R1, -16));
        self.push(Insn::load(DW, R0, R1, -32));
        self.jump(Insn::jump_reg(insn::JSLE, R5, R0, 0), ended);
        self.append_literal(delim, stop);
        self.append_literal(b"\"\"", stop);
        self.bind(ended);
        self.push(Insn::load(DW, R5, R1, -16));
        self.push(Insn::alu64_imm(insn::ADD, R5, 1));
        self.push(Insn::store(DW, R1, -16, R5));
        self.push(Insn::store_imm(DW, R1, -24, 1));
        self.push(Insn::load(DW, R0, R1, -40));
        self.jump(Insn::jump_imm(insn::JSLT, R0, 0, 0), next);
        self.jump(Insn::jump_reg(insn::JSGT, R5, R0, 0), stop);
        self.goto(next);
        // A byte of argument nr: the delimiter first when it starts one
        // after the first.
        self.bind(bytes);
        self.push(Insn::load(DW, R5, R1, -24));
        self.jump(Insn::jump_imm(insn::JEQ, R5, 0, 0), body);
        self.push(Insn::store_imm(DW, R1, -24, 0));
        self.push(Insn::load(DW, R5, R1, -16));
        self.push(Insn::load(DW, R0, R1, -32));
        self.jump(Insn::jump_reg(insn::JSLE, R5, R0, 0), body);
        self.append_literal(delim, stop);
        self.bind(body);
        self.push(Insn::load(DW, R5, R1, -16));
        self.push(Insn::load(DW, R0, R1, -32));
        self.jump(Insn::jump_reg(insn::JSLT, R5, R0, 0), next);
        self.push(Insn::load(DW, R3, R1, 0));
        self.jump(Insn::jump_imm(insn::JGE, R3, last, 0), stop);
        self.scratch_addr(R5, self.scratch.temp);
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::store(B, R5, 0, R4));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.push(Insn::store(DW, R1, 0, R3));
        self.bind(next);
        self.push(Insn::load(DW, R2, R1, -8));
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.push(Insn::store(DW, R1, -8, R2));
        self.goto(more);
    }

    /// Appends literal `text` to the string a loop builds (length at r1),
    /// or stops the loop when it would not fit. Uses r3 and r5.
    fn append_literal(&mut self, text: &[u8], stop: Label) {
        if text.is_empty() {
            return;
        }
        let last = self.n as i32 - 1;
        self.push(Insn::load(DW, R3, R1, 0));
        self.jump(
            Insn::jump_imm(insn::JGT, R3, last - text.len() as i32, 0),
            stop,
        );
        self.scratch_addr(R5, self.scratch.temp);
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        for (at, byte) in text.iter().enumerate() {
            self.push(Insn::store_imm(B, R5, at as i16, *byte as i32));
        }
        self.push(Insn::alu64_imm(insn::ADD, R3, text.len() as i32));
        self.push(Insn::store(DW, R1, 0, R3));
    }
}

/// A string built-in whose per-byte work is a `bpf_loop` callback.
#[derive(Debug, Clone)]
pub(super) enum ByteLoop {
    TextStr {
        s: Reg,
        /// Stop at the run-time end in slot 2 (`text_strn`).
        bounded: bool,
    },
    Find {
        s: Reg,
        needle: Vec<u8>,
        strpos: bool,
    },
    Cmdline {
        raw: Reg,
        delim: Vec<u8>,
    },
    StrReplace {
        s: Reg,
        needle: Vec<u8>,
        new: Reg,
    },
}
