//! Expressions. Each evaluates into a register: a local's own register, or
//! a fresh one. Assignments and `++`/`--` whose value is unused take the
//! atomic forms (`AddGlobal`, `MapAdd`) in kernel code, where several CPUs
//! update the same map at once.

use super::{FnLowering, val_type};
use crate::ast::{AssignOp, BinaryOp, StatOp, UnaryOp};
use crate::diag::Diagnostic;
use crate::ir::{
    BinOp, CmpOp, Failure, HistKind, LinearHist, Op, Reg, StatValue, Term, UnOp, ValType,
};
use crate::sema::builtins::REGEX_MATCH;
use crate::sema::concurrency;
use crate::sema::hir::{AccessBase, ContextSource, Expr, ExprKind, FunctionMechanism, GlobalId};
use crate::sema::hir::{ProbeKind, Type};
use crate::source::Span;

/// Where an assignment stores.
enum Place {
    Local(Reg),
    Global(GlobalId),
    Element(GlobalId, Vec<Reg>),
}

impl FnLowering<'_, '_> {
    /// Evaluates for the value. Void built-ins (stap types them long) give 0.
    pub(super) fn value(&mut self, e: &Expr) -> Reg {
        match self.eval(e, true) {
            Some(reg) => reg,
            None => {
                let reg = self.body.reg(val_type(e.ty));
                self.zero_into(reg, e.span);
                reg
            }
        }
    }

    /// Evaluates for the side effects only (an expression statement).
    pub(super) fn effect(&mut self, e: &Expr) {
        self.eval(e, false);
    }

    /// Evaluates a list left to right. A local read early in the list is
    /// copied when a later element assigns, so each value is the one seen
    /// at its own turn.
    pub(super) fn values(&mut self, exprs: &[Expr]) -> Vec<Reg> {
        let mut regs = Vec::with_capacity(exprs.len());
        for (i, e) in exprs.iter().enumerate() {
            let reg = self.value(e);
            regs.push(self.stable(reg, &exprs[i + 1..], e.span));
        }
        regs
    }

    /// `reg`, or a copy of it when it is a local's register and one of
    /// `later` may assign to a local before `reg` is used.
    pub(super) fn stable(&mut self, reg: Reg, later: &[Expr], span: Span) -> Reg {
        let is_local = (reg.0 as usize) < self.local_regs.len();
        if !is_local || !later.iter().any(assigns) {
            return reg;
        }
        let copy = self.body.reg(self.body.reg_type(reg));
        self.body.emit(
            Op::Move {
                dst: copy,
                src: reg,
            },
            span,
        );
        copy
    }

    pub(super) fn constant(&mut self, value: i64, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        self.body.emit(Op::Const { dst, value }, span);
        dst
    }

