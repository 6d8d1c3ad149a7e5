//! Unused alias variables. An alias prologue sets every variable its
//! manual lists (`flags_str`, `gfp_flag_name`, `argstr`, ...), but a probe
//! should pay only for the ones something reads: in BPF each string costs
//! scratch space and instructions. A top-level `name = value` of a
//! prologue is dropped when nothing else in the probe reads `name` and
//! `value` does nothing but compute its result; dropping one can leave
//! another unread (`flags` once `flags_str` is gone), so this runs to a
//! fixpoint. stap elides unused alias variables the same way.

use super::hir::{Block, Expr, ExprKind, Function, LocalId, Probe, Stmt, StmtKind};
use super::walk::{self, Node};
use crate::ast::AssignOp;

/// Built-ins with an effect besides their value: never dropped.
const EFFECTFUL: &[&str] = &[
    "print",
    "println",
    "printf",
    "printd",
    "printdln",
    "exit",
    "error",
    "warn",
    "system",
    "speculation",
    "speculate",
    "commit",
    "discard",
    "abort",
    "log",
    "assert",
    "print_backtrace",
    "print_ubacktrace",
    "print_stack",
    "print_syms",
    "print_usyms",
    "print_ustack",
];

/// Drops the unread assignments of a probe's alias prologues. It runs
/// after type inference, so every variable keeps its type (and a type
/// error in an unused alias variable is still reported).
pub(crate) fn unused_alias_assignments(functions: &[Function], probe: &mut Probe) {
    loop {
        let reads = local_reads(&probe.body);
        let mut dropped = false;
        for stmt in probe.body.stmts.iter_mut().take(probe.prologues) {
            let StmtKind::Block(prologue) = &mut stmt.kind else {
                continue;
            };
            prologue.stmts.retain(|s| {
                let unread = assigned_local(s).is_some_and(|(local, value)| {
                    reads.get(local.0 as usize).copied().unwrap_or(0) == 0 && pure(functions, value)
                });
                dropped |= unread;
                !unread
            });
        }
        if !dropped {
            return;
        }
    }
}

/// `local = value` as a statement of its own.
fn assigned_local(s: &Stmt) -> Option<(LocalId, &Expr)> {
    let StmtKind::Expr(e) = &s.kind else {
        return None;
    };
    let ExprKind::Assign {
        op: AssignOp::Set,
        target,
        value,
    } = &e.kind
    else {
        return None;
    };
    match target.kind {
        ExprKind::Local(local) => Some((local, value)),
        _ => None,
    }
}

/// How many times each local is read (the target of a plain `=` is not a
/// read; that of `+=` or `++` is). A local a `foreach` binds is written,
/// not read, and the walk does not show it.
fn local_reads(body: &Block) -> Vec<u32> {
    let mut body = body.clone();
    let mut mentions: Vec<u32> = Vec::new();
    let mut targets = Vec::new();
    walk::block(&mut body, &mut |node| {
        if let Node::Expr(e) = node {
            match &e.kind {
                ExprKind::Local(local) => {
                    let i = local.0 as usize;
                    if mentions.len() <= i {
                        mentions.resize(i + 1, 0);
                    }
                    mentions[i] += 1;
                }
                ExprKind::Assign {
                    op: AssignOp::Set,
                    target,
                    ..
                } => {
                    if let ExprKind::Local(local) = target.kind {
                        targets.push(local);
                    }
                }
                _ => {}
            }
        }
    });
    for local in targets {
        if let Some(m) = mentions.get_mut(local.0 as usize) {
            *m = m.saturating_sub(1);
        }
    }
    mentions
}

/// True when evaluating `e` has no effect but its value: no assignment,
/// no `++`, no printing or exiting built-in, no call to a function of the
/// script (tapset functions used as values compute values).
fn pure(functions: &[Function], e: &Expr) -> bool {
    let mut e = e.clone();
    let mut pure = true;
    walk::expr(&mut e, &mut |node| {
        if let Node::Expr(e) = node {
            match &e.kind {
                ExprKind::Assign { .. } | ExprKind::Crement { .. } => pure = false,
                ExprKind::Builtin { name, .. } if EFFECTFUL.contains(&name.as_str()) => {
                    pure = false
                }
                ExprKind::Call { function, .. } => {
                    pure &= functions
                        .get(function.0 as usize)
                        .is_some_and(|f| f.from_tapset)
                }
                _ => {}
            }
        }
    });
    pure
}
