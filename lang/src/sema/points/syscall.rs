//! `syscall.NAME` and `syscall.NAME.return` for every system call of the
//! running kernel, and stap's synonyms `dw_syscall`, `nd_syscall`,
//! `nd1_syscall`, `nd2_syscall` and `tp_syscall`.
//!
//! The stdlib (stdlib/syscall/) defines the most-used calls as aliases with
//! stap's own variables and decoded strings. Every other call the kernel
//! traces (`syscalls:sys_enter_NAME` / `sys_exit_NAME`) is resolved here,
//! with variables derived from its trace event: `name`, one variable per
//! argument (named as the kernel names it), `argstr` and, on `.return`,
//! `retval` and `retstr`. They are set by a prologue built here, as an
//! alias's would be, so what a script does not read is elided like any
//! alias variable.

use std::borrow::Cow;

use super::{Component, ResolvedPoint, glob_match, has_wildcard};
use crate::ast::{self, AssignOp, Expr, ExprKind, Literal};
use crate::diag::Diagnostic;
use crate::kernel::{Tracepoint, TracepointArgs, TypeKind};
use crate::sema::hir::ProbeKind;
use crate::sema::symbols::Elaborator;
use crate::source::{Span, Spanned};

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &["syscall", "syscall.return"];

/// Families stap defines with the same variables as `syscall.*` (its
/// DWARF, non-DWARF kprobe and tracepoint flavours): here, one family.
const SYNONYMS: &[&str] = &[
    "dw_syscall",
    "nd_syscall",
    "nd1_syscall",
    "nd2_syscall",
    "tp_syscall",
];

/// `nd_syscall.open` as `syscall.open`: the synonyms have the same
/// variables, and our `syscall.*` already prefers tracepoints.
pub(super) fn unalias(comps: &[Component]) -> Cow<'_, [Component]> {
    match comps.first() {
        Some(first) if first.arg.is_none() && SYNONYMS.contains(&first.name.as_str()) => {
            let mut owned = comps.to_vec();
            owned[0].name = "syscall".to_string();
            Cow::Owned(owned)
        }
        _ => Cow::Borrowed(comps),
    }
}

/// The probe name of the call a `sys_enter_EVENT` event traces: the
/// event's, but without the `new` of the kernel's renamed entry points
/// (`newstat` is `syscall.stat`, as stap names it), and `sendfile64` under
/// stap's `syscall.sendfile`, which names both.
fn probe_name(event: &str) -> &str {
    if event == "sendfile64" {
        return "sendfile";
    }
    match event.strip_prefix("new") {
        Some(rest) if !rest.is_empty() => rest,
        _ => event,
    }
}

/// Calls stap's syscall tapset names that x86_64 kernels do not have:
/// 32-bit and 16-bit-uid forms, the socketcall multiplexer's `send` and
/// `recv`, calls of other architectures, and removed ones. stap's aliases
/// for them resolve to nothing there (all their points are optional), so
/// a script probing one still runs; here they match nothing too, instead
/// of being an unknown system call.
const ELSEWHERE: &[&str] = &[
    "bdflush",
    "chown16",
    "fadvise64_64",
    "fchown16",
    "fstatfs64",
    "ftruncate64",
    "get_thread_area",
    "gethostname",
    "lchown16",
    "llseek",
    "lookup_dcookie",
    "mmap2",
    "mmap32",
    "nfsservctl",
    "ni_syscall",
    "nice",
    "pipe32",
    "pselect7",
    "pwrite32",
    "readdir",
    "recv",
    "rt_sigaction32",
    "send",
    "set_thread_area",
    "setregid16",
    "setresgid16",
    "setresuid16",
    "setreuid16",
    "settimeofday32",
    "sgetmask",
    "sigaction",
    "sigaction32",
    "signal",
    "sigpending",
    "sigprocmask",
    "sigreturn",
    "sigsuspend",
    "ssetmask",
    "statfs64",
    "stime",
    "sysctl",
    "sysctl32",
    "timerfd",
    "tux",
    "uselib",
    "ustat32",
    "vm86_warning",
    "waitpid",
];

/// The variables every `syscall.*` point sets itself.
const RESERVED: &[&str] = &["name", "argstr", "retstr", "retval"];

