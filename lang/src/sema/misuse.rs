//! Statement rules stap enforces at pass 2, checked over the HIR of every
//! kept function and probe:
//! - `break` and `continue` only inside `while`, `for` or `foreach`
//!   (stap: "cannot 'break' outside loop");
//! - a built-in that returns nothing (`exit()`, `printf(...)`) only as a
//!   statement of its own: `y = exit()` has no value to take, which stap
//!   reports as an unresolved type.

use super::builtins::{self, ReturnType};
use super::hir::{Block, Expr, ExprKind, Function, Probe, Stmt, StmtKind};
use super::walk::{self, Node};
use crate::diag::Diagnostic;

pub(super) fn check(functions: &mut [Function], probes: &mut [Probe]) -> Vec<Diagnostic> {
    let mut check = Check::default();
    for f in functions {
        check.block(&mut f.body);
    }
    for p in probes {
        check.block(&mut p.body);
        if let Some(condition) = &mut p.condition {
            check.value(condition);
        }
    }
    check.diags
}

#[derive(Default)]
struct Check {
    loops: usize,
    diags: Vec<Diagnostic>,
}

impl Check {
    fn block(&mut self, b: &mut Block) {
        for s in &mut b.stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &mut Stmt) {
        match &mut s.kind {
            StmtKind::Block(b) => self.block(b),
            StmtKind::Expr(e) => self.statement_expr(e),
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.value(cond);
                self.stmt(then);
                if let Some(o) = otherwise {
                    self.stmt(o);
                }
            }
            StmtKind::While { cond, body } => {
                self.value(cond);
                self.in_loop(body);
            }
            StmtKind::For {
                init,
                cond,
                step,
                body,
            } => {
                // The first and third clauses are statements in stap's
                // grammar: their value is dropped.
                for e in [init, step].into_iter().flatten() {
                    self.statement_expr(e);
                }
                if let Some(c) = cond {
                    self.value(c);
                }
                self.in_loop(body);
            }
            StmtKind::Foreach(fe) => {
                if let Some(l) = &mut fe.limit {
                    self.value(l);
                }
                self.in_loop(&mut fe.body);
            }
            StmtKind::Return(Some(e)) => self.value(e),
            StmtKind::Try { body, handler, .. } => {
                self.block(body);
                self.block(handler);
            }
            StmtKind::Delete(super::hir::Delete::Element { keys, .. }) => {
                for k in keys {
                    self.value(k);
                }
            }
            StmtKind::Break | StmtKind::Continue if self.loops == 0 => {
                let word = if matches!(s.kind, StmtKind::Break) {
                    "break"
                } else {
                    "continue"
                };
                self.diags.push(
                    Diagnostic::error(format!("cannot '{word}' outside loop"))
                        .at(s.span, "not inside while, for or foreach"),
                );
            }
            StmtKind::Break
            | StmtKind::Continue
            | StmtKind::Next
            | StmtKind::Return(None)
            | StmtKind::Delete(_)
            | StmtKind::Empty => {}
        }
    }

    fn in_loop(&mut self, body: &mut Stmt) {
        self.loops += 1;
        self.stmt(body);
        self.loops -= 1;
    }

    /// An expression whose value is dropped: a call there may return
    /// nothing, its arguments may not.
    fn statement_expr(&mut self, e: &mut Expr) {
        match &mut e.kind {
            ExprKind::Builtin { args, .. } | ExprKind::Call { args, .. } => {
                for a in args {
                    self.value(a);
                }
            }
            // `printf(c ? "a" : "b", ...)` is split into one call per
            // format; each branch is still a statement.
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                self.value(cond);
                self.statement_expr(then);
                self.statement_expr(otherwise);
            }
            _ => self.value(e),
        }
    }

    /// An expression whose value is used, with everything inside it.
    fn value(&mut self, e: &mut Expr) {
        let diags = &mut self.diags;
        walk::expr(e, &mut |node| {
            if let Node::Expr(e) = node
                && let ExprKind::Builtin { name, .. } = &e.kind
                && builtins::lookup(name).is_some_and(|b| b.ret == ReturnType::Void)
            {
                diags.push(
                    Diagnostic::error(format!("`{name}()` returns no value"))
                        .at(e.span, "used as a value here")
                        .note("stap: unresolved type; call it as a statement of its own"),
                );
            }
        });
    }
}
