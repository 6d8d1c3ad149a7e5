//! Elides what alias code computes for nobody: an assignment, in an alias
//! prologue or epilogue, to a local that nothing reads, when computing the
//! value has no effect. A tapset alias sets every variable its family
//! documents (`syscall.openat` sets `filename`, `flags_str`, `argstr`, ...)
//! and a script reads a few; this is how the rest cost nothing in BPF (stap
//! does the same, "eliding unused variable"). The user's own code is left
//! as written.

use super::hir::{
    Block, Expr, ExprKind, Function, FunctionId, LocalId, Probe, Stmt, StmtKind, Type,
};
use super::walk::{self, Node};
use crate::ast::AssignOp;

/// Built-ins that only compute a value: calling one for nobody changes
/// nothing a script can see (a fault while reading memory included: the
/// value it would have spoiled is never used).
fn builtin_is_pure(name: &str) -> bool {
    const PURE: &[&str] = &[
        "sprintf",
        "sprint",
        "execname",
        "pid",
        "tid",
        "ppid",
        "uid",
        "gid",
        "euid",
        "cpu",
        "cmdline_str",
        "target",
        "pp",
        "probefunc",
        "probemod",
        "ppfunc",
        "probe_type",
        "is_return",
        "get_cycles",
        "jiffies",
        "ktime_get_ns",
        "local_clock_ns",
        "ctime",
        "tz_ctime",
        "int_arg",
        "uint_arg",
        "long_arg",
        "ulong_arg",
        "pointer_arg",
        "returnval",
        "symname",
        "symdata",
        "modname",
        "strlen",
        "substr",
        "isinstr",
        "strpos",
        "stringat",
        "str_replace",
        "text_str",
        "string_quoted",
        "text_strn",
        "strtol",
        "isdigit",
        "abs",
        "enum_name",
    ];
    PURE.contains(&name)
        || name.starts_with("user_")
        || name.starts_with("kernel_")
        || name.starts_with("gettimeofday_")
}

/// Which functions are pure: they write no global, print nothing, and
/// call only pure code. Recursion counts as impure.
struct Purity<'f> {
    functions: &'f [Option<&'f Function>],
    memo: Vec<Option<bool>>,
}

impl Purity<'_> {
    fn function(&mut self, id: FunctionId) -> bool {
        let i = id.0 as usize;
        if let Some(known) = self.memo.get(i).copied().flatten() {
            return known;
        }
        let Some(Some(f)) = self.functions.get(i) else {
            return false;
        };
        self.memo[i] = Some(false); // a call back into it while deciding
        let mut body = f.body.clone();
        let pure = self.block(&mut body, true);
        self.memo[i] = Some(pure);
        pure
    }

    /// `locals_ok`: assignments to locals are fine (inside a function,
    /// whose locals nobody else sees).
    fn block(&mut self, b: &mut Block, locals_ok: bool) -> bool {
        let mut pure = true;
        for s in &mut b.stmts {
            if matches!(s.kind, StmtKind::Delete(ref d) if !matches!(d, super::hir::Delete::Local(_)))
                || matches!(s.kind, StmtKind::Foreach(_) | StmtKind::Next)
            {
                return false;
            }
            walk::stmt(s, &mut |node| {
                if let Node::Expr(e) = node {
                    pure &= self.shallow(e, locals_ok);
                }
            });
        }
        pure
    }

    fn expr(&mut self, e: &mut Expr) -> bool {
        let mut pure = true;
        walk::expr(e, &mut |node| {
            if let Node::Expr(e) = node {
                pure &= self.shallow(e, false);
            }
        });
        pure
    }

    /// This node alone (the walk visits its children).
    fn shallow(&mut self, e: &Expr, locals_ok: bool) -> bool {
        let local_target = |t: &Expr| matches!(t.kind, ExprKind::Local(_));
        match &e.kind {
            ExprKind::Call { function, .. } => self.function(*function),
            ExprKind::Builtin { name, .. } => builtin_is_pure(name),
            ExprKind::Assign { op, target, .. } => {
                locals_ok && *op != AssignOp::Aggregate && local_target(target)
            }
            ExprKind::Crement { target, .. } => locals_ok && local_target(target),
            // Sets the state `matched()` reads.
            ExprKind::Regex { .. } => false,
            // Its error fails the run, unless it is an alias-code error
            // that counts only where the code is kept (`alias_errors`).
            ExprKind::Invalid => true,
            _ => true,
        }
    }
}

/// How often each local is read (a plain `x = ...` is not a read of `x`).
fn reads(probe: &mut Probe) -> Vec<u32> {
    let mut count = vec![0u32; probe.locals.len()];
    let mut targets: Vec<*const Expr> = Vec::new();
    let mut visit = |node: Node<'_>| {
        if let Node::Expr(e) = node {
            if let ExprKind::Assign {
                op: AssignOp::Set,
                target,
                ..
            } = &e.kind
            {
                targets.push(&**target as *const Expr);
            }
            if let ExprKind::Local(LocalId(l)) = e.kind
                && !targets.contains(&(e as *const Expr))
                && let Some(c) = count.get_mut(l as usize)
            {
                *c += 1;
            }
        }
    };
    walk::block(&mut probe.body, &mut visit);
    if let Some(c) = &mut probe.condition {
        walk::expr(c, &mut visit);
    }
    count
}