/// Argument names the kernel uses for a path or name string.
fn is_string_arg(name: &str, ty: &TypeKind, facts: &dyn crate::kernel::KernelFacts) -> bool {
    let TypeKind::Pointer(to) = ty else {
        return false;
    };
    let is_char = matches!(facts.kind(*to), TypeKind::Int { is_char: true, .. });
    is_char
        && (name.contains("name")
            || name.contains("path")
            || name == "filename"
            || name == "special"
            || name == "library"
            || name == "type")
}

/// A small builder for the prologue's AST, every node at the point's span.
struct Build {
    span: Span,
}

impl Build {
    fn expr(&self, kind: ExprKind) -> Expr {
        Expr {
            kind,
            span: self.span,
        }
    }
    fn var(&self, name: &str) -> Expr {
        self.expr(ExprKind::Var(name.to_string()))
    }
    fn ctx(&self, name: &str) -> Expr {
        self.expr(ExprKind::Context(ast::ContextVar::Named(name.to_string())))
    }
    fn string(&self, s: &str) -> Expr {
        self.expr(ExprKind::Literal(Literal::String(s.to_string())))
    }
    fn number(&self, n: i64) -> Expr {
        self.expr(ExprKind::Literal(Literal::Number(n)))
    }
    fn call(&self, name: &str, args: Vec<Expr>) -> Expr {
        self.expr(ExprKind::Call {
            name: Spanned {
                node: name.to_string(),
                span: self.span,
            },
            args,
        })
    }
    fn set(&self, name: &str, value: Expr) -> ast::Stmt {
        ast::Stmt {
            kind: ast::StmtKind::Expr(self.expr(ExprKind::Assign {
                op: AssignOp::Set,
                target: Box::new(self.var(name)),
                value: Box::new(value),
            })),
            span: self.span,
        }
    }
    fn block(&self, stmts: Vec<ast::Stmt>) -> ast::Block {
        ast::Block {
            stmts,
            span: self.span,
        }
    }
}

/// The prologue of a generic `syscall.NAME`: `name`, one variable per
/// argument, `argstr` ("fd, 0x7ffd..., \"path\"").
fn entry_prologue(
    name: &str,
    tp: &Tracepoint,
    facts: &dyn crate::kernel::KernelFacts,
    span: Span,
) -> ast::Block {
    let b = Build { span };
    let mut stmts = vec![b.set("name", b.string(name))];
    let mut format = Vec::new();
    let mut args = Vec::new();
    if let TracepointArgs::Classic(fields) = &tp.args {
        for f in fields.iter().filter(|f| f.name != "__syscall_nr") {
            let kind = facts.kind(f.ty);
            // An argument called like one of the family's own variables
            // (`uname(struct new_utsname *name)`) takes a suffix, as stap's
            // `name_uaddr`.
            let reserved = RESERVED.contains(&f.name.as_str());
            let var = if is_string_arg(&f.name, &kind, facts) {
                // stap's convention: `pathname` is the quoted string and
                // `pathname_uaddr` the address.
                let uaddr = format!("{}_uaddr", f.name);
                let var = if reserved {
                    format!("{}_str", f.name)
                } else {
                    f.name.clone()
                };
                stmts.push(b.set(&uaddr, b.ctx(&f.name)));
                stmts.push(b.set(&var, b.call("__sys_ustr", vec![b.var(&uaddr)])));
                format.push("%s");
                var
            } else {
                let pointer = matches!(kind, TypeKind::Pointer(_));
                let var = match (reserved, pointer) {
                    (false, _) => f.name.clone(),
                    (true, true) => format!("{}_uaddr", f.name),
                    (true, false) => format!("{}_arg", f.name),
                };
                // The record holds the whole register; the context read
                // keeps the argument's own width (sign- or zero-extended).
                stmts.push(b.set(&var, b.ctx(&f.name)));
                format.push(if pointer { "%p" } else { "%d" });
                var
            };
            args.push(b.var(&var));
        }
    }
    let argstr = if args.is_empty() {
        b.string("")
    } else {
        let mut call_args = vec![b.string(&format.join(", "))];
        call_args.extend(args);
        b.call("sprintf", call_args)
    };
    stmts.push(b.set("argstr", argstr));
    b.block(stmts)
}

/// The prologue of a generic `syscall.NAME.return`: `name`, `retval`
/// (stap 4.0+ sets it on every return) and `retstr`.
fn return_prologue(name: &str, span: Span) -> ast::Block {
    let b = Build { span };
    b.block(vec![
        b.set("name", b.string(name)),
        b.set("retval", b.ctx("ret")),
        b.set(
            "retstr",
            b.call("return_str", vec![b.number(1), b.ctx("ret")]),
        ),
    ])
}

