//! Statement rules stap enforces at pass 2, checked over the HIR of every
//! kept function and probe:
//! - `break` and `continue` only inside `while`, `for` or `foreach`
//!   (stap: "cannot 'break' outside loop");
//! - a built-in that returns nothing (`exit()`, `printf(...)`) only as a
//!   statement of its own: `y = exit()` has no value to take, which stap
//!   reports as an unresolved type;
//! - likewise a script function that returns nothing (no `return EXPR`),
//!   where nothing else gives its value a type: stap types such a
//!   function by its uses (`printf("%d", f())` makes it a long returning
//!   0), so only a use that leaves the type open (`println(f())`, `f() ==
//!   g()`) is an error, stap's unresolved type.

use super::builtins::{self, ReturnType};
use super::hir::{Block, Expr, ExprKind, Function, Probe, Stmt, StmtKind};
use super::walk::{self, Node};
use crate::diag::Diagnostic;

/// `returns_nothing[f]`: function `f` returns nothing (from `infer`).
pub(super) fn check(
    functions: &mut [Function],
    probes: &mut [Probe],
    returns_nothing: &[bool],
) -> Vec<Diagnostic> {
    let names: Vec<String> = functions.iter().map(|f| f.name.clone()).collect();
    let mut check = Check {
        loops: 0,
        returns_nothing: returns_nothing
            .iter()
            .zip(names)
            .map(|(nothing, name)| nothing.then_some(name))
            .collect(),
        diags: Vec::new(),
    };
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

struct Check {
    loops: usize,
    /// By function: its name if it returns nothing.
    returns_nothing: Vec<Option<String>>,
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
        let returns_nothing = &self.returns_nothing;
        walk::expr(e, &mut |node| {
            let Node::Expr(e) = node else { return };
            match &e.kind {
                ExprKind::Builtin { name, .. }
                    if builtins::lookup(name).is_some_and(|b| b.ret == ReturnType::Void) =>
                {
                    diags.push(
                        Diagnostic::error(format!("`{name}()` returns no value"))
                            .at(e.span, "used as a value here")
                            .note("stap: unresolved type; call it as a statement of its own"),
                    );
                }
                ExprKind::Call { function, .. } => {
                    if let Some(Some(name)) = returns_nothing.get(function.0 as usize) {
                        diags.push(
                            Diagnostic::error(format!("`{name}()` returns no value"))
                                .at(e.span, "used as a value here, with no type")
                                .note(format!(
                                    "stap: unresolved type; `{name}` has no `return EXPR`, so \
                                     only a use that needs a number or a string types it \
                                     (`printf(\"%d\", {name}())` gives 0)"
                                )),
                        );
                    }
                }
                _ => {}
            }
        });
    }
}
