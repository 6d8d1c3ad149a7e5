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
use crate::ir::{BinOp, Op, Reg, ValType};
use crate::sema::hir::{
    AccessBase, AccessStep, AccessValue, Bitfield, ContextAccess, ContextSource, ContextVar,
};
use crate::source::Span;

#[derive(Clone, Copy)]
enum Cursor {
    Value(Reg),
    /// The address of an object in memory.
    Memory(Reg),
}

impl FnLowering<'_, '_> {
    pub(super) fn context_access(&mut self, access: &ContextAccess, span: Span) -> Reg {
        if let AccessValue::Pretty(_) = access.value {
            self.m
                .unsupported("pretty-printing kernel data (`$var$`, `$var$$`)", span);
            return self.const_str("", span);
        }
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
            (AccessValue::Pretty(_), _) => self.const_str("", span),
        }
    }

    /// The raw value of a context variable.
    fn context_var(&mut self, var: &ContextVar, signed: bool, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        let op = match var.source {
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
        if self.side == crate::sema::hir::Placement::Host {
            // Host code has no way into kernel memory (`%m` aside, which
            // goes through /proc/kcore for printing only).
            self.m.unsupported(
                "reading kernel memory (`@cast(...)->member`, `->` on a pointer) in a probe \
                 that runs on the host (begin, end, error, timer)",
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

    /// `$$vars`, `$$parms`, `$$locals`, `$$return`: `name=0x...` pieces.
    pub(super) fn bulk(
        &mut self,
        vars: &[ContextVar],
        pretty: Option<PrettyDepth>,
        span: Span,
    ) -> Reg {
        if pretty.is_some() {
            self.m
                .unsupported("pretty-printed bulk context (`$$vars$`)", span);
            return self.const_str("", span);
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
}