    pub(super) fn const_str(&mut self, text: &str, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Str);
        let id = self.m.string(text);
        self.body.emit(Op::ConstStr { dst, id }, span);
        dst
    }

    fn eval(&mut self, e: &Expr, want: bool) -> Option<Reg> {
        let span = e.span;
        match &e.kind {
            ExprKind::Long(n) => Some(self.constant(*n, span)),
            ExprKind::Str(s) => Some(self.const_str(s, span)),
            ExprKind::Local(l) => self.local_regs.get(l.0 as usize).copied(),
            ExprKind::Global(global) => {
                let dst = self.body.reg(val_type(e.ty));
                self.body.emit(
                    Op::LoadGlobal {
                        dst,
                        global: *global,
                    },
                    span,
                );
                Some(dst)
            }
            ExprKind::Index { global, keys } => {
                let keys = self.values(keys);
                let dst = self.body.reg(val_type(e.ty));
                self.body.emit(
                    Op::MapGet {
                        dst,
                        global: *global,
                        keys,
                    },
                    span,
                );
                Some(dst)
            }
            ExprKind::Context(access) => Some(self.context_access(access, span)),
            ExprKind::Bulk {
                vars,
                pretty,
                shapes,
                ..
            } => Some(self.bulk(vars, *pretty, shapes, span)),
            ExprKind::Call { function, args } => {
                let args = self.values(args);
                let program = self.m.program;
                let Some(func) = self.m.callee(*function, self.side) else {
                    let name = &program.function(*function).name;
                    self.m.report(
                        Diagnostic::error(format!(
                            "internal: `{name}` has no {} copy",
                            super::side_name(self.side)
                        ))
                        .at(span, "called here"),
                    );
                    return None;
                };
                let dst = self.body.reg(val_type(program.function(*function).ret));
                self.body.emit(
                    Op::Call {
                        dst: Some(dst),
                        func,
                        args,
                    },
                    span,
                );
                Some(dst)
            }
            ExprKind::Builtin { name, args } => self.builtin(name, args, span),
            ExprKind::Stat { op, operand, args } => self.stat_value(*op, operand, args, span),
            ExprKind::Entry(inner) => {
                if self.at_entry || self.entry_is_trivial(inner) {
                    Some(self.value(inner))
                } else if self.saved.is_some() {
                    Some(self.saved_entry(inner, span))
                } else {
                    self.m
                        .unsupported("@entry outside a kernel.function return probe", span);
                    None
                }
            }
            ExprKind::Unary { op, operand } => {
                let src = self.value(operand);
                let op = match op {
                    UnaryOp::Plus => return Some(src),
                    UnaryOp::Neg => UnOp::Neg,
                    UnaryOp::Not => UnOp::Not,
                    UnaryOp::BitNot => UnOp::BitNot,
                };
                let dst = self.body.reg(ValType::Long);
                self.body.emit(Op::Unary { dst, op, src }, span);
                Some(dst)
            }
            ExprKind::Binary { op, lhs, rhs } => Some(self.binary(*op, lhs, rhs, span)),
            ExprKind::Assign { op, target, value } => self.assign(*op, target, value, want, span),
            ExprKind::Crement {
                increment,
                prefix,
                target,
            } => self.crement(*increment, *prefix, target, want, span),
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                let dst = self.body.reg(val_type(e.ty));
                let holds = self.value(cond);
                let then_block = self.body.new_block();
                let else_block = self.body.new_block();
                let join = self.body.new_block();
                self.body.branch(holds, then_block, else_block, span);
                for (block, arm) in [(then_block, then), (else_block, otherwise)] {
                    self.body.switch_to(block);
                    let src = self.value(arm);
                    self.body.emit(Op::Move { dst, src }, arm.span);
                    self.body.jump_to(join, span);
                }
                Some(dst)
            }
            ExprKind::In { keys, global } => {
                let keys = self.values(keys);
                let dst = self.body.reg(ValType::Long);
                self.body.emit(
                    Op::MapContains {
                        dst,
                        global: *global,
                        keys,
                    },
                    span,
                );
                Some(dst)
            }
            ExprKind::Regex {
                negated,
                subject,
                pattern,
            } => self.regex(*negated, subject, pattern, span),
            ExprKind::Invalid => {
                self.m.report(
                    Diagnostic::error("internal: an invalid expression reached the IR lowering")
                        .at(span, "here"),
                );
                None
            }
        }
    }

    /// `s =~ re` becomes the built-in `regex_match` (on the host it also
    /// keeps the captures for `matched()`; in BPF it runs the pattern's
    /// DFA); `!~` negates it.
    fn regex(&mut self, negated: bool, subject: &Expr, pattern: &Expr, span: Span) -> Option<Reg> {
        let text = self.value(subject);
        let text = self.stable(text, std::slice::from_ref(pattern), subject.span);
        let args = vec![text, self.value(pattern)];
        let matched = self.body.reg(ValType::Long);
        self.body.emit(
            Op::Builtin {
                dst: Some(matched),
                name: REGEX_MATCH.to_string(),
                args,
            },
            span,
        );
        if !negated {
            return Some(matched);
        }
        let dst = self.body.reg(ValType::Long);
        self.body.emit(
            Op::Unary {
                dst,
                op: UnOp::Not,
                src: matched,
            },
            span,
        );
        Some(dst)
    }

    fn binary(&mut self, op: BinaryOp, lhs: &Expr, rhs: &Expr, span: Span) -> Reg {
        if matches!(op, BinaryOp::And | BinaryOp::Or) {
            return self.short_circuit(op == BinaryOp::And, lhs, rhs, span);
        }
        let l = self.value(lhs);
        let l = self.stable(l, std::slice::from_ref(rhs), lhs.span);
        let r = self.value(rhs);
        let cmp = match op {
            BinaryOp::Eq => Some(CmpOp::Eq),
            BinaryOp::Ne => Some(CmpOp::Ne),
            BinaryOp::Lt => Some(CmpOp::Lt),
            BinaryOp::Le => Some(CmpOp::Le),
            BinaryOp::Gt => Some(CmpOp::Gt),
            BinaryOp::Ge => Some(CmpOp::Ge),
            _ => None,
        };
        if let Some(cmp) = cmp {
            let dst = self.body.reg(ValType::Long);
            let op = if lhs.ty == Type::String {
                Op::StrCompare {
                    dst,
                    op: cmp,
                    lhs: l,
                    rhs: r,
                }
            } else {
                Op::Compare {
                    dst,
                    op: cmp,
                    lhs: l,
                    rhs: r,
                }
            };
            self.body.emit(op, span);
            return dst;
        }
        let ty = if op == BinaryOp::Concat {
            ValType::Str
        } else {
            ValType::Long
        };
        let dst = self.body.reg(ty);
        self.combine_into(dst, op, l, r, nonzero(rhs), span);
        dst
    }

    /// `dst = lhs op rhs` for the arithmetic and `.` operators; division
    /// and modulo first branch to a failure on a zero divisor, unless it is
    /// a non-zero constant (`divisor_nonzero`).
    fn combine_into(
        &mut self,
        dst: Reg,
        op: BinaryOp,
        lhs: Reg,
        rhs: Reg,
        divisor_nonzero: bool,
        span: Span,
    ) {
        if op == BinaryOp::Concat {
            self.body.emit(Op::Concat { dst, lhs, rhs }, span);
            return;
        }
        let Some(bin) = BinOp::from_ast(op) else {
            self.m.report(
                Diagnostic::error(format!("internal: `{}` is not arithmetic", op.symbol()))
                    .at(span, "here"),
            );
            return;
        };
        if matches!(bin, BinOp::Div | BinOp::Mod) && !divisor_nonzero {
            let ok = self.body.new_block();
            let fail = self.body.new_block();
            self.body.branch(rhs, ok, fail, span);
            self.body.switch_to(fail);
            self.body
                .terminate(Term::Fail(Failure::DivisionByZero), span);
            self.body.switch_to(ok);
        }
        self.body.emit(
            Op::Binary {
                dst,
                op: bin,
                lhs,
                rhs,
            },
            span,
        );
    }

    /// `a && b` / `a || b`: `b` is only evaluated when `a` does not decide.
    fn short_circuit(&mut self, is_and: bool, lhs: &Expr, rhs: &Expr, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        let l = self.value(lhs);
        self.body.emit(
            Op::Const {
                dst,
                value: i64::from(!is_and),
            },
            span,
        );
        let right = self.body.new_block();
        let join = self.body.new_block();
        if is_and {
            self.body.branch(l, right, join, span);
        } else {
            self.body.branch(l, join, right, span);
        }
        self.body.switch_to(right);
        let r = self.value(rhs);
        let zero = self.constant(0, span);
        self.body.emit(
            Op::Compare {
                dst,
                op: CmpOp::Ne,
                lhs: r,
                rhs: zero,
            },
            span,
        );
        self.body.jump_to(join, span);
        dst
    }

    fn assign(
        &mut self,
        op: AssignOp,
        target: &Expr,
        value: &Expr,
        want: bool,
        span: Span,
    ) -> Option<Reg> {
        match op {
            AssignOp::Aggregate => {
                let (global, keys) = self.stat_target(target)?;
                let v = self.value(value);
                self.body.emit(
                    Op::StatAdd {
                        global,
                        keys,
                        value: v,
                    },
                    span,
                );
                Some(v)
            }
            AssignOp::Set => {
                // `x = x + e` is `x += e`: one atomic add (sema/concurrency.rs).
                if !want
                    && let Some((delta, negate)) = concurrency::add_form(target, value)
                    && self.atomic_add(target, Some(delta), negate, span)
                {
                    return None;
                }
                let place = self.place(target)?;
                let v = self.value(value);
                self.store(place, v, span);
                Some(v)
            }
            AssignOp::Compound(bop) => {
                if !want && matches!(bop, BinaryOp::Add | BinaryOp::Sub) {
                    let negate = bop == BinaryOp::Sub;
                    if self.atomic_add(target, Some(value), negate, span) {
                        return None;
                    }
                }
                let place = self.place(target)?;
                let old = self.read(&place, target.ty, span);
                let old = self.stable(old, std::slice::from_ref(value), span);
                let v = self.value(value);
                let dst = match place {
                    Place::Local(reg) => reg,
                    _ => self.body.reg(val_type(target.ty)),
                };
                self.combine_into(dst, bop, old, v, nonzero(value), span);
                self.store(place, dst, span);
                Some(dst)
            }
        }
    }

    fn crement(
        &mut self,
        increment: bool,
        prefix: bool,
        target: &Expr,
        want: bool,
        span: Span,
    ) -> Option<Reg> {
        if !want && self.atomic_add(target, None, !increment, span) {
            return None;
        }
        let place = self.place(target)?;
        let old = self.read(&place, target.ty, span);
        // A postfix value is the old one; a local's register is about to change.
        let result_old = if want && !prefix && matches!(place, Place::Local(_)) {
            let copy = self.body.reg(ValType::Long);
            self.body.emit(
                Op::Move {
                    dst: copy,
                    src: old,
                },
                span,
            );
            copy
        } else {
            old
        };
        let one = self.constant(1, span);
        let dst = match place {
            Place::Local(reg) => reg,
            _ => self.body.reg(ValType::Long),
        };
        let op = if increment { BinOp::Add } else { BinOp::Sub };
        self.body.emit(
            Op::Binary {
                dst,
                op,
                lhs: old,
                rhs: one,
            },
            span,
        );
        self.store(place, dst, span);
        Some(if prefix { dst } else { result_old })
    }

    /// `g += v`, `a[k] -= v`, `g++`, ... in kernel code, as one atomic
    /// update. `value` is `None` for `++`/`--`. False when it does not apply.
    fn atomic_add(
        &mut self,
        target: &Expr,
        value: Option<&Expr>,
        negate: bool,
        span: Span,
    ) -> bool {
        if !self.is_kernel() || target.ty != Type::Long {
            return false;
        }
        let program = self.m.program;
        match &target.kind {
            ExprKind::Global(global) if !program.global(*global).is_array => {
                let delta = self.delta(value, negate, span);
                self.body.emit(
                    Op::AddGlobal {
                        global: *global,
                        delta,
                    },
                    span,
                );
                true
            }
            ExprKind::Index { global, keys } => {
                let keys = self.values(keys);
                let delta = self.delta(value, negate, span);
                self.body.emit(
                    Op::MapAdd {
                        global: *global,
                        keys,
                        delta,
                    },
                    span,
                );
                true
            }
            _ => false,
        }
    }

    fn delta(&mut self, value: Option<&Expr>, negate: bool, span: Span) -> Reg {
        match value {
            None => self.constant(if negate { -1 } else { 1 }, span),
            Some(v) => {
                let src = self.value(v);
                if !negate {
                    return src;
                }
                let dst = self.body.reg(ValType::Long);
                self.body.emit(
                    Op::Unary {
                        dst,
                        op: UnOp::Neg,
                        src,
                    },
                    span,
                );
                dst
            }
        }
    }

    /// Evaluates an assignment target's keys.
    fn place(&mut self, target: &Expr) -> Option<Place> {
        match &target.kind {
            ExprKind::Local(l) => self.local_regs.get(l.0 as usize).map(|r| Place::Local(*r)),
            ExprKind::Global(g) => Some(Place::Global(*g)),
            ExprKind::Index { global, keys } => Some(Place::Element(*global, self.values(keys))),
            _ => {
                self.m
                    .unsupported("assigning to this kind of expression", target.span);
                None
            }
        }
    }

    fn read(&mut self, place: &Place, ty: Type, span: Span) -> Reg {
        match place {
            Place::Local(reg) => *reg,
            Place::Global(global) => {
                let dst = self.body.reg(val_type(ty));
                self.body.emit(
                    Op::LoadGlobal {
                        dst,
                        global: *global,
                    },
                    span,
                );
                dst
            }
            Place::Element(global, keys) => {
                let dst = self.body.reg(val_type(ty));
                self.body.emit(
                    Op::MapGet {
                        dst,
                        global: *global,
                        keys: keys.clone(),
                    },
                    span,
                );
                dst
            }
        }
    }

    fn store(&mut self, place: Place, src: Reg, span: Span) {
        let op = match place {
            Place::Local(dst) if dst == src => return,
            Place::Local(dst) => Op::Move { dst, src },
            Place::Global(global) => Op::StoreGlobal { global, src },
            Place::Element(global, keys) => Op::MapSet { global, keys, src },
        };
        self.body.emit(op, span);
    }

    /// The statistic a `<<<` or an extractor names: a scalar or an element.
    pub(super) fn stat_target(&mut self, operand: &Expr) -> Option<(GlobalId, Vec<Reg>)> {
        match &operand.kind {
            ExprKind::Global(g) => Some((*g, Vec::new())),
            ExprKind::Index { global, keys } => Some((*global, self.values(keys))),
            _ => {
                self.m.report(
                    Diagnostic::error("internal: a statistic operand is not a global")
                        .at(operand.span, "here"),
                );
                None
            }
        }
    }

    /// `@count(s)`, `@avg(s[k])`, `@variance(s, 2)`, ...
    fn stat_value(&mut self, op: StatOp, operand: &Expr, args: &[Expr], span: Span) -> Option<Reg> {
        let shift = match (op, args.first()) {
            (StatOp::Variance, Some(arg)) => match constant_long(arg) {
                Some(n) if (0..64).contains(&n) => n as u32,
                _ => {
                    self.m.unsupported(
                        "a @variance shift that is not a constant between 0 and 63",
                        arg.span,
                    );
                    return None;
                }
            },
            _ => 0,
        };
        let Some(what) = StatValue::from_op(op, shift) else {
            self.m
                .unsupported(format!("@{} outside print()", op.name()), span);
            return None;
        };
        let (global, keys) = self.stat_target(operand)?;
        self.m.need(global, op);
        let dst = self.body.reg(ValType::Long);
        self.body.emit(
            Op::StatGet {
                dst,
                global,
                keys,
                what,
            },
            span,
        );
        Some(dst)
    }

    /// The layout of `@hist_log(s)` / `@hist_linear(s, lo, hi, width)`, or
    /// `None` (reported) when the bounds are not constants.
    pub(super) fn hist_kind(&mut self, op: StatOp, args: &[Expr], span: Span) -> Option<HistKind> {
        if op == StatOp::HistLog {
            return Some(HistKind::Log);
        }
        let bounds: Vec<i64> = args.iter().filter_map(constant_long).collect();
        match bounds[..] {
            [lo, hi, width] if width > 0 && hi > lo => {
                Some(HistKind::Linear(LinearHist { lo, hi, width }))
            }
            _ => {
                self.m.unsupported(
                    "@hist_linear bounds that are not constants (lo < hi, width > 0)",
                    span,
                );
                None
            }
        }
    }

    /// `@entry(e)` in a function return handler (kretprobe, or fexit for more than a plain argument): the entry probe saves
    /// `e` in a map keyed by thread id, and the handler's start loads it
    /// (0 or "" when the function was entered before the probes attached).
    fn saved_entry(&mut self, inner: &Expr, span: Span) -> Reg {
        let reg = self.body.reg(val_type(inner.ty));
        if assigns(inner) {
            self.m
                .unsupported("@entry of an expression that assigns", span);
            self.zero_into(reg, span);
            return reg;
        }
        let global = self.m.entry_global(inner.ty, span);
        if let Some(saved) = self.saved.as_mut() {
            saved.push((global, inner.clone(), reg));
        }
        reg
    }

    /// `@entry(e)` needs no entry probe when `e` is a constant, or an
    /// argument of a function probed with fexit (which sees the arguments).
    fn entry_is_trivial(&self, inner: &Expr) -> bool {
        match &inner.kind {
            ExprKind::Long(_) | ExprKind::Str(_) => true,
            ExprKind::Context(access) => {
                let fexit = matches!(
                    self.probe_kind,
                    Some(ProbeKind::KernelFunction {
                        mechanism: FunctionMechanism::Fentry,
                        is_return: true,
                        ..
                    })
                );
                let plain_param = matches!(
                    &access.base,
                    AccessBase::Var(v) if matches!(v.source, ContextSource::FunctionParam(_))
                );
                fexit && plain_param && access.steps.is_empty()
            }
            _ => false,
        }
    }
}

