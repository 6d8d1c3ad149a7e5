//! Kernel data: context variables, `->` chains, `@cast`, bitfields and
//! `$$vars`.
//!
//! A chain is walked with a cursor that is either a value in a register
//! (the context variable, a loaded pointer) or the address of an object in
//! kernel memory. A step through a pointer loads it (when it is still in
//! memory) and moves to `pointer + offset`; a step into an embedded struct
//! or array only adds the offset. Memory is read once, at the end, with the
//! size of the final type.

use super::FnLowering;
use crate::ast::PrettyDepth;
use crate::ir::{BinOp, BulkItem, BulkSource, Catch, CmpOp, Op, Reg, ValType};
use crate::sdt::{SdtArg, SdtLocation};
use crate::sema::hir::{
    AccessBase, AccessStep, AccessValue, Bitfield, ContextAccess, ContextSource, ContextVar,
    PrettyShape,
};
use crate::source::Span;

/// `struct pt_regs` (x86_64) offset of the instruction pointer: at a
/// uprobe, the probed instruction's address.
const PT_REGS_IP: u32 = 128;

#[derive(Clone, Copy)]
enum Cursor {
    Value(Reg),
    /// The address of an object in memory.
    Memory(Reg),
}

impl FnLowering<'_, '_> {
    pub(super) fn context_access(&mut self, access: &ContextAccess, span: Span) -> Reg {
        let mut cursor = match &access.base {
            AccessBase::Var(var) => {
                // A narrow integer argument sits in a 64-bit slot whose
                // upper bits are not guaranteed: normalize it.
                let integer = match access.value {
                    AccessValue::Integer { bytes, signed } if access.steps.is_empty() => {
                        Some((bytes, signed))
                    }
                    _ => None,
                };
                let reg = self.context_var(var, integer.is_some_and(|(_, s)| s), span);
                let exact = match var.source {
                    ContextSource::ClassicField { size, .. } => {
                        integer.is_none_or(|(bytes, _)| size <= bytes)
                    }
                    _ => integer.is_none(),
                };
                match integer {
                    Some((bytes, signed)) if !exact => {
                        Cursor::Value(self.extend(reg, bytes, signed, span))
                    }
                    _ => Cursor::Value(reg),
                }
            }
            AccessBase::Cast { ptr, .. } => Cursor::Value(self.value(ptr)),
        };
        let mut bitfield = None;
        for step in &access.steps {
            match step {
                AccessStep::Member {
                    through_pointer,
                    byte_offset,
                    bitfield: bits,
                    ..
                } => {
                    let base = self.step_base(cursor, *through_pointer, span);
                    cursor = Cursor::Memory(self.offset(base, i64::from(*byte_offset), span));
                    bitfield = *bits;
                }
                AccessStep::Subscript {
                    index,
                    through_pointer,
                    elem_size,
                    ..
                } => {
                    let base = self.step_base(cursor, *through_pointer, span);
                    let index = self.value(index);
                    let scaled = if *elem_size == 1 {
                        index
                    } else {
                        let size = self.constant(i64::from(*elem_size), span);
                        self.arith(BinOp::Mul, index, size, span)
                    };
                    cursor = Cursor::Memory(self.arith(BinOp::Add, base, scaled, span));
                    bitfield = None;
                }
            }
        }
        match (access.value, cursor) {
            (AccessValue::Integer { bytes, signed }, Cursor::Memory(addr)) => match bitfield {
                Some(bits) => self.read_bitfield(addr, bytes, signed, bits, span),
                None => self.read_memory(addr, bytes, signed, span),
            },
            (AccessValue::Pointer, cursor) => self.pointer(cursor, span),
            (AccessValue::Address | AccessValue::AddressOf, Cursor::Memory(addr)) => addr,
            (AccessValue::Integer { .. } | AccessValue::Address, Cursor::Value(v)) => v,
            (AccessValue::AddressOf, Cursor::Value(_)) => {
                self.m
                    .unsupported("taking the address of a context variable", span);
                self.constant(0, span)
            }
            (AccessValue::Pretty(_), cursor) => match &access.shape {
                Some(shape) => self.pretty_top(cursor, bitfield, shape, span),
                None => self.const_str("", span),
            },
        }
    }

