//! `sprintf` in kernel probes for formats `bpf_snprintf` cannot take whole
//! (`%o %p %b %m %M`, `#`, `*` counts): the format is split into parts
//! (`snprintf::segments`). Helper parts format into the work space at the
//! running position; each other directive is formatted here, byte by byte,
//! with the host formatter's rules (`printf::format`), so both sides give
//! the same bytes.
//!
//! Verifier shape: the running position lives in map memory (the scratch
//! region) between loops, so every load is an unknown value bounded by an
//! explicit check. A loop first caps its count to the room left, then
//! writes without per-byte checks. Its test jumps back when taken and falls
//! through to the exit: the verifier pushes the taken branch and walks the
//! fall-through first, so the exits (which differ only in dead registers,
//! and are pruned) are checked as they come instead of piling up a pending
//! branch per iteration (6.1 gives up past 8192 of them).

use super::*;
use crate::printf::{Conversion, Count, Spec};

/// Bytes of the `sprintf` scratch area split formats need: 24 digit bytes
/// (a u64 in octal is 22), the argument array of a helper part (12 × 8),
/// then the position and a laundering slot.
pub(crate) const DIGITS_BYTES: u32 = 112;
pub(super) const POS_AT: u32 = 96;
const LAUNDER_AT: u32 = 104;
const MAX_DIGITS: i32 = 24;

/// One part of a split format, placed: a helper part's format sits at
/// `offset` of the formats map.
#[derive(Debug, Clone)]
pub(crate) enum FormatPart {
    Kernel { offset: u32, args: usize },
    Custom(Spec),
}

// Per-directive values on the stack (nothing else uses these slots during
// a sprintf).
pub(super) const VALUE: i16 = FRAME_SMALL_VALUE;
const WIDTH: i16 = FRAME_SMALL_VALUE + 8;
/// -1: no precision.
const PREC: i16 = FRAME_SMALL_VALUE + 16;
const LEFT: i16 = FRAME_SMALL_VALUE + 24;
/// Digits, or bytes of text.
const LEN: i16 = FRAME_SMALL_VALUE + 32;
/// Zeros from the precision (and `#` with `%o`).
const ZEROS: i16 = FRAME_SMALL_VALUE + 40;
const SIGN: i16 = FRAME_SMALL_VALUE + 48;
/// `x` or `X` for a `0x`/`0X` prefix, else 0.
const PREFIX: i16 = FRAME_SMALL_VALUE + 56;
const FILL: i16 = FRAME_SMALL;
/// A copy loop's source pointer or index (cleared when the loop ends).
const CURSOR: i16 = FRAME_SMALL + 8;

