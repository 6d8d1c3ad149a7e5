//! Stacks in kernel probes: captured with `bpf_get_stack` into the
//! scratch stack area (`u64` bytes captured, `u64` tgid, then
//! [`MAX_FRAMES`] return addresses), either copied into a printf record
//! for the host to symbolize, or walked here for `probefunc()` in
//! tracepoint and perf probes, for `caller_addr()`, and for the hex
//! strings of `backtrace()` and `ubacktrace()`.

use super::*;
use crate::bpf::records::{MAX_FRAMES, STACK_BYTES, TAG_STACK_BASE};

/// `bpf_get_stack`'s flag for the user stack.
const BPF_F_USER_STACK: i32 = 1 << 8;

/// Symbol-name prefixes of the frames between an event and the BPF
/// program it runs (the program, its trampoline, the tracepoint and perf
/// glue), each at most 8 bytes so one load compares it. The host's
/// `symbols::is_machinery` drops the same frames from printed stacks.
const MACHINERY: [&[u8]; 6] = [
    b"bpf_",
    b"__bpf_",
    b"__tracei",
    b"perf_tra",
    b"perf_sys",
    b"trace_ca",
];

/// Whether built-in `name` walks the kernel stack in BPF.
pub(super) fn walks_stack(name: &str) -> bool {
    matches!(
        name,
        "probefunc" | "caller_addr" | "backtrace" | "ubacktrace" | "stack" | "ustack"
    )
}

/// How many frames [`Emitter::foreign_frame_past`] goes past the first
/// one outside the machinery.
#[derive(Clone, Copy)]
enum FramesPast {
    Constant(i32),
    Value(Reg),
}