    /// The raw value of a context variable.
    fn context_var(&mut self, var: &ContextVar, signed: bool, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        let op = match var.source {
            ContextSource::SdtArg(ref arg) => return self.sdt_arg(arg, span),
            ContextSource::TracepointArg(index) | ContextSource::FunctionParam(index) => {
                Op::ContextArg { dst, index }
            }
            ContextSource::ClassicField { offset, size } => Op::ContextField {
                dst,
                offset,
                size,
                signed,
            },
            ContextSource::Return => Op::ContextReturn { dst },
            ContextSource::PointedField { index, offset } => {
                self.body.emit(Op::ContextArg { dst, index }, span);
                let addr = self.offset(dst, i64::from(offset), span);
                return self.read_memory(addr, 8, false, span);
            }
            ContextSource::Constant(n) => return self.constant(n, span),
        };
        self.body.emit(op, span);
        dst
    }

    /// An SDT marker's `$argN`, decoded from its note: a register, user
    /// memory addressed by registers, a constant, or a global next to the
    /// marker; extended to a long by its size and sign.
    fn sdt_arg(&mut self, arg: &SdtArg, span: Span) -> Reg {
        let value = match &arg.location {
            SdtLocation::Constant(n) => return self.constant(*n, span),
            SdtLocation::Register { pt_regs, high_byte } => {
                let reg = self.pt_regs(*pt_regs, span);
                if !*high_byte {
                    reg
                } else {
                    let eight = self.constant(8, span);
                    self.arith(BinOp::Shr, reg, eight, span)
                }
            }
            SdtLocation::Memory { disp, base, index } => {
                let mut addr = self.constant(*disp, span);
                if let Some(base) = base {
                    let base = self.pt_regs(*base, span);
                    addr = self.arith(BinOp::Add, addr, base, span);
                }
                if let Some((index, scale)) = index {
                    let index = self.pt_regs(*index, span);
                    let scale = self.constant(i64::from(*scale), span);
                    let scaled = self.arith(BinOp::Mul, index, scale, span);
                    addr = self.arith(BinOp::Add, addr, scaled, span);
                }
                return self.read_memory(addr, arg.bytes, arg.signed, span);
            }
            SdtLocation::IpRelative { delta } => {
                let ip = self.pt_regs(PT_REGS_IP, span);
                let addr = self.offset(ip, *delta, span);
                return self.read_memory(addr, arg.bytes, arg.signed, span);
            }
            // Refused in pass 2 (the variable is unreadable there).
            SdtLocation::Unsupported(why) => {
                self.m.unsupported(format!("the SDT argument {why}"), span);
                return self.constant(0, span);
            }
        };
        if arg.bytes >= 8 {
            value
        } else {
            self.extend(value, arg.bytes, arg.signed, span)
        }
    }

    /// The 8-byte register at `offset` in a probe's saved `struct pt_regs`.
    pub(super) fn pt_regs(&mut self, offset: u32, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        self.body.emit(
            Op::ContextField {
                dst,
                offset,
                size: 8,
                signed: false,
            },
            span,
        );
        dst
    }

    /// Where a step starts: through a pointer (loaded if still in memory),
    /// or inside the object the cursor addresses.
    fn step_base(&mut self, cursor: Cursor, through_pointer: bool, span: Span) -> Reg {
        match (cursor, through_pointer) {
            (cursor, true) => self.pointer(cursor, span),
            (Cursor::Memory(addr) | Cursor::Value(addr), false) => addr,
        }
    }

    fn pointer(&mut self, cursor: Cursor, span: Span) -> Reg {
        match cursor {
            Cursor::Value(v) => v,
            Cursor::Memory(addr) => self.read_memory(addr, 8, false, span),
        }
    }

    fn offset(&mut self, base: Reg, offset: i64, span: Span) -> Reg {
        if offset == 0 {
            return base;
        }
        let off = self.constant(offset, span);
        self.arith(BinOp::Add, base, off, span)
    }

    fn arith(&mut self, op: BinOp, lhs: Reg, rhs: Reg, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        self.body.emit(Op::Binary { dst, op, lhs, rhs }, span);
        dst
    }

    fn read_memory(&mut self, addr: Reg, size: u32, signed: bool, span: Span) -> Reg {
        if self.side == crate::sema::hir::Placement::Host && self.user_memory {
            // The host reads kernel memory through /proc/kcore, but a host
            // probe has no user task whose memory it could read.
            self.m.unsupported(
                "reading user memory (`@cast` in a process probe's type) in a probe that \
                 runs on the host (begin, end, error, timer)",
                span,
            );
        }
        let dst = self.body.reg(ValType::Long);
        let op = if self.user_memory {
            Op::ReadUser {
                dst,
                addr,
                size,
                signed,
            }
        } else {
            Op::ReadKernel {
                dst,
                addr,
                size,
                signed,
            }
        };
        self.body.emit(op, span);
        dst
    }