/// Elides, in every probe, the alias code's assignments nobody reads,
/// until none is left (dropping `argstr` can leave `filename` unread).
pub(crate) fn unused_alias_assignments(probes: &mut [Probe], functions: &[Option<&Function>]) {
    let mut purity = Purity {
        functions,
        memo: vec![None; functions.len()],
    };
    for probe in probes {
        let mut elided: Vec<Option<Type>> = vec![None; probe.locals.len()];
        loop {
            let read = reads(probe);
            let user_span = probe.body.span;
            let mut changed = false;
            // Alias prologues and epilogues are the top-level blocks other
            // than the user's own (which carries the body's span).
            for s in &mut probe.body.stmts {
                if let StmtKind::Block(b) = &mut s.kind
                    && s.span != user_span
                {
                    changed |= elide_in(b, &read, &mut purity, &mut elided);
                }
            }
            if !changed {
                break;
            }
        }
        // A local whose every use was elided has nothing to infer its
        // type from: it keeps its value's type where that was known, and
        // is never stored, so any type does. (Only those: a `foreach` key
        // is bound by its statement, not an expression.)
        let mut used = vec![false; probe.locals.len()];
        walk::block(&mut probe.body, &mut |node| {
            if let Node::Expr(e) = node
                && let ExprKind::Local(LocalId(l)) = e.kind
                && let Some(u) = used.get_mut(l as usize)
            {
                *u = true;
            }
        });
        for ((local, used), elided) in probe.locals.iter_mut().zip(used).zip(elided) {
            if let Some(ty) = elided
                && !used
                && local.ty == Type::Unknown
            {
                local.ty = if ty == Type::Unknown { Type::Long } else { ty };
            }
        }
    }
}

fn elide_in(
    b: &mut Block,
    read: &[u32],
    purity: &mut Purity<'_>,
    elided: &mut [Option<Type>],
) -> bool {
    let mut changed = false;
    for s in &mut b.stmts {
        changed |= elide_stmt(s, read, purity, elided);
    }
    b.stmts.retain(|s| !matches!(s.kind, StmtKind::Empty));
    changed
}

fn elide_stmt(
    s: &mut Stmt,
    read: &[u32],
    purity: &mut Purity<'_>,
    elided: &mut [Option<Type>],
) -> bool {
    match &mut s.kind {
        StmtKind::Expr(e) => {
            let ExprKind::Assign {
                op: AssignOp::Set,
                target,
                value,
            } = &mut e.kind
            else {
                return false;
            };
            let ExprKind::Local(LocalId(l)) = target.kind else {
                return false;
            };
            if read.get(l as usize).copied().unwrap_or(1) == 0 && purity.expr(value) {
                if let Some(e) = elided.get_mut(l as usize) {
                    *e = Some(match &value.kind {
                        ExprKind::Str(_) => Type::String,
                        ExprKind::Builtin { name, .. } if name == "sprintf" => Type::String,
                        _ => value.ty,
                    });
                }
                s.kind = StmtKind::Empty;
                return true;
            }
            false
        }
        StmtKind::Block(inner) => elide_in(inner, read, purity, elided),
        StmtKind::If {
            cond,
            then,
            otherwise,
        } => {
            let mut changed = elide_stmt(then, read, purity, elided);
            if let Some(o) = otherwise {
                changed |= elide_stmt(o, read, purity, elided);
            }
            let empty = |s: &Stmt| match &s.kind {
                StmtKind::Empty => true,
                StmtKind::Block(b) => b.stmts.iter().all(|s| matches!(s.kind, StmtKind::Empty)),
                _ => false,
            };
            if empty(then) && otherwise.as_deref().is_none_or(empty) && purity.expr(cond) {
                s.kind = StmtKind::Empty;
                return true;
            }
            changed
        }
        _ => false,
    }
}

/// The alias-code errors whose expression elision kept: those count.
pub(crate) fn surviving_alias_errors(
    probes: &mut [Probe],
    pending: Vec<(crate::source::Span, crate::diag::Diagnostic)>,
) -> Vec<crate::diag::Diagnostic> {
    if pending.is_empty() {
        return Vec::new();
    }
    let mut kept = Vec::new();
    for probe in probes {
        walk::block(&mut probe.body, &mut |node| {
            if let Node::Expr(e) = node
                && matches!(e.kind, ExprKind::Invalid)
            {
                kept.push(e.span);
            }
        });
    }
    pending
        .into_iter()
        .filter(|(span, _)| kept.contains(span))
        .map(|(_, d)| d)
        .collect()
}
