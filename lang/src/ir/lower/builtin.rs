//! Built-in calls. Printing becomes `Printf` with a format interned in the
//! module (`print`/`println`/`printd` get a synthesized one), histograms
//! become `PrintHist`, `exit()` and `error()` their own op and terminator;
//! everything else is `Op::Builtin` by name for the backends.

use super::FnLowering;
use crate::ast::StatOp;
use crate::ir::{Failure, HistKind, Op, PrintArg, Reg, SymbolText, Term, ValType};
use crate::sema::builtins::{self, ReturnType};
use crate::sema::hir::{Expr, ExprKind, Type};
use crate::source::Span;

/// A format being assembled from pieces and the registers they consume.
#[derive(Default)]
struct PendingFormat {
    text: String,
    args: Vec<PrintArg>,
}

impl PendingFormat {
    fn conversion(&mut self, ty: Type, reg: Reg) {
        self.text
            .push_str(if ty == Type::String { "%s" } else { "%d" });
        self.args.push(PrintArg::Value(reg));
    }

    /// Literal text, with `%` escaped.
    fn literal(&mut self, text: &str) {
        self.text.push_str(&text.replace('%', "%%"));
    }
}

impl FnLowering<'_, '_> {
    pub(super) fn builtin(&mut self, name: &str, args: &[Expr], span: Span) -> Option<Reg> {
        match name {
            "printf" => {
                let text = self.literal_format(name, args.first(), span)?;
                let format = self.m.format(&text);
                let args = self.print_args(&args[1..]);
                self.body.emit(Op::Printf { format, args }, span);
                None
            }
            "sprintf" => {
                let text = self.literal_format(name, args.first(), span)?;
                let format = self.m.format(&text);
                let args = self.values(&args[1..]);
                let dst = self.body.reg(ValType::Str);
                self.body.emit(Op::Sprintf { dst, format, args }, span);
                Some(dst)
            }
            "print" | "println" => {
                self.print(args, name == "println", span);
                None
            }
            "printd" | "printdln" | "sprintd" => self.delimited(name, args, span),
            "exit" => {
                self.body.emit(Op::Exit, span);
                None
            }
            "error" => {
                let message = match args.first() {
                    Some(arg) => self.value(arg),
                    None => self.const_str("error", span),
                };
                self.body
                    .terminate(Term::Fail(Failure::Explicit(message)), span);
                None
            }
            _ => {
                let regs = self.values(args);
                let ret = builtins::lookup(name).map_or(ReturnType::Void, |b| b.ret);
                let dst = match ret {
                    ReturnType::Void => None,
                    ReturnType::Long => Some(self.body.reg(ValType::Long)),
                    ReturnType::String => Some(self.body.reg(ValType::Str)),
                };
                self.body.emit(
                    Op::Builtin {
                        dst,
                        name: name.to_string(),
                        args: regs,
                    },
                    span,
                );
                dst
            }
        }
    }

    /// The format of `printf`/`sprintf`: pass 2 checked it is a literal.
    fn literal_format(&mut self, name: &str, arg: Option<&Expr>, span: Span) -> Option<String> {
        match arg.map(|a| &a.kind) {
            Some(ExprKind::Str(text)) => Some(text.clone()),
            _ => {
                self.m.unsupported(
                    format!("a {name} format that is not a literal string"),
                    span,
                );
                None
            }
        }
    }

    /// printf arguments. In kernel code `symname(a)`, `symdata(a)` and
    /// `modname(a)` travel as the address: only the host can resolve it.
    fn print_args(&mut self, args: &[Expr]) -> Vec<PrintArg> {
        let mut out = Vec::with_capacity(args.len());
        for (i, arg) in args.iter().enumerate() {
            let later = &args[i + 1..];
            if let Some((how, addr)) = self.symbol_arg(arg) {
                let addr = self.value(addr);
                let addr = self.stable(addr, later, arg.span);
                out.push(PrintArg::Symbol { addr, how });
            } else {
                let reg = self.value(arg);
                out.push(PrintArg::Value(self.stable(reg, later, arg.span)));
            }
        }
        out
    }