    /// Reads enough bytes to cover the field, then shifts and masks it
    /// (little-endian bit order, as on x86_64 and arm64).
    fn read_bitfield(
        &mut self,
        addr: Reg,
        bytes: u32,
        signed: bool,
        bits: Bitfield,
        span: Span,
    ) -> Reg {
        let needed = (bits.bit_shift + bits.bits).div_ceil(8).max(bytes);
        let size = [1, 2, 4, 8].into_iter().find(|s| *s >= needed).unwrap_or(8);
        let mut value = self.read_memory(addr, size, false, span);
        if bits.bit_shift > 0 {
            let shift = self.constant(i64::from(bits.bit_shift), span);
            value = self.arith(BinOp::Shr, value, shift, span);
        }
        self.extend_bits(value, bits.bits, signed, span)
    }

    /// Sign- or zero-extends the low `bytes` bytes of `value`.
    fn extend(&mut self, value: Reg, bytes: u32, signed: bool, span: Span) -> Reg {
        if bytes >= 8 {
            return value;
        }
        self.extend_bits(value, bytes * 8, signed, span)
    }

    fn extend_bits(&mut self, value: Reg, bits: u32, signed: bool, span: Span) -> Reg {
        if bits >= 64 {
            return value;
        }
        if signed {
            let shift = self.constant(i64::from(64 - bits), span);
            let up = self.arith(BinOp::Shl, value, shift, span);
            self.arith(BinOp::Shr, up, shift, span)
        } else {
            let mask = self.constant((1i64 << bits) - 1, span);
            self.arith(BinOp::And, value, mask, span)
        }
    }

    /// `$$vars`, `$$parms`, `$$locals`, `$$return`: `name=0x...` pieces
    /// (stap's `%#x`), or with `$`/`$$` each variable pretty-printed.
    pub(super) fn bulk(
        &mut self,
        vars: &[ContextVar],
        pretty: Option<PrettyDepth>,
        shapes: &[PrettyShape],
        span: Span,
    ) -> Reg {
        if pretty.is_some() {
            let mut text = None;
            for (index, (var, shape)) in vars.iter().zip(shapes).enumerate() {
                let sep = if index == 0 { "" } else { " " };
                let name = self.const_str(&format!("{sep}{}=", var.name), span);
                let value = self.context_var(var, false, span);
                let value = self.pretty_top(Cursor::Value(value), None, shape, span);
                let piece = self.concat(name, value, span);
                text = Some(match text {
                    Some(before) => self.concat(before, piece, span),
                    None => piece,
                });
            }
            return text.unwrap_or_else(|| self.const_str("", span));
        }
        // A function's arguments and return value: one op that reads them
        // itself, so the list is data a shared program can look up.
        let items: Option<Vec<BulkItem>> = vars
            .iter()
            .map(|v| {
                let source = match v.source {
                    ContextSource::FunctionParam(index) => BulkSource::Arg(index),
                    ContextSource::Return => BulkSource::Return,
                    _ => return None,
                };
                Some(BulkItem {
                    name: v.name.clone(),
                    source,
                })
            })
            .collect();
        // An empty list too (a void function's `$$return`), so it shares
        // with the others; host code keeps its constant empty string.
        let kernel = self.side == crate::ir::Placement::Kernel;
        if let Some(items) = items.filter(|items| kernel || !items.is_empty()) {
            let dst = self.body.reg(ValType::Str);
            self.body.emit(Op::BulkArgs { dst, items }, span);
            return dst;
        }
        let text: Vec<String> = vars.iter().map(|v| format!("{}=%#x", v.name)).collect();
        let format = self.m.format(&text.join(" "));
        let args = vars
            .iter()
            .map(|v| self.context_var(v, false, span))
            .collect();
        let dst = self.body.reg(ValType::Str);
        self.body.emit(Op::Sprintf { dst, format, args }, span);
        dst
    }

