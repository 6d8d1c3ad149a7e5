//! `process.begin`, `process.end`, `process.thread.begin`,
//! `process.thread.end`, and the same with `process("PATH")` or
//! `process(PID)`: stap's process life-cycle probes. SystemTap runs them
//! through its task finder (utrace); here each is a sched:* tracepoint
//! with a condition, so they need neither kprobes nor uprobes:
//!
//! - begin: sched:sched_process_exec, in the new program right after an
//!   exec (a fork that does not exec, and the processes already running
//!   when the session starts, are not reported);
//! - end: sched:sched_process_exit of the thread-group leader;
//! - thread.begin: sched:sched_process_fork of a new thread (in the
//!   creating thread: `pid()` is the process, `$child` the new thread);
//! - thread.end: sched:sched_process_exit of a thread other than the leader.
//!
//! `process("PATH")` matches the program by name: `execname()` against the
//! last component of PATH (cut to the kernel's 15 bytes of `comm`), since
//! BPF cannot resolve paths; `process(PID)` matches `pid()`.

use super::{Component, ResolvedPoint, render};
use crate::ast::{BinaryOp, ContextVar, Expr, ExprKind, Literal, MemberStep};
use crate::diag::Diagnostic;
use crate::sema::symbols::Elaborator;
use crate::source::{Span, Spanned};

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &[
    "process.begin",
    "process.end",
    "process.thread.begin",
    "process.thread.end",
];

/// Which process to follow.
enum Target<'c> {
    Any,
    Path(&'c str),
    Pid(i64),
}

impl<'a> Elaborator<'a> {
    /// `process[(PATH|PID)].begin|end|thread.begin|thread.end`, or
    /// `Ok(None)` when the point is another process probe (`.function`).
    pub(super) fn resolve_lifecycle(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<Option<Vec<ResolvedPoint<'a>>>, Diagnostic> {
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let (tracepoint, which) = match &names[1..] {
            ["begin"] => ("sched:sched_process_exec", Event::Begin),
            ["end"] => ("sched:sched_process_exit", Event::End),
            ["thread", "begin"] => ("sched:sched_process_fork", Event::ThreadBegin),
            ["thread", "end"] => ("sched:sched_process_exit", Event::ThreadEnd),
            _ => return Ok(None),
        };
        for c in &comps[1..] {
            if c.arg.is_some() {
                return Err(Diagnostic::error(format!("`{}` takes no argument", c.name))
                    .at(c.span, "unexpected argument"));
            }
        }
        let target = match &comps[0].arg {
            None => Target::Any,
            Some(Literal::String(path)) => Target::Path(path),
            Some(Literal::Number(pid)) => Target::Pid(*pid),
        };
        let mut conditions = Vec::new();
        match which {
            Event::End => conditions.push(eq(call("pid", span), call("tid", span), span)),
            Event::ThreadEnd => conditions.push(binary(
                BinaryOp::Ne,
                call("pid", span),
                call("tid", span),
                span,
            )),
            // A new thread shares its creator's thread group.
            Event::ThreadBegin => conditions.push(binary(
                BinaryOp::Ne,
                child_field("pid", span),
                child_field("tgid", span),
                span,
            )),
            Event::Begin => {}
        }
        match target {
            Target::Any => {}
            Target::Path(path) => conditions.push(execname_is(path, span)),
            Target::Pid(pid) => {
                let literal = expr(ExprKind::Literal(Literal::Number(pid)), span);
                conditions.push(eq(call("pid", span), literal, span));
            }
        }
        let mut points = self.resolve_tracepoints(tracepoint, span)?;
        let written = render(comps);
        for p in &mut points {
            p.resolved = format!("{written} = {}", p.resolved);
            for c in &conditions {
                // Conditions are borrowed from the program's syntax tree
                // for as long as elaboration runs; these few synthesized
                // ones live as long.
                p.conditions.push(Box::leak(Box::new(c.clone())));
            }
        }
        Ok(Some(points))
    }
}

/// `execname() == NAME`: a process running the program at `path`, by
/// the last component of its path cut to the 15 bytes of the kernel's
/// `comm` (BPF cannot resolve a task's executable path).
fn execname_is(path: &str, span: Span) -> Expr {
    let name = path.rsplit('/').next().unwrap_or(path);
    let comm: String = name.chars().take(15).collect();
    let literal = expr(ExprKind::Literal(Literal::String(comm)), span);
    eq(call("execname", span), literal, span)
}

/// [`execname_is`] as a probe condition (synthesized conditions live as
/// long as the elaboration, like the program's own).
pub(super) fn runs_program(path: &str, span: Span) -> &'static Expr {
    Box::leak(Box::new(execname_is(path, span)))
}

#[derive(Clone, Copy)]
enum Event {
    Begin,
    End,
    ThreadBegin,
    ThreadEnd,
}

fn expr(kind: ExprKind, span: Span) -> Expr {
    Expr { kind, span }
}

fn call(name: &str, span: Span) -> Expr {
    expr(
        ExprKind::Call {
            name: Spanned {
                node: name.to_string(),
                span,
            },
            args: Vec::new(),
        },
        span,
    )
}

fn binary(op: BinaryOp, lhs: Expr, rhs: Expr, span: Span) -> Expr {
    expr(
        ExprKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        },
        span,
    )
}

fn eq(lhs: Expr, rhs: Expr, span: Span) -> Expr {
    binary(BinaryOp::Eq, lhs, rhs, span)
}

/// `$child->FIELD` of sched_process_fork.
fn child_field(field: &str, span: Span) -> Expr {
    expr(
        ExprKind::Member {
            base: Box::new(expr(
                ExprKind::Context(ContextVar::Named("child".into())),
                span,
            )),
            path: vec![MemberStep::Field(Spanned {
                node: field.to_string(),
                span,
            })],
            pretty: None,
        },
        span,
    )
}