impl Emitter<'_> {
    /// Captures the current kernel (or user) stack into the scratch stack
    /// area, with the bytes captured (0 on failure) in its first word and,
    /// for a user stack, the thread group id in its second.
    fn capture_stack(&mut self, user: bool) {
        let area = self.scratch.stack;
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        self.scratch_addr(R2, area + 16);
        self.push(Insn::mov_imm(R3, (8 * MAX_FRAMES) as i32));
        self.push(Insn::mov_imm(R4, if user { BPF_F_USER_STACK } else { 0 }));
        self.call(helper::GET_STACK);
        self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
        self.push(Insn::mov_imm(R0, 0));
        self.scratch_addr(R1, area);
        self.push(Insn::store(DW, R1, 0, R0));
        self.push(Insn::store_imm(DW, R1, 8, 0));
        if user {
            self.call(helper::GET_CURRENT_PID_TGID);
            self.push(Insn::alu64_imm(insn::RSH, R0, 32));
            self.scratch_addr(R1, area);
            self.push(Insn::store(DW, R1, 8, R0));
        }
    }

    /// A stack argument of a printf record: `u32` tag, `u32`
    /// [`STACK_BYTES`], then the whole stack area (a fixed size, so the
    /// record's layout stays known at compile time).
    pub(super) fn stack_arg(
        &mut self,
        offset: RecordOffset,
        user: bool,
        full: bool,
    ) -> RecordOffset {
        self.capture_stack(user);
        let tag = TAG_STACK_BASE + user as u32 + 2 * full as u32;
        let at = self.record_cursor(offset);
        self.push(Insn::store_imm(W, R1, at, tag as i32));
        self.push(Insn::store_imm(W, R1, at + 4, STACK_BYTES as i32));
        self.push(Insn::alu64_imm(insn::ADD, R1, at as i32 + 8));
        self.scratch_addr(R3, self.scratch.stack);
        self.call_memcpy(STACK_BYTES);
        self.advance(offset, 8 + STACK_BYTES)
    }

    /// Walks the kernel stack to the first frame outside the tracing
    /// machinery, then `extra` frames further out. Leaves its address in
    /// r0 (0 when the stack ends first) and its `%ps` name, NUL-padded, in
    /// the work space (empty when none).
    ///
    /// The loop keeps its byte index at `FRAME_SMALL` and the frames left
    /// to skip at `FRAME_SMALL + 8` (stack slots keep exact values for the
    /// verifier, so it sees at most [`MAX_FRAMES`] iterations).
    fn foreign_frame(&mut self, extra: i32) {
        self.foreign_frame_past(FramesPast::Constant(extra));
    }

    /// [`foreign_frame`](Self::foreign_frame) with the frames to go past
    /// given as a constant or a script value (`stack(n)`; a negative one
    /// walks off the end: none).
    fn foreign_frame_past(&mut self, extra: FramesPast) {
        let Some(formats) = self.maps.formats.as_ref() else {
            return;
        };
        let (map, symname) = (formats.map, formats.symname);
        let area = self.scratch.stack;
        let temp = self.scratch.temp;
        let top = self.new_label();
        let next = self.new_label();
        let found = self.new_label();
        let none = self.new_label();
        let done = self.new_label();
        self.capture_stack(false);
        self.push(Insn::store_imm(DW, FP, FRAME_SMALL, 0));
        match extra {
            FramesPast::Constant(extra) => {
                self.push(Insn::store_imm(DW, FP, FRAME_SMALL + 8, extra));
            }
            FramesPast::Value(depth) => {
                self.load_to(depth, R1);
                self.push(Insn::store(DW, FP, FRAME_SMALL + 8, R1));
            }
        }
        self.bind(top);
        self.push(Insn::load(DW, R3, FP, FRAME_SMALL));
        self.jump(
            Insn::jump_imm(insn::JGE, R3, (8 * MAX_FRAMES) as i32, 0),
            none,
        );
        self.scratch_addr(R1, area);
        self.push(Insn::load(DW, R4, R1, 0));
        self.jump(Insn::jump_reg(insn::JGE, R3, R4, 0), none);
        // The frame's name: bpf_snprintf(temp, n, "%ps", &frame).
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::load(DW, R2, R1, 16));
        self.scratch_addr(R1, self.scratch.sprintf);
        self.push(Insn::store(DW, R1, 0, R2));
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.scratch_addr(R1, temp);
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.ld_map_value(R3, map, symname as i32);
        self.scratch_addr(R4, self.scratch.sprintf);
        self.push(Insn::mov_imm(R5, 8));
        self.call(helper::SNPRINTF);
        for prefix in MACHINERY {
            let mut word = [0u8; 8];
            word[..prefix.len()].copy_from_slice(prefix);
            let mask = if prefix.len() == 8 {
                -1
            } else {
                (1i64 << (8 * prefix.len())) - 1
            };
            self.scratch_addr(R1, temp);
            self.push(Insn::load(DW, R1, R1, 0));
            if mask != -1 {
                self.push2(Insn::ld_imm64(R2, mask));
                self.push(Insn::alu64_reg(insn::AND, R1, R2));
            }
            self.push2(Insn::ld_imm64(R2, i64::from_le_bytes(word)));
            self.jump(Insn::jump_reg(insn::JEQ, R1, R2, 0), next);
        }
        // Outside the machinery: this one, or `extra` frames further out.
        self.push(Insn::load(DW, R1, FP, FRAME_SMALL + 8));
        self.jump(Insn::jump_imm(insn::JEQ, R1, 0, 0), found);
        self.push(Insn::alu64_imm(insn::SUB, R1, 1));
        self.push(Insn::store(DW, FP, FRAME_SMALL + 8, R1));
        self.bind(next);
        self.push(Insn::load(DW, R3, FP, FRAME_SMALL));
        self.push(Insn::alu64_imm(insn::ADD, R3, 8));
        self.push(Insn::store(DW, FP, FRAME_SMALL, R3));
        self.goto(top);
        self.bind(found);
        self.push(Insn::load(DW, R3, FP, FRAME_SMALL));
        self.jump(
            Insn::jump_imm(insn::JGE, R3, (8 * MAX_FRAMES) as i32, 0),
            none,
        );
        self.scratch_addr(R1, area);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::load(DW, R0, R1, 16));
        self.goto(done);
        self.bind(none);
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.push(Insn::mov_imm(R0, 0));
        self.bind(done);
    }

    /// `probefunc()` where the point does not name the function
    /// (tracepoints, perf events): the function the event fired in.
    pub(super) fn probefunc_from_stack(&mut self, dst: Reg) {
        self.foreign_frame(0);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, self.scratch.temp);
        self.call_memcpy(self.n);
    }

    /// `caller_addr()`: the return address into the probed function's
    /// caller. At a function's entry the first frame outside the
    /// machinery is the function itself, so one more; after it returned
    /// (`.return`), the first is already the caller. Elsewhere (a
    /// tracepoint) the caller of the function the event fired in.
    pub(super) fn caller_addr(&mut self, dst: Reg) {
        let probe = &self.module.probes[self.probe as usize];
        let extra = match probe.kind {
            ProbeKind::KernelFunction { is_return, .. } => !is_return as i32,
            _ => 1,
        };
        self.foreign_frame(extra);
        self.set_result(dst, R0);
    }

    /// `stack(n)` (`user`: `ustack(n)`): the address at depth `n` of what
    /// `backtrace()` (`ubacktrace()`) lists, 0 past the end or for a
    /// negative `n`.
    pub(super) fn stack_frame(&mut self, dst: Reg, depth: Reg, user: bool) {
        if !user {
            self.foreign_frame_past(FramesPast::Value(depth));
            self.set_result(dst, R0);
            return;
        }
        let none = self.new_label();
        let done = self.new_label();
        self.capture_stack(true);
        self.load_to(depth, R3);
        self.jump(Insn::jump_imm(insn::JSLT, R3, 0, 0), none);
        self.jump(Insn::jump_imm(insn::JSGE, R3, MAX_FRAMES as i32, 0), none);
        self.push(Insn::alu64_imm(insn::LSH, R3, 3));
        self.scratch_addr(R1, self.scratch.stack);
        self.push(Insn::load(DW, R4, R1, 0));
        self.jump(Insn::jump_reg(insn::JGE, R3, R4, 0), none);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::load(DW, R0, R1, 16));
        self.goto(done);
        self.bind(none);
        self.push(Insn::mov_imm(R0, 0));
        self.bind(done);
        self.set_result(dst, R0);
    }

    /// `backtrace()` (`user`: `ubacktrace()`): stap's string of the stack's
    /// return addresses, `0x`-prefixed hex separated by spaces, from the
    /// first frame outside the tracing machinery (every frame of a user
    /// stack), cut at MAXSTRINGLEN - 1 bytes between frames. The host's
    /// `print_stack`, `sprint_stack` and `print_syms` name them (on the
    /// host; in kernel probes through a deferred stack).
    ///
    /// Each frame is one `bpf_snprintf` at the string's end; the frame's
    /// byte index stays at `FRAME_SMALL` (exact for the verifier, so at
    /// most [`MAX_FRAMES`] rounds) and the string's length at
    /// `FRAME_SMALL + 8`.
    pub(super) fn backtrace_value(&mut self, dst: Reg, user: bool) {
        let Some(formats) = self.maps.formats.as_ref() else {
            return;
        };
        let (map, hex_frame) = (formats.map, formats.hex_frame);
        let last = self.n as i32 - 1;
        let area = self.scratch.stack;
        let temp = self.scratch.temp;
        let top = self.new_label();
        let done = self.new_label();
        if user {
            self.capture_stack(true);
            self.push(Insn::store_imm(DW, FP, FRAME_SMALL, 0));
        } else {
            // Leaves the first foreign frame's byte index at FRAME_SMALL.
            self.foreign_frame(0);
        }
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.push(Insn::store_imm(DW, FP, FRAME_SMALL + 8, 0));
        self.bind(top);
        self.push(Insn::load(DW, R3, FP, FRAME_SMALL));
        self.jump(
            Insn::jump_imm(insn::JGE, R3, (8 * MAX_FRAMES) as i32, 0),
            done,
        );
        self.scratch_addr(R1, area);
        self.push(Insn::load(DW, R4, R1, 0));
        self.jump(Insn::jump_reg(insn::JGE, R3, R4, 0), done);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::load(DW, R2, R1, 16));
        // A user stack the unwinder lost ends in a zero frame.
        self.jump(Insn::jump_imm(insn::JEQ, R2, 0, 0), done);
        self.scratch_addr(R1, self.scratch.sprintf);
        self.push(Insn::store(DW, R1, 0, R2));
        self.push(Insn::load(DW, R5, FP, FRAME_SMALL + 8));
        self.jump(Insn::jump_imm(insn::JGE, R5, last, 0), done);
        self.scratch_addr(R1, temp);
        self.push(Insn::alu64_reg(insn::ADD, R1, R5));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::alu64_reg(insn::SUB, R2, R5));
        // No space before the first frame.
        self.ld_map_value(R3, map, hex_frame as i32);
        self.push(Insn::jump_imm(insn::JNE, R5, 0, 1));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.scratch_addr(R4, self.scratch.sprintf);
        self.push(Insn::mov_imm(R5, 8));
        self.call(helper::SNPRINTF);
        self.jump(Insn::jump_imm(insn::JSLT, R0, 1, 0), done);
        let fits = self.new_label();
        self.push(Insn::load(DW, R5, FP, FRAME_SMALL + 8));
        self.jump(Insn::jump_imm(insn::JGE, R5, last, 0), done);
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::alu64_reg(insn::SUB, R2, R5));
        self.jump(Insn::jump_reg(insn::JLE, R0, R2, 0), fits);
        // Cut by the end of the string: the frame is dropped whole.
        self.scratch_addr(R1, temp);
        self.push(Insn::alu64_reg(insn::ADD, R1, R5));
        self.push(Insn::mov_imm(R3, 0));
        self.call(helper::PROBE_READ_KERNEL);
        self.goto(done);
        self.bind(fits);
        self.push(Insn::alu64_reg(insn::ADD, R5, R0));
        self.push(Insn::alu64_imm(insn::SUB, R5, 1));
        self.push(Insn::store(DW, FP, FRAME_SMALL + 8, R5));
        self.push(Insn::load(DW, R3, FP, FRAME_SMALL));
        self.push(Insn::alu64_imm(insn::ADD, R3, 8));
        self.push(Insn::store(DW, FP, FRAME_SMALL, R3));
        self.goto(top);
        self.bind(done);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }
}