    pub(super) fn concat(&mut self, lhs: Reg, rhs: Reg, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Str);
        self.body.emit(Op::Concat { dst, lhs, rhs }, span);
        dst
    }

    /// One pretty-printed value (`$x$`, `$x$$`, a variable of `$$parms$`).
    /// As in stap, a fault while reading it gives the text `ERROR` rather
    /// than a run-time error: the value is built inside an implicit `try`.
    fn pretty_top(
        &mut self,
        cursor: Cursor,
        bitfield: Option<Bitfield>,
        shape: &PrettyShape,
        span: Span,
    ) -> Reg {
        let limit = usize::try_from(self.m.program.limits.max_string_len).unwrap_or(usize::MAX);
        let mut out = PrettyText {
            format: String::new(),
            args: Vec::new(),
            text: None,
            written: 0,
            limit,
        };
        if !reads_memory(cursor, shape) {
            // Nothing to fault on (a `char *` has its own fallback), and a
            // `try` whose body cannot fail would leave its handler
            // unreachable, which the verifier refuses.
            self.pretty_value(&mut out, cursor, bitfield, shape, span);
            self.pretty_flush(&mut out, span);
            return match out.text {
                Some(text) => text,
                None => self.const_str("", span),
            };
        }
        let result = self.body.reg(ValType::Str);
        let handler = self.body.new_block();
        let join = self.body.new_block();
        self.body.push_catch(Catch {
            handler,
            message: None,
        });
        let body = self.body.new_block();
        self.body.jump_to(body, span);
        self.pretty_value(&mut out, cursor, bitfield, shape, span);
        self.pretty_flush(&mut out, span);
        let text = match out.text {
            Some(text) => text,
            None => self.const_str("", span),
        };
        self.body.emit(
            Op::Move {
                dst: result,
                src: text,
            },
            span,
        );
        self.body.pop_catch();
        self.body.jump_to(join, span);
        self.body.switch_to(handler);
        let error = self.const_str("ERROR", span);
        self.body.emit(
            Op::Move {
                dst: result,
                src: error,
            },
            span,
        );
        self.body.jump_to(join, span);
        self.body.switch_to(join);
        result
    }

    fn pretty_value(
        &mut self,
        out: &mut PrettyText,
        cursor: Cursor,
        bitfield: Option<Bitfield>,
        shape: &PrettyShape,
        span: Span,
    ) {
        match shape {
            PrettyShape::Integer {
                bytes,
                signed,
                bitfield: own,
            } => {
                let value = match (cursor, own.or(bitfield)) {
                    (Cursor::Value(v), _) => self.extend(v, *bytes, *signed, span),
                    (Cursor::Memory(addr), Some(bits)) => {
                        self.read_bitfield(addr, *bytes, *signed, bits, span)
                    }
                    (Cursor::Memory(addr), None) => self.read_memory(addr, *bytes, *signed, span),
                };
                let directive = if *signed { "%d" } else { "%u" };
                self.pretty_arg(out, directive, value, span);
            }
            PrettyShape::Pointer => {
                let value = self.pointer(cursor, span);
                self.pretty_arg(out, "%p", value, span);
            }
            PrettyShape::StringPointer => {
                let addr = self.pointer(cursor, span);
                let quoted = self.quoted_string(addr, span);
                self.pretty_arg(out, "%s", quoted, span);
            }
            PrettyShape::CharArray { len } => {
                let addr = match cursor {
                    Cursor::Memory(addr) | Cursor::Value(addr) => addr,
                };
                let len = self.constant(i64::from(*len), span);
                let name = if self.user_memory {
                    "user_string_n"
                } else {
                    "kernel_string_n"
                };
                let text = self.body.reg(ValType::Str);
                self.body.emit(
                    Op::Builtin {
                        dst: Some(text),
                        name: name.to_string(),
                        args: vec![addr, len],
                    },
                    span,
                );
                self.pretty_lit(out, "\"");
                self.pretty_arg(out, "%s", text, span);
                self.pretty_lit(out, "\"");
            }
            PrettyShape::Deref(inner) => {
                let addr = self.pointer(cursor, span);
                self.pretty_value(out, Cursor::Memory(addr), None, inner, span);
            }
            PrettyShape::Struct(members) => {
                let base = match cursor {
                    Cursor::Memory(addr) | Cursor::Value(addr) => addr,
                };
                self.pretty_lit(out, "{");
                for (index, member) in members.iter().enumerate() {
                    if out.full() {
                        break;
                    }
                    let sep = if index == 0 { "" } else { ", " };
                    self.pretty_lit(out, &format!("{sep}.{}=", member.name));
                    let addr = self.offset(base, i64::from(member.byte_offset), span);
                    self.pretty_value(out, Cursor::Memory(addr), None, &member.shape, span);
                }
                self.pretty_lit(out, "}");
            }
            PrettyShape::Array {
                elem_size,
                len,
                elem,
            } => {
                let base = match cursor {
                    Cursor::Memory(addr) | Cursor::Value(addr) => addr,
                };
                self.pretty_lit(out, "[");
                for index in 0..*len {
                    if out.full() {
                        break;
                    }
                    if index > 0 {
                        self.pretty_lit(out, ", ");
                    }
                    let at = i64::from(index) * i64::from(*elem_size);
                    let addr = self.offset(base, at, span);
                    self.pretty_value(out, Cursor::Memory(addr), None, elem, span);
                }
                self.pretty_lit(out, "]");
            }
            PrettyShape::Text(text) => self.pretty_lit(out, text),
        }
    }

    /// stap's `kernel_string_quoted`: the string at `addr` in double
    /// quotes, or the address in hex when it is NULL or cannot be read.
    fn quoted_string(&mut self, addr: Reg, span: Span) -> Reg {
        let result = self.body.reg(ValType::Str);
        let unreadable = self.body.new_block();
        let join = self.body.new_block();
        let zero = self.constant(0, span);
        let is_null = self.body.reg(ValType::Long);
        self.body.emit(
            Op::Compare {
                dst: is_null,
                op: CmpOp::Eq,
                lhs: addr,
                rhs: zero,
            },
            span,
        );
        self.body.push_catch(Catch {
            handler: unreadable,
            message: None,
        });
        let read = self.body.new_block();
        self.body.branch(is_null, unreadable, read, span);
        self.body.switch_to(read);
        let name = if self.user_memory {
            "user_string"
        } else {
            "kernel_string"
        };
        let text = self.body.reg(ValType::Str);
        self.body.emit(
            Op::Builtin {
                dst: Some(text),
                name: name.to_string(),
                args: vec![addr],
            },
            span,
        );
        let format = self.m.format("\"%s\"");
        self.body.emit(
            Op::Sprintf {
                dst: result,
                format,
                args: vec![text],
            },
            span,
        );
        self.body.pop_catch();
        self.body.jump_to(join, span);
        self.body.switch_to(unreadable);
        let format = self.m.format("%#x");
        self.body.emit(
            Op::Sprintf {
                dst: result,
                format,
                args: vec![addr],
            },
            span,
        );
        self.body.jump_to(join, span);
        self.body.switch_to(join);
        result
    }

    fn pretty_lit(&mut self, out: &mut PrettyText, text: &str) {
        out.format.push_str(&text.replace('%', "%%"));
        out.written += text.len();
    }

    fn pretty_arg(&mut self, out: &mut PrettyText, directive: &str, value: Reg, span: Span) {
        out.format.push_str(directive);
        out.args.push(value);
        out.written += 1;
        if out.args.len() == PRETTY_ARGS_PER_SPRINTF {
            self.pretty_flush(out, span);
        }
    }

    /// Formats what is pending and appends it to the text so far.
    fn pretty_flush(&mut self, out: &mut PrettyText, span: Span) {
        if out.format.is_empty() {
            return;
        }
        let format = self.m.format(&std::mem::take(&mut out.format));
        let part = self.body.reg(ValType::Str);
        let args = std::mem::take(&mut out.args);
        self.body.emit(
            Op::Sprintf {
                dst: part,
                format,
                args,
            },
            span,
        );
        out.text = Some(match out.text {
            Some(before) => self.concat(before, part, span),
            None => part,
        });
    }
}