/// The value of a literal long, possibly negated.
fn constant_long(e: &Expr) -> Option<i64> {
    match &e.kind {
        ExprKind::Long(n) => Some(*n),
        ExprKind::Unary {
            op: UnaryOp::Neg,
            operand,
        } => constant_long(operand).map(i64::wrapping_neg),
        ExprKind::Unary {
            op: UnaryOp::Plus,
            operand,
        } => constant_long(operand),
        _ => None,
    }
}

/// True when `e` is a constant other than zero (a divisor needing no check).
fn nonzero(e: &Expr) -> bool {
    constant_long(e).is_some_and(|n| n != 0)
}

/// True when evaluating `e` may assign to a variable.
pub(super) fn assigns(e: &Expr) -> bool {
    let any = |es: &[Expr]| es.iter().any(assigns);
    match &e.kind {
        ExprKind::Assign { .. } | ExprKind::Crement { .. } => true,
        ExprKind::Long(_)
        | ExprKind::Str(_)
        | ExprKind::Local(_)
        | ExprKind::Global(_)
        | ExprKind::Bulk { .. }
        | ExprKind::Invalid => false,
        ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => any(keys),
        ExprKind::Context(access) => {
            let base = match &access.base {
                AccessBase::Cast { ptr, .. } => assigns(ptr),
                AccessBase::Var(_) => false,
            };
            base || access.steps.iter().any(|s| match s {
                crate::sema::hir::AccessStep::Subscript { index, .. } => assigns(index),
                crate::sema::hir::AccessStep::Member { .. } => false,
            })
        }
        ExprKind::Call { args, .. } | ExprKind::Builtin { args, .. } => any(args),
        ExprKind::Stat { operand, args, .. } => assigns(operand) || any(args),
        ExprKind::Entry(inner) | ExprKind::Unary { operand: inner, .. } => assigns(inner),
        ExprKind::Binary { lhs, rhs, .. } => assigns(lhs) || assigns(rhs),
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => assigns(cond) || assigns(then) || assigns(otherwise),
        ExprKind::Regex {
            subject, pattern, ..
        } => assigns(subject) || assigns(pattern),
    }
}