    fn symbol_arg<'e>(&self, arg: &'e Expr) -> Option<(SymbolText, &'e Expr)> {
        if !self.is_kernel() {
            return None;
        }
        let ExprKind::Builtin { name, args } = &arg.kind else {
            return None;
        };
        let how = match name.as_str() {
            "symname" => SymbolText::Name,
            "symdata" => SymbolText::Data,
            "modname" => SymbolText::Module,
            _ => return None,
        };
        match &args[..] {
            [addr] => Some((how, addr)),
            _ => None,
        }
    }

    /// `print`/`println`: values back to back, histograms in their own op.
    fn print(&mut self, args: &[Expr], newline: bool, span: Span) {
        let mut pending = PendingFormat::default();
        for (i, arg) in args.iter().enumerate() {
            if let ExprKind::Stat {
                op: op @ (StatOp::HistLog | StatOp::HistLinear),
                operand,
                args: bounds,
            } = &arg.kind
            {
                self.flush(&mut pending, span);
                self.print_hist(*op, operand, bounds, arg.span);
                continue;
            }
            let reg = self.value(arg);
            let reg = self.stable(reg, &args[i + 1..], arg.span);
            pending.conversion(arg.ty, reg);
        }
        if newline {
            pending.literal("\n");
        }
        self.flush(&mut pending, span);
    }

    fn flush(&mut self, pending: &mut PendingFormat, span: Span) {
        if pending.text.is_empty() {
            return;
        }
        let pending = std::mem::take(pending);
        let format = self.m.format(&pending.text);
        self.body.emit(
            Op::Printf {
                format,
                args: pending.args,
            },
            span,
        );
    }

    fn print_hist(&mut self, op: StatOp, operand: &Expr, bounds: &[Expr], span: Span) {
        let Some(kind) = self.hist_kind(op, bounds, span) else {
            return;
        };
        let Some((global, keys)) = self.stat_target(operand) else {
            return;
        };
        match kind {
            HistKind::Log => self.m.need(global, op),
            HistKind::Linear(layout) => self.m.need_linear(global, layout, span),
        }
        self.body.emit(Op::PrintHist { global, keys, kind }, span);
    }

    /// `printd(delim, a, b, ...)`, `printdln`, `sprintd`: the values joined
    /// by the delimiter (spliced into the format when it is a literal).
    fn delimited(&mut self, name: &str, args: &[Expr], span: Span) -> Option<Reg> {
        let (delim, values) = args.split_first()?;
        let delim_reg = match &delim.kind {
            ExprKind::Str(_) => None,
            _ => {
                let reg = self.value(delim);
                Some(self.stable(reg, values, delim.span))
            }
        };
        let mut pending = PendingFormat::default();
        for (i, value) in values.iter().enumerate() {
            if i > 0 {
                match (&delim.kind, delim_reg) {
                    (ExprKind::Str(text), _) => pending.literal(text),
                    (_, Some(reg)) => pending.conversion(Type::String, reg),
                    (_, None) => {}
                }
            }
            let reg = self.value(value);
            let reg = self.stable(reg, &values[i + 1..], value.span);
            pending.conversion(value.ty, reg);
        }
        if name == "printdln" {
            pending.literal("\n");
        }
        if name == "sprintd" {
            let format = self.m.format(&pending.text);
            let dst = self.body.reg(ValType::Str);
            let args = pending
                .args
                .iter()
                .filter_map(|a| match a {
                    PrintArg::Value(r) => Some(*r),
                    PrintArg::Symbol { .. } => None,
                })
                .collect();
            self.body.emit(Op::Sprintf { dst, format, args }, span);
            return Some(dst);
        }
        self.flush(&mut pending, span);
        None
    }
}