impl<'a> Elaborator<'a> {
    /// `syscall.PATTERN` and `syscall.PATTERN.return`: the stdlib aliases
    /// that match, and a generic point for every other call of this
    /// kernel that matches. `Ok(None)`: not a syscall point.
    pub(super) fn resolve_syscalls(
        &mut self,
        comps: &[Component],
        span: Span,
        chain: &mut Vec<String>,
    ) -> Result<Option<Vec<ResolvedPoint<'a>>>, Diagnostic> {
        if comps.iter().any(|c| c.arg.is_some()) {
            return Ok(None);
        }
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let (pattern, is_return) = match names.as_slice() {
            ["syscall", pattern] => (*pattern, false),
            ["syscall", pattern, "return"] => (*pattern, true),
            _ => return Ok(None),
        };
        let suffix = if is_return { ".return" } else { "" };
        let wildcard = has_wildcard(pattern);
        // The stdlib's aliases first: they carry stap's own variables.
        let alias_name = |n: &str| format!("syscall.{n}{suffix}");
        let matches = |full: &str| {
            let parts: Vec<&str> = full.split('.').collect();
            parts.len() == names.len() && parts.iter().zip(&names).all(|(n, p)| glob_match(p, n))
        };
        self.pull_aliases(matches);
        let aliases: Vec<(String, &'a ast::ProbeAlias)> = self
            .aliases
            .iter()
            .filter(|a| matches(&a.name))
            .map(|a| (a.name.clone(), a.ast))
            .collect();
        let covered: Vec<String> = aliases.iter().map(|(n, _)| n.clone()).collect();
        let mut out = if aliases.is_empty() {
            Vec::new()
        } else {
            match self.expand_aliases(aliases, &[], wildcard, span, chain) {
                Ok(found) => found,
                Err(e) if !wildcard => return Err(e),
                Err(_) => Vec::new(),
            }
        };
        // Then every other call the kernel traces: the events no alias
        // resolved to (syscall.pread is sys_enter_pread64).
        let taken: Vec<String> = out
            .iter()
            .filter_map(|p| match &p.kind {
                ProbeKind::Tracepoint { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect();
        let facts = self.facts;
        let events = facts
            .tracepoint_names()
            .map_err(|e| super::facts_error(e, span))?;
        let mut events: Vec<String> = events
            .into_iter()
            .filter(|(system, _)| system == "syscalls")
            .filter_map(|(_, event)| event.strip_prefix("sys_enter_").map(str::to_string))
            .collect();
        events.sort();
        for event in events {
            let probe = probe_name(&event);
            let which = if is_return { "exit" } else { "enter" };
            if !glob_match(pattern, probe)
                || covered.contains(&alias_name(probe))
                || taken.contains(&format!("sys_{which}_{event}"))
            {
                continue;
            }
            let spec = format!("syscalls:sys_{which}_{event}");
            let Some(tp) = facts
                .tracepoint(Some("syscalls"), &format!("sys_{which}_{event}"))
                .map_err(|e| super::facts_error(e, span))?
            else {
                continue;
            };
            let prologue = if is_return {
                return_prologue(probe, span)
            } else {
                entry_prologue(probe, &tp, facts, span)
            };
            for mut point in self.resolve_tracepoints(&spec, span)? {
                point.alias_chain.insert(0, alias_name(probe));
                point.prologues.push(Cow::Owned(prologue.clone()));
                out.push(point);
            }
        }
        // stap's compat_* probes are the 32-bit entry points, which have
        // no trace events.
        if out.is_empty() && (ELSEWHERE.contains(&pattern) || pattern.starts_with("compat_")) {
            return Ok(Some(out));
        }
        if out.is_empty() {
            let known: Vec<String> = self.all_alias_names();
            return Err(Diagnostic::error(format!(
                "no system call matches `syscall.{pattern}{suffix}`"
            ))
            .at(
                span,
                "not a system call this kernel traces (syscalls:sys_enter_*)",
            )
            .suggest(
                &format!("syscall.{pattern}{suffix}"),
                known.iter().map(String::as_str),
            ));
        }
        Ok(Some(out))
    }
}
