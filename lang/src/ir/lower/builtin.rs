//! Built-in calls. Printing becomes `Printf` with a format interned in the
//! module (`print`/`println`/`printd` get a synthesized one), histograms
//! become `PrintHist`, `exit()` and `error()` their own op and terminator;
//! everything else is `Op::Builtin` by name for the backends.

use super::FnLowering;
use crate::ast::StatOp;
use crate::diag::Diagnostic;
use crate::ir::{BinOp, CmpOp, Failure, HistKind, Op, PrintArg, Reg, SymbolText, Term, ValType};
use crate::kernel::TracepointArgs;
use crate::sema::builtins::{self, ReturnType};
use crate::sema::hir::{Expr, ExprKind, ProbeKind, Type};
use crate::source::Span;

/// Arguments `int_arg(N)` and friends can name: the registers the BPF
/// backend reads from `pt_regs` (x86_64 SysV).
const REGISTER_ARGS: i64 = 6;

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
            // stap's `log(msg)` is `printf("%s\n", msg)`.
            "log" => {
                self.print(args, true, span);
                None
            }
            // `assert(e[, msg])` is `if (!e) error(msg)`, stap's default
            // message being "Assertion failed".
            "assert" => {
                let cond = self.value(args.first()?);
                let message = match args.get(1) {
                    Some(arg) => self.value(arg),
                    None => self.const_str("Assertion failed", span),
                };
                let fail = self.body.new_block();
                let ok = self.body.new_block();
                self.body.branch(cond, ok, fail, span);
                self.body.switch_to(fail);
                self.body
                    .terminate(Term::Fail(Failure::Explicit(message)), span);
                self.body.switch_to(ok);
                None
            }
            // stap: n above 2**20 (as unsigned: a negative one too) is an
            // error; else 32 random bits scaled into [0, n) by a multiply
            // and a shift, so that n = 0 gives 0 without a division.
            "randint" => {
                let n = self.value(args.first()?);
                let (zero, limit) = (self.constant(0, span), self.constant(1 << 20, span));
                let negative = self.compare(CmpOp::Lt, n, zero, span);
                let wide = self.compare(CmpOp::Gt, n, limit, span);
                let bad = self.long_op(BinOp::Or, negative, wide, span);
                let fail = self.body.new_block();
                let ok = self.body.new_block();
                self.body.branch(bad, fail, ok, span);
                self.body.switch_to(fail);
                let message = self.const_str("range too wide", span);
                self.body
                    .terminate(Term::Fail(Failure::Explicit(message)), span);
                self.body.switch_to(ok);
                let bits = self.body.reg(ValType::Long);
                self.body.emit(
                    Op::Builtin {
                        dst: Some(bits),
                        name: builtins::RANDOM_U32.to_string(),
                        args: Vec::new(),
                    },
                    span,
                );
                let scaled = self.long_op(BinOp::Mul, bits, n, span);
                let shift = self.constant(32, span);
                Some(self.long_op(BinOp::Shr, scaled, shift, span))
            }
            "print_backtrace" | "print_ubacktrace" if self.is_kernel() => {
                let how = SymbolText::Stack {
                    user: name == "print_ubacktrace",
                    full: true,
                };
                let format = self.m.format("%s");
                let addr = self.constant(0, span);
                self.body.emit(
                    Op::Printf {
                        format,
                        args: vec![PrintArg::Symbol { addr, how }],
                    },
                    span,
                );
                None
            }
            // Stacks as string values in kernel code: only the host can
            // name frames, so the value is a deferred stack (see
            // `deferred_stack`) that the host names when it is printed.
            "sprint_backtrace" | "sprint_ubacktrace" if self.is_kernel() => {
                let user = name == "sprint_ubacktrace";
                let source = if user { "ubacktrace" } else { "backtrace" };
                let addresses = self.body.reg(ValType::Str);
                self.body.emit(
                    Op::Builtin {
                        dst: Some(addresses),
                        name: source.to_string(),
                        args: Vec::new(),
                    },
                    span,
                );
                Some(self.deferred_stack(addresses, user, false, span))
            }
            // One user address: the host names it against the current
            // process's mappings when the value is printed.
            "usymname" | "usymdata" | "umodname" if self.is_kernel() => {
                let addr = self.value(args.first()?);
                let format = self.m.format("0x%x");
                let text = self.body.reg(ValType::Str);
                self.body.emit(
                    Op::Sprintf {
                        dst: text,
                        format,
                        args: vec![addr],
                    },
                    span,
                );
                let kind = match name {
                    "usymname" => 'n',
                    "usymdata" => 'd',
                    _ => 'm',
                };
                Some(self.deferred(kind, text, span))
            }
            // stap's ` ADDR : symdata\n` per address: print_syms' text.
            "sprint_syms" | "sprint_usyms" if self.is_kernel() => {
                let addresses = self.value(args.first()?);
                Some(self.deferred_stack(addresses, name == "sprint_usyms", true, span))
            }
            "print_ubacktrace_brief" if self.is_kernel() => {
                let addresses = self.body.reg(ValType::Str);
                self.body.emit(
                    Op::Builtin {
                        dst: Some(addresses),
                        name: "ubacktrace".to_string(),
                        args: Vec::new(),
                    },
                    span,
                );
                let text = self.deferred('b', addresses, span);
                self.print_text(text, span);
                None
            }
            "sprint_stack" | "sprint_ustack" if self.is_kernel() => {
                let addresses = self.value(args.first()?);
                Some(self.deferred_stack(addresses, name == "sprint_ustack", false, span))
            }
            "print_stack" | "print_syms" | "print_ustack" | "print_usyms" if self.is_kernel() => {
                let addresses = self.value(args.first()?);
                let user = matches!(name, "print_ustack" | "print_usyms");
                let text = self.deferred_stack(addresses, user, true, span);
                self.print_text(text, span);
                None
            }
            "printd" | "printdln" | "sprintd" => self.delimited(name, args, span),
            // stap defines both through `cmdline_args(n, m, delim)`.
            "cmdline_str" | "cmdline_arg" => {
                let (first, last, delim) = match args.first() {
                    Some(n) => {
                        let n = self.value(n);
                        (n, n, "")
                    }
                    None => (self.constant(0, span), self.constant(-1, span), " "),
                };
                let delim = self.const_str(delim, span);
                let dst = self.body.reg(ValType::Str);
                self.body.emit(
                    Op::Builtin {
                        dst: Some(dst),
                        name: "cmdline_args".to_string(),
                        args: vec![first, last, delim],
                    },
                    span,
                );
                Some(dst)
            }
            "exit" => {
                self.body.emit(Op::Exit, span);
                None
            }
            "int_arg" | "uint_arg" | "long_arg" | "ulong_arg" | "pointer_arg" => {
                self.register_arg(name, args, span)
            }
            "returnval" => Some(self.return_value(span)),
            "register" | "u_register" => self.named_register(name, args, span),
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
                let builtin = builtins::lookup(name);
                if self.side == crate::sema::hir::Placement::Host
                    && builtin.is_some_and(|b| !b.host)
                {
                    // Needs a kernel probe's context (its task, registers
                    // or kernel memory), which host probes do not have.
                    self.m.unsupported(
                        format!(
                            "{name}() in a probe that runs on the host (begin, end, error, timer)"
                        ),
                        span,
                    );
                }
                if self.side == crate::sema::hir::Placement::Kernel
                    && builtin.is_some_and(|b| !b.kernel)
                {
                    self.m.unsupported(
                        format!("{name}() in a kernel probe (call it from a host probe)"),
                        span,
                    );
                }
                let ret = builtin.map_or(ReturnType::Void, |b| b.ret);
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

    /// `int_arg(n)` and friends: argument register `n - 1` of the probed
    /// function, narrowed to 32 bits for `int_arg`/`uint_arg`.
    fn register_arg(&mut self, name: &str, args: &[Expr], span: Span) -> Option<Reg> {
        let n = match args.first().map(|a| &a.kind) {
            Some(ExprKind::Long(n)) if (1..=REGISTER_ARGS).contains(n) => *n,
            _ => {
                self.m.report(
                    Diagnostic::error(format!(
                        "{name}() needs a constant argument number from 1 to {REGISTER_ARGS}"
                    ))
                    .at(args.first().map_or(span, |a| a.span), "not a constant 1..6"),
                );
                return Some(self.constant(0, span));
            }
        };
        let dst = self.body.reg(ValType::Long);
        match self.probe_kind {
            Some(ProbeKind::KernelFunction { .. } | ProbeKind::Process { .. }) | None => {
                // (In a function: it reads whatever probe calls it.)
                let index = (n - 1) as u32;
                self.body.emit(Op::ContextArg { dst, index }, span);
            }
            // stap's nd_syscall.* probes the system call's function and
            // reads its arguments as registers; here nd_syscall.* is the
            // syscalls:sys_enter_* event, whose fields are the same
            // arguments in order.
            Some(ProbeKind::Tracepoint {
                system,
                name: event,
                args: TracepointArgs::Classic(fields),
            }) if system == "syscalls" && event.starts_with("sys_enter_") => {
                let field = fields
                    .iter()
                    .filter(|f| f.name != "__syscall_nr")
                    .nth((n - 1) as usize);
                match field {
                    Some(f) => self.body.emit(
                        Op::ContextField {
                            dst,
                            offset: f.offset,
                            size: f.size,
                            signed: false,
                        },
                        span,
                    ),
                    // Past the call's last argument: stap reads a register
                    // the call does not use.
                    None => return Some(self.constant(0, span)),
                }
            }
            Some(_) => {
                self.m.report(
                    Diagnostic::error(format!(
                        "{name}() is only available in kernel.function and process probes, and at the entry of a system call"
                    ))
                    .at(span, "this probe has no function arguments"),
                );
                return Some(self.constant(0, span));
            }
        }
        let narrowed = match name {
            "int_arg" => {
                // Sign-extend the low 32 bits: shift them up, then back down.
                let shift = self.constant(32, span);
                let up = self.long_op(BinOp::Shl, dst, shift, span);
                self.long_op(BinOp::Shr, up, shift, span)
            }
            "uint_arg" => {
                let mask = self.constant(0xffff_ffff, span);
                self.long_op(BinOp::And, dst, mask, span)
            }
            _ => dst,
        };
        Some(narrowed)
    }

    /// `returnval()`: stap's guess at the probed function's return value
    /// from the return register. Here it is exact where there is one: the
    /// return of a kernel or user function, and the `ret` field of a
    /// system call's exit event (so it also works in tracepoint-backed
    /// `.return` aliases such as `vfs.read.return` on this host). Anywhere
    /// else it is stap's run-time error.
    fn return_value(&mut self, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        match self.probe_kind {
            Some(
                ProbeKind::KernelFunction {
                    is_return: true, ..
                }
                | ProbeKind::Process {
                    is_return: true, ..
                },
            )
            | None => {
                // (In a function: it reads whatever probe calls it; the
                // emitter refuses a probe that has no return value.)
                self.body.emit(Op::ContextReturn { dst }, span);
            }
            Some(ProbeKind::Tracepoint {
                system,
                name: event,
                args: TracepointArgs::Classic(fields),
            }) if system == "syscalls" && event.starts_with("sys_exit_") => {
                match fields.iter().find(|f| f.name == "ret") {
                    Some(f) => self.body.emit(
                        Op::ContextField {
                            dst,
                            offset: f.offset,
                            size: f.size,
                            signed: true,
                        },
                        span,
                    ),
                    None => return self.constant(0, span),
                }
            }
            Some(kind) => {
                // As stap: a run-time error where there is no return value
                // (a tapset alias may put the call in a branch of the
                // alias that never reaches it, so this is no compile error).
                let message = format!(
                    "returnval() not defined in this context ({}: only .return probes and system call exits have a return value)",
                    kind.family()
                );
                let message = self.const_str(&message, span);
                self.body
                    .terminate(Term::Fail(Failure::Explicit(message)), span);
                return self.constant(0, span);
            }
        }
        dst
    }

    /// `register("rdi")`/`u_register("edi")`: a register of the probe's
    /// `pt_regs` (kprobes and uprobes); a 4-byte name is sign-extended by
    /// `register`, zero-extended by `u_register`.
    fn named_register(&mut self, name: &str, args: &[Expr], span: Span) -> Option<Reg> {
        let register = match args.first().map(|a| &a.kind) {
            Some(ExprKind::Str(register)) => register.clone(),
            _ => {
                self.m.report(
                    Diagnostic::error(format!("{name}() needs a constant register name")).at(
                        args.first().map_or(span, |a| a.span),
                        "not a string literal",
                    ),
                );
                return Some(self.constant(0, span));
            }
        };
        let Some((offset, bytes)) = crate::sdt::named_register(&register) else {
            self.m.report(
                Diagnostic::error(format!("{name}(): no x86_64 register `{register}`"))
                    .at(args.first().map_or(span, |a| a.span), "unknown register")
                    .note("the 8-byte names (rax, rdi, rip, r8...) and the 4-byte ones (eax, edi, r8d...) are known"),
            );
            return Some(self.constant(0, span));
        };
        let has_registers = match self.probe_kind {
            Some(ProbeKind::Process { .. }) | None => true,
            Some(ProbeKind::KernelFunction { mechanism, .. }) => {
                *mechanism == crate::ir::FunctionMechanism::Kprobe
            }
            Some(_) => false,
        };
        if !has_registers {
            self.m.report(
                Diagnostic::error(format!(
                    "{name}() needs the registers of a kprobe or uprobe (kernel.function probes with --kernel-probes=kprobe, process probes)"
                ))
                .at(span, "this probe has no saved registers"),
            );
            return Some(self.constant(0, span));
        }
        let dst = self.pt_regs(offset, span);
        if bytes == 8 {
            return Some(dst);
        }
        if name == "register" {
            let shift = self.constant(32, span);
            let up = self.long_op(BinOp::Shl, dst, shift, span);
            return Some(self.long_op(BinOp::Shr, up, shift, span));
        }
        let mask = self.constant(0xffff_ffff, span);
        Some(self.long_op(BinOp::And, dst, mask, span))
    }

    fn compare(&mut self, op: CmpOp, lhs: Reg, rhs: Reg, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        self.body.emit(Op::Compare { dst, op, lhs, rhs }, span);
        dst
    }

    fn long_op(&mut self, op: BinOp, lhs: Reg, rhs: Reg, span: Span) -> Reg {
        let dst = self.body.reg(ValType::Long);
        self.body.emit(Op::Binary { dst, op, lhs, rhs }, span);
        dst
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

    /// `printf("%s", text)`: how the print_* forms of deferred values
    /// print the text the host will name.
    fn print_text(&mut self, text: Reg, span: Span) {
        let format = self.m.format("%s");
        self.body.emit(
            Op::Printf {
                format,
                args: vec![PrintArg::Value(text)],
            },
            span,
        );
    }

    /// A stack that only the host can name, as a kernel string value:
    /// `ESC kind [tgid ':'] addresses ESC`, where `addresses` is a
    /// `backtrace()`/`ubacktrace()` string, `kind` is `k`/`u` (kernel or
    /// user frames, `sprint_stack`'s `name+0xoff [module]` lines) or
    /// `K`/`U` (`print_stack`'s ` 0xADDR : name+off/size [module]`), and
    /// `tgid` (user stacks) the process whose mappings name the frames.
    /// Built with concatenations, not `sprintf`: `bpf_snprintf` refuses a
    /// format with an unprintable byte. The host replaces every such span
    /// by the named frames wherever it prints a string
    /// (`runtime/src/host/deferred.rs`).
    fn deferred_stack(&mut self, addresses: Reg, user: bool, full: bool, span: Span) -> Reg {
        let kind = match (user, full) {
            (false, false) => 'k',
            (false, true) => 'K',
            (true, false) => 'u',
            (true, true) => 'U',
        };
        self.deferred(kind, addresses, span)
    }

    /// `ESC kind [tgid ':'] addresses ESC`: a value only the host can
    /// name (`runtime/src/host/deferred.rs` has the kinds). Every kind but
    /// the kernel stack's names user addresses, of the current process.
    fn deferred(&mut self, kind: char, addresses: Reg, span: Span) -> Reg {
        let mut head = self.const_str(&format!("\u{1b}{kind}"), span);
        if !matches!(kind, 'k' | 'K') {
            let tgid = self.body.reg(ValType::Long);
            self.body.emit(
                Op::Builtin {
                    dst: Some(tgid),
                    name: "pid".to_string(),
                    args: Vec::new(),
                },
                span,
            );
            let format = self.m.format("%d:");
            let text = self.body.reg(ValType::Str);
            self.body.emit(
                Op::Sprintf {
                    dst: text,
                    format,
                    args: vec![tgid],
                },
                span,
            );
            head = self.concat(head, text, span);
        }
        let body = self.concat(head, addresses, span);
        let end = self.const_str("\u{1b}", span);
        self.concat(body, end, span)
    }

    /// printf arguments. In kernel code `symname(a)`, `symdata(a)`,
    /// `modname(a)` and `enum_name("E", v)` travel as the address or value:
    /// only the host can resolve them.
    fn print_args(&mut self, args: &[Expr]) -> Vec<PrintArg> {
        let mut out = Vec::with_capacity(args.len());
        for (i, arg) in args.iter().enumerate() {
            let later = &args[i + 1..];
            if let Some(how) = self.stack_arg(arg) {
                let addr = self.constant(0, arg.span);
                out.push(PrintArg::Symbol { addr, how });
            } else if let Some((how, addr)) = self.symbol_arg(arg) {
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

    /// `sprint_backtrace()` and `sprint_ubacktrace()` as a print argument
    /// in kernel code: the stack travels, the host names its frames.
    fn stack_arg(&self, arg: &Expr) -> Option<SymbolText> {
        if !self.is_kernel() {
            return None;
        }
        match &arg.kind {
            ExprKind::Builtin { name, args } if args.is_empty() => match name.as_str() {
                "sprint_backtrace" => Some(SymbolText::Stack {
                    user: false,
                    full: false,
                }),
                "sprint_ubacktrace" => Some(SymbolText::Stack {
                    user: true,
                    full: false,
                }),
                _ => None,
            },
            _ => None,
        }
    }

    fn symbol_arg<'e>(&mut self, arg: &'e Expr) -> Option<(SymbolText, &'e Expr)> {
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
            // BPF has no calendar: the seconds travel, the host formats.
            "ctime" => SymbolText::Time { local: false },
            "tz_ctime" => SymbolText::Time { local: true },
            // BPF cannot read BTF: the value travels and the host names it.
            "enum_name" => {
                return match &args[..] {
                    [
                        Expr {
                            kind: ExprKind::Str(enum_type),
                            ..
                        },
                        value,
                    ] => Some((SymbolText::Enum(self.m.string(enum_type)), value)),
                    _ => None,
                };
            }
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
            if let Some(how) = self.stack_arg(arg) {
                let addr = self.constant(0, arg.span);
                pending.text.push_str("%s");
                pending.args.push(PrintArg::Symbol { addr, how });
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

#[cfg(test)]
mod tests {
    use crate::diag::render_plain;
    use crate::ir::{self, BinOp, Module, Op};
    use crate::sema::ElabOptions;
    use crate::testing::{FakeKernel, try_elaborate};

    fn lower(script: &str) -> Result<Module, String> {
        let (program, map) = try_elaborate(script, &FakeKernel::new(), &ElabOptions::default())?;
        ir::lower::lower(&program).map_err(|d| render_plain(&map, &d))
    }

    #[test]
    fn kernel_only_builtins_in_host_probes_are_unsupported() {
        let err = lower("probe timer.s(1) { println(user_long(0), jiffies()) }").unwrap_err();
        assert!(
            err.contains("unsupported: user_long() in a probe that runs on the host"),
            "{err}"
        );
        assert!(err.contains("unsupported: jiffies()"), "{err}");
        // Host-capable ones, and the same call in a kernel probe, lower.
        assert!(lower("probe begin { print_backtrace(); println(pp()) }").is_ok());
        // Kernel memory: the host reads it through /proc/kcore.
        assert!(lower("probe end { println(kernel_long(0), kernel_string_n(0, 4)) }").is_ok());
        assert!(lower(r#"probe kernel.trace("kfree_skb") { println(kernel_long(0)) }"#).is_ok());
        // Stacks as values in kernel probes are deferred stacks.
        assert!(
            lower(
                r#"probe kernel.trace("kfree_skb") { s = sprint_ubacktrace() . sprint_stack(backtrace()); print_syms(backtrace()); print_ustack(ubacktrace()); println(s) }"#
            )
            .is_ok()
        );
        let err = lower(r#"probe kernel.trace("kfree_skb") { println(tokenize("1", " ")) }"#)
            .unwrap_err();
        assert!(
            err.contains("unsupported: tokenize() in a kernel probe"),
            "{err}"
        );
    }

    fn ops(module: &Module) -> Vec<Op> {
        module.functions[0]
            .blocks
            .iter()
            .flat_map(|b| b.insts.iter().map(|i| i.op.clone()))
            .collect()
    }

    /// In kernel printf arguments, `enum_name` travels as the value with
    /// the enum's name as a string constant; the host names the value.
    #[test]
    fn enum_name_in_a_kernel_printf_is_resolved_by_the_host() {
        let module = lower(
            r#"probe kernel.trace("kfree_skb") {
                 printf("%s\n", enum_name("skb_drop_reason", $reason))
               }"#,
        )
        .unwrap_or_else(|d| panic!("lowering failed:\n{d}"));
        let handler = module.functions[module.probes[0].function.0 as usize]
            .blocks
            .iter();
        let how = handler
            .flat_map(|b| b.insts.iter())
            .find_map(|i| match &i.op {
                Op::Printf { args, .. } => match args[..] {
                    [ir::PrintArg::Symbol { how, .. }] => Some(how),
                    _ => None,
                },
                _ => None,
            })
            .expect("a printf with one symbol argument");
        let ir::SymbolText::Enum(name) = how else {
            panic!("not an enum argument: {how:?}");
        };
        assert_eq!(module.string(name), "skb_drop_reason");
    }

    #[test]
    fn register_args_read_context_arguments_and_narrow_ints() {
        let module = lower(
            r#"probe process("/bin/true").function("main") {
                 printf("%d %d %d %d %d\n", int_arg(1), uint_arg(2), long_arg(3),
                        ulong_arg(4), pointer_arg(6))
               }"#,
        )
        .unwrap_or_else(|d| panic!("lowering failed:\n{d}"));
        let ops = ops(&module);
        let indexes: Vec<u32> = ops
            .iter()
            .filter_map(|op| match op {
                Op::ContextArg { index, .. } => Some(*index),
                _ => None,
            })
            .collect();
        assert_eq!(indexes, [0, 1, 2, 3, 5]);
        let binary: Vec<BinOp> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Binary { op, .. } => Some(*op),
                _ => None,
            })
            .collect();
        // int_arg: shift up and back down (sign); uint_arg: mask.
        assert_eq!(binary, [BinOp::Shl, BinOp::Shr, BinOp::And]);
        assert!(ops.iter().any(|op| matches!(
            op,
            Op::Const {
                value: 0xffff_ffff,
                ..
            }
        )));
        assert!(
            ops.iter()
                .any(|op| matches!(op, Op::Const { value: 32, .. }))
        );
    }

    #[test]
    fn register_args_need_a_constant_from_1_to_6_in_a_function_probe() {
        let errors = lower(
            r#"probe process("/bin/true").function("main") { x = 2; println(int_arg(x), long_arg(7)) }
               probe kernel.trace("kfree_skb") { println(pointer_arg(1)) }"#,
        )
        .expect_err("must be refused");
        assert!(
            errors.contains("int_arg() needs a constant argument number from 1 to 6"),
            "{errors}"
        );
        assert!(errors.contains("long_arg() needs a constant"), "{errors}");
        assert!(
            errors
                .contains("pointer_arg() is only available in kernel.function and process probes"),
            "{errors}"
        );
    }
}