/// True when printing `shape` from `cursor` reads memory that may fault.
fn reads_memory(cursor: Cursor, shape: &PrettyShape) -> bool {
    let in_memory = matches!(cursor, Cursor::Memory(_));
    match shape {
        PrettyShape::Integer { .. } | PrettyShape::Pointer | PrettyShape::StringPointer => {
            in_memory
        }
        PrettyShape::Text(_) => false,
        PrettyShape::CharArray { .. } => true,
        PrettyShape::Deref(inner) => in_memory || reads_memory(Cursor::Memory(Reg(0)), inner),
        PrettyShape::Struct(members) => members
            .iter()
            .any(|m| reads_memory(Cursor::Memory(Reg(0)), &m.shape)),
        PrettyShape::Array { len, elem, .. } => {
            *len > 0 && reads_memory(Cursor::Memory(Reg(0)), elem)
        }
    }
}

/// Arguments per `sprintf` of a pretty-printed value: `bpf_snprintf`
/// takes at most 12, and fewer keep each call's scratch small.
const PRETTY_ARGS_PER_SPRINTF: usize = 8;

/// A pretty-printed value being built: pending format text and arguments,
/// and the text formatted so far.
struct PrettyText {
    format: String,
    args: Vec<Reg>,
    text: Option<Reg>,
    /// A lower bound on the bytes so far: past MAXSTRINGLEN the rest would
    /// be cut anyway, so no more members are read.
    written: usize,
    limit: usize,
}

impl PrettyText {
    fn full(&self) -> bool {
        self.written >= self.limit
    }
}
