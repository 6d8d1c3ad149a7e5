//! A pre-order walk over HIR bodies, for the passes that only need to see
//! every expression (call graph, placement, renumbering).

use super::hir::{AccessBase, AccessStep, Block, Delete, Expr, ExprKind, GlobalId, Stmt, StmtKind};

/// What the walk shows: each expression, and globals named by statements
/// (`foreach`, `delete`) rather than by an expression.
pub(crate) enum Node<'x> {
    Expr(&'x mut Expr),
    Global(GlobalId),
}

pub(crate) fn block(b: &mut Block, f: &mut dyn FnMut(Node<'_>)) {
    for s in &mut b.stmts {
        stmt(s, f);
    }
}

pub(crate) fn stmt(s: &mut Stmt, f: &mut dyn FnMut(Node<'_>)) {
    match &mut s.kind {
        StmtKind::Block(b) => block(b, f),
        StmtKind::Expr(e) => expr(e, f),
        StmtKind::If {
            cond,
            then,
            otherwise,
        } => {
            expr(cond, f);
            stmt(then, f);
            if let Some(o) = otherwise {
                stmt(o, f);
            }
        }
        StmtKind::While { cond, body } => {
            expr(cond, f);
            stmt(body, f);
        }
        StmtKind::For {
            init,
            cond,
            step,
            body,
        } => {
            for e in [init, cond, step].into_iter().flatten() {
                expr(e, f);
            }
            stmt(body, f);
        }
        StmtKind::Foreach(fe) => {
            f(Node::Global(fe.global));
            if let Some(l) = &mut fe.limit {
                expr(l, f);
            }
            stmt(&mut fe.body, f);
        }
        StmtKind::Return(Some(e)) => expr(e, f),
        StmtKind::Try { body, handler, .. } => {
            block(body, f);
            block(handler, f);
        }
        StmtKind::Delete(Delete::Global(g)) => f(Node::Global(*g)),
        StmtKind::Delete(Delete::Element { global, keys }) => {
            f(Node::Global(*global));
            for k in keys {
                expr(k, f);
            }
        }
        StmtKind::Return(None)
        | StmtKind::Delete(Delete::Local(_))
        | StmtKind::Break
        | StmtKind::Continue
        | StmtKind::Next
        | StmtKind::Empty => {}
    }
}

pub(crate) fn expr(e: &mut Expr, f: &mut dyn FnMut(Node<'_>)) {
    f(Node::Expr(e));
    match &mut e.kind {
        ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => {
            for k in keys {
                expr(k, f);
            }
        }
        ExprKind::Context(access) => {
            if let AccessBase::Cast { ptr, .. } = &mut access.base {
                expr(ptr, f);
            }
            for step in &mut access.steps {
                if let AccessStep::Subscript { index, .. } = step {
                    expr(index, f);
                }
            }
        }
        ExprKind::Call { args, .. } | ExprKind::Builtin { args, .. } => {
            for a in args {
                expr(a, f);
            }
        }
        ExprKind::Stat { operand, args, .. } => {
            expr(operand, f);
            for a in args {
                expr(a, f);
            }
        }
        ExprKind::Entry(inner) | ExprKind::Unary { operand: inner, .. } => expr(inner, f),
        ExprKind::Crement { target, .. } => expr(target, f),
        ExprKind::Binary { lhs, rhs, .. } => {
            expr(lhs, f);
            expr(rhs, f);
        }
        ExprKind::Assign { target, value, .. } => {
            expr(target, f);
            expr(value, f);
        }
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => {
            expr(cond, f);
            expr(then, f);
            expr(otherwise, f);
        }
        ExprKind::Regex {
            subject, pattern, ..
        } => {
            expr(subject, f);
            expr(pattern, f);
        }
        ExprKind::Long(_)
        | ExprKind::Str(_)
        | ExprKind::Local(_)
        | ExprKind::Global(_)
        | ExprKind::Bulk { .. }
        | ExprKind::Invalid => {}
    }
}