impl Emitter<'_> {
    pub(super) fn sprintf_parts(&mut self, dst: Reg, parts: &[FormatPart], args: &[Reg]) {
        let Some(map) = self.maps.formats.as_ref().map(|f| f.map) else {
            return;
        };
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.scratch_addr(R1, self.scratch.sprintf + POS_AT);
        self.push(Insn::store_imm(DW, R1, 0, 0));
        let mut next = 0;
        for part in parts {
            match part {
                FormatPart::Kernel {
                    offset,
                    args: count,
                } => {
                    let Some(used) = args.get(next..next + count) else {
                        self.unsupported("a sprintf with too few arguments");
                        return;
                    };
                    self.kernel_part(map, *offset, used);
                    next += count;
                }
                FormatPart::Custom(spec) => {
                    let count = spec.arg_kinds().len();
                    let Some(used) = args.get(next..next + count) else {
                        self.unsupported("a sprintf with too few arguments");
                        return;
                    };
                    self.custom_part(spec, used);
                    next += count;
                }
            }
        }
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }

    /// The running position into `into`, bounded to `[0, n - 1]`.
    fn load_pos(&mut self, into: u8) {
        self.scratch_addr(into, self.scratch.sprintf + POS_AT);
        self.push(Insn::load(DW, into, into, 0));
        self.push(Insn::jump_imm(insn::JLE, into, self.n as i32 - 1, 1));
        self.push(Insn::mov_imm(into, self.n as i32 - 1));
    }

    fn store_pos(&mut self, from: u8, via: u8) {
        self.scratch_addr(via, self.scratch.sprintf + POS_AT);
        self.push(Insn::store(DW, via, 0, from));
    }

    /// `reg` through map memory: the verifier forgets its exact value, so
    /// paths that differ only there merge. Clobbers r4.
    fn launder(&mut self, reg: u8) {
        self.scratch_addr(R4, self.scratch.sprintf + LAUNDER_AT);
        self.push(Insn::store(DW, R4, 0, reg));
        self.push(Insn::load(DW, reg, R4, 0));
    }

    /// `bpf_snprintf` of one helper part at the running position.
    fn kernel_part(&mut self, map: usize, offset: u32, args: &[Reg]) {
        let data = self.scratch.sprintf;
        for (index, arg) in args.iter().enumerate() {
            self.scratch_addr(R1, data);
            match self.function.reg_type(*arg) {
                ValType::Str => self.str_addr(*arg, R2),
                ValType::Long => self.load_to(*arg, R2),
            }
            self.push(Insn::store(DW, R1, (index * 8) as i16, R2));
        }
        self.snprintf_at_pos(map, offset, args.len());
    }

    /// `bpf_snprintf` of the format at `offset` of the formats map at the
    /// running position, its `count` arguments already at the start of
    /// the sprintf scratch area.
    pub(super) fn snprintf_at_pos(&mut self, map: usize, offset: u32, count: usize) {
        let data = self.scratch.sprintf;
        let skip = self.new_label();
        self.load_pos(R3);
        self.scratch_addr(R1, self.scratch.temp);
        self.push(Insn::alu64_reg(insn::ADD, R1, R3));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::alu64_reg(insn::SUB, R2, R3));
        self.ld_map_value(R3, map, offset as i32);
        if count == 0 {
            self.push(Insn::mov_imm(R4, 0));
        } else {
            self.scratch_addr(R4, data);
        }
        self.push(Insn::mov_imm(R5, 8 * count as i32));
        self.call(helper::SNPRINTF);
        // r0: bytes it would write, NUL included.
        self.jump(Insn::jump_imm(insn::JSLE, R0, 0, 0), skip);
        self.push(Insn::alu64_imm(insn::SUB, R0, 1));
        self.load_pos(R1);
        self.push(Insn::alu64_reg(insn::ADD, R0, R1));
        self.push(Insn::jump_imm(insn::JLE, R0, self.n as i32 - 1, 1));
        self.push(Insn::mov_imm(R0, self.n as i32 - 1));
        self.store_pos(R0, R1);
        self.bind(skip);
    }

    /// Appends the byte in r3 if there is room. Clobbers r4, r5.
    fn put(&mut self) {
        let full = self.new_label();
        self.load_pos(R5);
        self.jump(Insn::jump_imm(insn::JGE, R5, self.n as i32 - 1, 0), full);
        self.scratch_addr(R4, self.scratch.temp);
        self.push(Insn::alu64_reg(insn::ADD, R4, R5));
        self.push(Insn::store(B, R4, 0, R3));
        self.push(Insn::alu64_imm(insn::ADD, R5, 1));
        self.store_pos(R5, R4);
        self.bind(full);
    }

    fn put_const(&mut self, byte: u8) {
        self.push(Insn::mov_imm(R3, byte as i32));
        self.put();
    }

    /// Appends `byte` as many times as the stack slot `count` says, as far
    /// as there is room.
    fn put_repeat(&mut self, byte: u8, count: i16) {
        self.push(Insn::load(DW, R2, FP, count));
        self.scratch_addr(R4, self.scratch.temp);
        let n = self.n as i32;
        self.out_loop(n, |this| this.push(Insn::store_imm(B, R4, 0, byte as i32)));
    }

    /// Caps the count in r2 to `[0, room left]` and to `max` (what its
    /// source holds), points r4 at the running position (r5), then runs
    /// `body` (which writes one byte at r4 and may use r0, r1 and r3) that
    /// many times; stores the new position.
    fn out_loop(&mut self, max: i32, body: impl Fn(&mut Self)) {
        let top = self.new_label();
        let again = self.new_label();
        let end = self.new_label();
        self.push(Insn::jump_imm(insn::JSGE, R2, 0, 1));
        self.push(Insn::mov_imm(R2, 0));
        self.load_pos(R5);
        self.push(Insn::mov_imm(R0, self.n as i32 - 1));
        self.push(Insn::alu64_reg(insn::SUB, R0, R5));
        self.push(Insn::jump_reg(insn::JLE, R2, R0, 1));
        self.push(Insn::mov_reg(R2, R0));
        // Last: kernel 6.1's verifier keeps no other bound through the
        // move above.
        self.push(Insn::jump_imm(insn::JLE, R2, max, 1));
        self.push(Insn::mov_imm(R2, max));
        self.push(Insn::alu64_reg(insn::ADD, R4, R5));
        self.bind(top);
        self.jump(Insn::jump_imm(insn::JSGT, R2, 0, 0), again);
        self.goto(end);
        self.bind(again);
        body(self);
        self.push(Insn::alu64_imm(insn::ADD, R4, 1));
        self.push(Insn::alu64_imm(insn::ADD, R5, 1));
        self.push(Insn::alu64_imm(insn::SUB, R2, 1));
        self.goto(top);
        self.bind(end);
        self.store_pos(R5, R0);
        // The cursor differs per iteration count; later code (a printf
        // record header) reads this stack area, so leaving it would keep
        // the verifier from merging the loop's exits.
        self.push(Insn::store_imm(DW, FP, CURSOR, 0));
    }

    /// Width, left flag and precision, from the spec or `*` arguments;
    /// returns the value argument.
    fn counts(&mut self, spec: &Spec, args: &[Reg]) -> Option<Reg> {
        let mut args = args.iter().copied();
        self.push(Insn::store_imm(DW, FP, LEFT, spec.flags.left as i32));
        match spec.width {
            Some(Count::Star) => {
                let positive = self.new_label();
                self.load_to(args.next()?, R0);
                // C: a negative `*` width means `-` and its magnitude.
                self.jump(Insn::jump_imm(insn::JSGE, R0, 0, 0), positive);
                self.push(Insn::neg(R0));
                self.push(Insn::store_imm(DW, FP, LEFT, 1));
                self.bind(positive);
                self.push(Insn::jump_imm(insn::JLE, R0, self.n as i32, 1));
                self.push(Insn::mov_imm(R0, self.n as i32));
                self.push(Insn::store(DW, FP, WIDTH, R0));
            }
            Some(Count::Fixed(w)) => {
                let w = w.min(self.n) as i32;
                self.push(Insn::store_imm(DW, FP, WIDTH, w));
            }
            None => self.push(Insn::store_imm(DW, FP, WIDTH, 0)),
        }
        match spec.precision {
            Some(Count::Star) => {
                self.load_to(args.next()?, R0);
                // C: a negative `*` precision is no precision.
                self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
                self.push(Insn::mov_imm(R0, -1));
                self.push(Insn::jump_imm(insn::JSLE, R0, self.n as i32, 1));
                self.push(Insn::mov_imm(R0, self.n as i32));
                self.push(Insn::store(DW, FP, PREC, R0));
            }
            Some(Count::Fixed(p)) => {
                let p = p.min(self.n) as i32;
                self.push(Insn::store_imm(DW, FP, PREC, p));
            }
            None => self.push(Insn::store_imm(DW, FP, PREC, -1)),
        }
        args.next()
    }

    fn custom_part(&mut self, spec: &Spec, args: &[Reg]) {
        let Some(value) = self.counts(spec, args) else {
            return;
        };
        match spec.conversion {
            Conversion::Decimal
            | Conversion::Unsigned
            | Conversion::Octal
            | Conversion::HexLower
            | Conversion::HexUpper
            | Conversion::Pointer => self.custom_integer(spec, value),
            Conversion::Char => {
                self.push(Insn::store_imm(DW, FP, LEN, 1));
                self.fill_for_text();
                self.pad_unless_left(true);
                self.load_to(value, R3);
                self.put();
                self.pad_unless_left(false);
            }
            Conversion::String => self.custom_string(value),
            Conversion::Binary => {
                let bytes = match spec.width {
                    Some(Count::Fixed(w)) => w,
                    _ => 8,
                };
                for i in 0..bytes {
                    self.load_to(value, R3);
                    if i > 0 {
                        self.push(Insn::alu64_imm(insn::RSH, R3, 8 * i as i32));
                    }
                    self.push(Insn::alu64_imm(insn::AND, R3, 0xff));
                    self.put();
                }
            }
            Conversion::MemoryLower | Conversion::MemoryUpper => {
                let hex = spec.conversion == Conversion::MemoryUpper;
                self.custom_memory(hex, spec.flags.alternate, value)
            }
        }
    }

    /// FILL = max(WIDTH - LEN, 0).
    fn fill_for_text(&mut self) {
        self.push(Insn::load(DW, R0, FP, WIDTH));
        self.push(Insn::load(DW, R1, FP, LEN));
        self.push(Insn::alu64_reg(insn::SUB, R0, R1));
        self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
        self.push(Insn::mov_imm(R0, 0));
        self.store_to_fill();
    }

    fn store_to_fill(&mut self) {
        self.push(Insn::store(DW, FP, FILL, R0));
    }

    /// Spaces before the text (`before`) unless left-aligned, or after it
    /// when left-aligned.
    fn pad_unless_left(&mut self, before: bool) {
        let skip = self.new_label();
        self.push(Insn::load(DW, R0, FP, LEFT));
        let op = if before { insn::JNE } else { insn::JEQ };
        self.jump(Insn::jump_imm(op, R0, 0, 0), skip);
        self.put_repeat(b' ', FILL);
        self.bind(skip);
    }

    fn custom_integer(&mut self, spec: &Spec, value: Reg) {
        let conversion = spec.conversion;
        let (base, upper) = match conversion {
            Conversion::Octal => (8, false),
            Conversion::HexLower | Conversion::Pointer => (16, false),
            Conversion::HexUpper => (16, true),
            _ => (10, false),
        };
        let pointer = conversion == Conversion::Pointer;
        if pointer {
            // Always 0x and 16 digits, padded with spaces.
            self.push(Insn::store_imm(DW, FP, PREC, 16));
        }
        self.push(Insn::store_imm(DW, FP, SIGN, 0));
        self.load_to(value, R0);
        if conversion == Conversion::Decimal {
            let positive = self.new_label();
            let signed = self.new_label();
            self.jump(Insn::jump_imm(insn::JSGE, R0, 0, 0), positive);
            self.push(Insn::neg(R0));
            self.push(Insn::store_imm(DW, FP, SIGN, b'-' as i32));
            self.goto(signed);
            self.bind(positive);
            if spec.flags.plus || spec.flags.space {
                let sign = if spec.flags.plus { b'+' } else { b' ' };
                self.push(Insn::store_imm(DW, FP, SIGN, sign as i32));
            }
            self.bind(signed);
        }
        self.push(Insn::store(DW, FP, VALUE, R0));

        // Digits, least significant first, right-aligned in the scratch
        // digit area: digit i at byte MAX_DIGITS - 1 - i.
        let top = self.new_label();
        let more = self.new_label();
        let digits_done = self.new_label();
        self.push(Insn::mov_imm(R1, 0));
        self.push(Insn::load(DW, R2, FP, PREC));
        let any = self.new_label();
        self.jump(Insn::jump_imm(insn::JNE, R2, 0, 0), any);
        // C: precision 0 prints zero as no digits.
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), digits_done);
        self.bind(any);
        self.bind(top);
        self.push(Insn::mov_reg(R2, R0));
        self.push(Insn::alu64_imm(insn::MOD, R2, base));
        self.push(Insn::mov_reg(R3, R2));
        self.push(Insn::alu64_imm(insn::ADD, R3, b'0' as i32));
        if base == 16 {
            let letter = if upper { b'A' } else { b'a' };
            self.push(Insn::jump_imm(insn::JLT, R2, 10, 1));
            self.push(Insn::alu64_imm(
                insn::ADD,
                R3,
                letter as i32 - b'0' as i32 - 10,
            ));
        }
        self.scratch_addr(R4, self.scratch.sprintf + MAX_DIGITS as u32 - 1);
        self.push(Insn::alu64_reg(insn::SUB, R4, R1));
        self.push(Insn::store(B, R4, 0, R3));
        self.push(Insn::alu64_imm(insn::DIV, R0, base));
        self.push(Insn::alu64_imm(insn::ADD, R1, 1));
        self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), more);
        self.goto(digits_done);
        self.bind(more);
        self.jump(Insn::jump_imm(insn::JLT, R1, MAX_DIGITS, 0), top);
        self.bind(digits_done);
        self.launder(R1);
        self.push(Insn::jump_imm(insn::JLE, R1, MAX_DIGITS, 1));
        self.push(Insn::mov_imm(R1, MAX_DIGITS));
        self.push(Insn::store(DW, FP, LEN, R1));

        // Zeros: the precision's, then `#` with `%o` adds one more, always
        // (stap's runtime; C only when the digits start with none).
        self.push(Insn::load(DW, R2, FP, PREC));
        self.push(Insn::mov_imm(R3, 0));
        self.push(Insn::jump_reg(insn::JSLE, R2, R1, 2));
        self.push(Insn::mov_reg(R3, R2));
        self.push(Insn::alu64_reg(insn::SUB, R3, R1));
        if conversion == Conversion::Octal && spec.flags.alternate {
            self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        }
        self.push(Insn::store(DW, FP, ZEROS, R3));

        // The 0x prefix: for %p, and with `#` for every value, zero too
        // (stap's runtime prints `0x0` where C prints `0`).
        self.push(Insn::store_imm(DW, FP, PREFIX, 0));
        let hex_alternate = matches!(conversion, Conversion::HexLower | Conversion::HexUpper)
            && spec.flags.alternate;
        if pointer || hex_alternate {
            let x = if upper { b'X' } else { b'x' };
            self.push(Insn::store_imm(DW, FP, PREFIX, x as i32));
        }

        // FILL = WIDTH - (sign + prefix + zeros + digits), at least 0.
        self.push(Insn::load(DW, R1, FP, LEN));
        self.push(Insn::load(DW, R2, FP, ZEROS));
        self.push(Insn::alu64_reg(insn::ADD, R1, R2));
        self.push(Insn::load(DW, R2, FP, SIGN));
        self.push(Insn::jump_imm(insn::JEQ, R2, 0, 1));
        self.push(Insn::alu64_imm(insn::ADD, R1, 1));
        self.push(Insn::load(DW, R2, FP, PREFIX));
        self.push(Insn::jump_imm(insn::JEQ, R2, 0, 1));
        self.push(Insn::alu64_imm(insn::ADD, R1, 2));
        self.push(Insn::load(DW, R0, FP, WIDTH));
        self.push(Insn::alu64_reg(insn::SUB, R0, R1));
        self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
        self.push(Insn::mov_imm(R0, 0));
        self.store_to_fill();

        // `0` pads between the prefix and the digits, unless `-` or a
        // precision is given (C); %p always pads with spaces.
        let zero_pad = spec.flags.zero && !pointer;
        let spaces_before = self.new_label();
        let after_spaces = self.new_label();
        if zero_pad {
            self.push(Insn::load(DW, R0, FP, LEFT));
            self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), spaces_before);
            self.push(Insn::load(DW, R0, FP, PREC));
            self.jump(Insn::jump_imm(insn::JSGE, R0, 0, 0), spaces_before);
            // Zero padding: the fill becomes leading zeros.
            self.push(Insn::load(DW, R0, FP, ZEROS));
            self.push(Insn::load(DW, R1, FP, FILL));
            self.push(Insn::alu64_reg(insn::ADD, R0, R1));
            self.push(Insn::store(DW, FP, ZEROS, R0));
            self.push(Insn::store_imm(DW, FP, FILL, 0));
            self.goto(after_spaces);
        }
        self.bind(spaces_before);
        self.pad_unless_left(true);
        self.bind(after_spaces);

        let no_sign = self.new_label();
        self.push(Insn::load(DW, R3, FP, SIGN));
        self.jump(Insn::jump_imm(insn::JEQ, R3, 0, 0), no_sign);
        self.put();
        self.bind(no_sign);
        let no_prefix = self.new_label();
        self.push(Insn::load(DW, R3, FP, PREFIX));
        self.jump(Insn::jump_imm(insn::JEQ, R3, 0, 0), no_prefix);
        self.put_const(b'0');
        self.push(Insn::load(DW, R3, FP, PREFIX));
        self.put();
        self.bind(no_prefix);
        self.put_repeat(b'0', ZEROS);

        // The digits, most significant first: the last LEN bytes of the
        // digit area.
        self.push(Insn::load(DW, R2, FP, LEN));
        self.push(Insn::jump_imm(insn::JLE, R2, MAX_DIGITS, 1));
        self.push(Insn::mov_imm(R2, MAX_DIGITS));
        // Pointer minus a variable has unbounded unsigned bounds for the
        // verifier: add MAX_DIGITS - LEN instead.
        self.push(Insn::mov_imm(R0, MAX_DIGITS));
        self.push(Insn::alu64_reg(insn::SUB, R0, R2));
        self.scratch_addr(R3, self.scratch.sprintf);
        self.push(Insn::alu64_reg(insn::ADD, R3, R0));
        self.push(Insn::store(DW, FP, CURSOR, R3));
        self.scratch_addr(R4, self.scratch.temp);
        self.out_loop(MAX_DIGITS, |this| {
            this.push(Insn::load(DW, R3, FP, CURSOR));
            this.push(Insn::load(B, R1, R3, 0));
            this.push(Insn::store(B, R4, 0, R1));
            this.push(Insn::alu64_imm(insn::ADD, R3, 1));
            this.push(Insn::store(DW, FP, CURSOR, R3));
        });
        self.pad_unless_left(false);
    }

    /// `%s` with a `*` width or precision.
    fn custom_string(&mut self, value: Reg) {
        // Its length (bounded by MAXSTRINGLEN), cut to the precision.
        let top = self.new_label();
        let in_range = self.new_label();
        let counted = self.new_label();
        let done = self.new_label();
        self.str_addr(value, R1);
        self.push(Insn::mov_imm(R2, 0));
        self.bind(top);
        self.jump(Insn::jump_imm(insn::JLT, R2, self.n as i32, 0), in_range);
        self.goto(done);
        self.bind(in_range);
        self.push(Insn::mov_reg(R3, R1));
        self.push(Insn::alu64_reg(insn::ADD, R3, R2));
        self.push(Insn::load(B, R3, R3, 0));
        self.jump(Insn::jump_imm(insn::JNE, R3, 0, 0), counted);
        self.goto(done);
        self.bind(counted);
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.goto(top);
        self.bind(done);
        self.launder(R2);
        self.push(Insn::load(DW, R0, FP, PREC));
        self.push(Insn::jump_imm(insn::JSLT, R0, 0, 2));
        self.push(Insn::jump_reg(insn::JSGE, R0, R2, 1));
        self.push(Insn::mov_reg(R2, R0));
        self.push(Insn::jump_imm(insn::JLE, R2, self.n as i32, 1));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::store(DW, FP, LEN, R2));
        self.fill_for_text();
        self.pad_unless_left(true);
        self.copy_text(value, false);
        self.pad_unless_left(false);
    }

    /// Appends LEN bytes of string register `text`'s slot (or, with
    /// `memory`, of the work space's second half), as is.
    fn copy_text(&mut self, text: Reg, memory: bool) {
        if memory {
            self.scratch_addr(R3, self.scratch.temp + self.stride);
        } else {
            self.str_addr(text, R3);
        }
        self.push(Insn::store(DW, FP, CURSOR, R3));
        self.push(Insn::load(DW, R2, FP, LEN));
        self.scratch_addr(R4, self.scratch.temp);
        let n = self.n as i32;
        self.out_loop(n, |this| {
            this.push(Insn::load(DW, R3, FP, CURSOR));
            this.push(Insn::load(B, R1, R3, 0));
            this.push(Insn::store(B, R4, 0, R1));
            this.push(Insn::alu64_imm(insn::ADD, R3, 1));
            this.push(Insn::store(DW, FP, CURSOR, R3));
        });
    }

    /// `%m` (raw) and `%M` (hex): the precision's bytes (default 1) read
    /// from a kernel (or with `#`, `user`, a user) address now, padded to
    /// the width.
    fn custom_memory(&mut self, hex: bool, user: bool, address: Reg) {
        let ok = self.new_label();
        // size = precision < 0 ? 1 : min(precision, n).
        self.push(Insn::load(DW, R2, FP, PREC));
        self.push(Insn::jump_imm(insn::JSGE, R2, 0, 1));
        self.push(Insn::mov_imm(R2, 1));
        self.push(Insn::jump_imm(insn::JLE, R2, self.n as i32, 1));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::store(DW, FP, LEN, R2));
        self.scratch_addr(R1, self.scratch.temp + self.stride);
        self.load_to(address, R3);
        let (read, fault) = if user {
            (helper::PROBE_READ_USER, records::ERROR_USER_READ)
        } else {
            (helper::PROBE_READ_KERNEL, records::ERROR_KERNEL_READ)
        };
        self.call(read);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        self.fail(fault, Some(address));
        self.bind(ok);
        if !hex {
            self.fill_for_text();
            self.pad_unless_left(true);
            self.copy_text(address, true);
            self.pad_unless_left(false);
            return;
        }
        // Two hex digits per byte.
        self.push(Insn::load(DW, R0, FP, WIDTH));
        self.push(Insn::load(DW, R1, FP, LEN));
        self.push(Insn::alu64_reg(insn::SUB, R0, R1));
        self.push(Insn::alu64_reg(insn::SUB, R0, R1));
        self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
        self.push(Insn::mov_imm(R0, 0));
        self.store_to_fill();
        self.pad_unless_left(true);
        // Character j is the high (even j) or low nibble of byte j / 2.
        self.push(Insn::store_imm(DW, FP, CURSOR, 0));
        self.push(Insn::load(DW, R2, FP, LEN));
        self.push(Insn::alu64_imm(insn::LSH, R2, 1));
        self.scratch_addr(R4, self.scratch.temp);
        let memory = self.scratch.temp + self.stride;
        let n = self.n as i32;
        self.out_loop(n, |this| {
            this.push(Insn::load(DW, R1, FP, CURSOR));
            this.push(Insn::jump_imm(insn::JLT, R1, 2 * this.n as i32, 1));
            this.push(Insn::mov_imm(R1, 0));
            this.push(Insn::mov_reg(R0, R1));
            this.push(Insn::alu64_imm(insn::RSH, R0, 1));
            this.scratch_addr(R3, memory);
            this.push(Insn::alu64_reg(insn::ADD, R3, R0));
            this.push(Insn::load(B, R3, R3, 0));
            // Even: shift the high nibble down.
            this.push(Insn::mov_reg(R0, R1));
            this.push(Insn::alu64_imm(insn::AND, R0, 1));
            this.push(Insn::jump_imm(insn::JNE, R0, 0, 1));
            this.push(Insn::alu64_imm(insn::RSH, R3, 4));
            this.push(Insn::alu64_imm(insn::AND, R3, 0xf));
            this.push(Insn::alu64_imm(insn::ADD, R3, b'0' as i32));
            this.push(Insn::jump_imm(insn::JLE, R3, b'9' as i32, 1));
            this.push(Insn::alu64_imm(insn::ADD, R3, (b'a' - b'9' - 1) as i32));
            this.push(Insn::store(B, R4, 0, R3));
            this.push(Insn::alu64_imm(insn::ADD, R1, 1));
            this.push(Insn::store(DW, FP, CURSOR, R1));
        });
        self.pad_unless_left(false);
    }
}
