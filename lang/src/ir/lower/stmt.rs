//! Statements: control flow becomes blocks and branches. Every loop has a
//! latch block (`Tick`, then back to the header) that `continue` and the end
//! of the body jump to, so each back edge counts towards MAXACTION.

use super::{FnLowering, LoopTargets};
use crate::ast::{SortDir, StatOp};
use crate::diag::Diagnostic;
use crate::ir::{IterId, Op, Sort, SortBy, StatValue, Term, ValType};
use crate::sema::concurrency::{self, TestAndSet};
use crate::sema::hir::{Block, Delete, Foreach, Stmt, StmtKind, Type};
use crate::source::Span;

impl FnLowering<'_, '_> {
    pub(super) fn block(&mut self, block: &Block) {
        for stmt in &block.stmts {
            self.stmt(stmt);
        }
    }

    /// `if (!(k in a)) { a[k] = v; rest } else ...` in kernel code: one
    /// atomic insert decides the branch, so concurrent hits cannot both
    /// find `k` missing (sema/concurrency.rs).
    fn test_and_set(&mut self, tas: &TestAndSet<'_>, otherwise: Option<&Stmt>, span: Span) {
        let keys = self.values(tas.keys);
        let src = self.value(tas.value);
        let inserted = self.body.reg(ValType::Long);
        self.body.emit(
            Op::MapInsert {
                dst: inserted,
                global: tas.global,
                keys,
                src,
            },
            tas.span,
        );
        let then_block = self.body.new_block();
        let else_block = otherwise.map(|_| self.body.new_block());
        let join = self.body.new_block();
        self.body
            .branch(inserted, then_block, else_block.unwrap_or(join), tas.span);
        self.body.switch_to(then_block);
        for stmt in tas.rest {
            self.stmt(stmt);
        }
        self.body.jump_to(join, span);
        if let (Some(block), Some(otherwise)) = (else_block, otherwise) {
            self.body.switch_to(block);
            self.stmt(otherwise);
            self.body.jump_to(join, span);
        }
    }

    fn stmt(&mut self, stmt: &Stmt) {
        let span = stmt.span;
        match &stmt.kind {
            StmtKind::Block(b) => self.block(b),
            StmtKind::Expr(e) => self.effect(e),
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                if self.is_kernel()
                    && let Some(tas) = concurrency::test_and_set(cond, then)
                {
                    return self.test_and_set(&tas, otherwise.as_deref(), span);
                }
                let holds = self.value(cond);
                let then_block = self.body.new_block();
                let else_block = otherwise.as_ref().map(|_| self.body.new_block());
                let join = self.body.new_block();
                self.body
                    .branch(holds, then_block, else_block.unwrap_or(join), cond.span);
                self.body.switch_to(then_block);
                self.stmt(then);
                self.body.jump_to(join, span);
                if let (Some(block), Some(otherwise)) = (else_block, otherwise) {
                    self.body.switch_to(block);
                    self.stmt(otherwise);
                    self.body.jump_to(join, span);
                }
            }
            StmtKind::While { cond, body } => {
                self.loop_with(Some(cond), None, body, span);
            }
            StmtKind::For {
                init,
                cond,
                step,
                body,
            } => {
                if let Some(init) = init {
                    self.effect(init);
                }
                self.loop_with(cond.as_ref(), step.as_ref(), body, span);
            }
            StmtKind::Foreach(f) => self.foreach(f, span),
            StmtKind::Break | StmtKind::Continue => {
                let is_break = matches!(stmt.kind, StmtKind::Break);
                match self.loops.last() {
                    Some(targets) => {
                        let target = if is_break { targets.exit } else { targets.next };
                        self.body.terminate(Term::Jump(target), span);
                    }
                    None => {
                        let word = if is_break { "break" } else { "continue" };
                        self.m.report(
                            Diagnostic::error(format!("`{word}` outside a loop"))
                                .at(span, "not inside while, for or foreach"),
                        );
                    }
                }
            }
            StmtKind::Next => {
                if self.in_probe {
                    self.body.terminate(Term::Return(None), span);
                } else {
                    self.m.unsupported("`next` inside a function", span);
                }
            }
            StmtKind::Return(value) => self.return_stmt(value.as_ref(), span),
            StmtKind::Delete(d) => self.delete(d, span),
            StmtKind::Empty => {}
            StmtKind::Try {
                body,
                message,
                handler,
            } => {
                // The handler and the join are made outside the `try`, so
                // an error in the handler goes to the enclosing one.
                let handler_block = self.body.new_block();
                let join = self.body.new_block();
                self.body.push_catch(crate::ir::Catch {
                    handler: handler_block,
                    message: message.map(|m| self.local_regs[m.0 as usize]),
                });
                let body_block = self.body.new_block();
                self.body.jump_to(body_block, span);
                self.block(body);
                // Leaves the `try` with a block made outside it.
                self.body.pop_catch();
                self.body.jump_to(join, span);
                self.body.switch_to(handler_block);
                self.block(handler);
                self.body.jump_to(join, span);
            }
        }
    }

    fn return_stmt(&mut self, value: Option<&crate::sema::hir::Expr>, span: Span) {
        let Some(ty) = self.ret else {
            // A probe handler: `return` just leaves it.
            if let Some(value) = value {
                self.effect(value);
            }
            self.body.terminate(Term::Return(None), span);
            return;
        };
        let reg = match value {
            Some(value) => self.value(value),
            None => {
                let reg = self.body.reg(ty);
                self.zero_into(reg, span);
                reg
            }
        };
        self.body.terminate(Term::Return(Some(reg)), span);
    }

    /// `while`, and `for` after its init: header (condition), body, latch
    /// (step, `Tick`), exit.
    fn loop_with(
        &mut self,
        cond: Option<&crate::sema::hir::Expr>,
        step: Option<&crate::sema::hir::Expr>,
        body: &Stmt,
        span: Span,
    ) {
        let header = self.body.new_block();
        let body_block = self.body.new_block();
        let latch = self.body.new_block();
        let exit = self.body.new_block();
        self.body.jump_to(header, span);
        match cond {
            Some(cond) => {
                let holds = self.value(cond);
                self.body.branch(holds, body_block, exit, cond.span);
            }
            None => self.body.terminate(Term::Jump(body_block), span),
        }
        self.body.switch_to(body_block);
        self.loops.push(LoopTargets { exit, next: latch });
        self.stmt(body);
        self.loops.pop();
        self.body.jump_to(latch, span);
        if let Some(step) = step {
            self.effect(step);
        }
        self.body.emit(Op::Tick, span);
        self.body.terminate(Term::Jump(header), span);
        self.body.switch_to(exit);
    }

    fn foreach(&mut self, f: &Foreach, span: Span) {
        let program = self.m.program;
        let global = program.global(f.global);
        let is_stats = global.ty == Type::Stats;
        let limit = f.limit.as_ref().map(|l| self.value(l));
        let sort = self.foreach_sort(f, is_stats, span);
        let iter = IterId(self.iters);
        self.iters += 1;
        self.body.emit(
            Op::IterStart {
                iter,
                global: f.global,
                sort,
                limit,
            },
            span,
        );
        let header = self.body.new_block();
        let body_block = self.body.new_block();
        let latch = self.body.new_block();
        let exit = self.body.new_block();
        self.body.jump_to(header, span);
        let has = self.body.reg(crate::ir::ValType::Long);
        let keys: Vec<_> = f
            .keys
            .iter()
            .map(|k| self.local_regs[k.0 as usize])
            .collect();
        // A stats array binds the value to an aggregate, read below; the
        // iterator itself only walks the keys.
        let value = f
            .value
            .filter(|_| !is_stats)
            .map(|v| self.local_regs[v.0 as usize]);
        self.body.emit(
            Op::IterNext {
                iter,
                has,
                keys: keys.clone(),
                value,
            },
            span,
        );
        self.body.branch(has, body_block, exit, span);
        self.body.switch_to(body_block);
        if let (true, Some(v)) = (is_stats, f.value) {
            let op = f.aggregate.unwrap_or(StatOp::Count);
            match StatValue::from_op(op, 0) {
                Some(what) => {
                    self.m.need(f.global, op);
                    self.body.emit(
                        Op::StatGet {
                            dst: self.local_regs[v.0 as usize],
                            global: f.global,
                            keys,
                            what,
                        },
                        span,
                    );
                }
                None => self
                    .m
                    .unsupported(format!("binding a foreach value to @{}", op.name()), span),
            }
        }
        self.loops.push(LoopTargets { exit, next: latch });
        self.stmt(&f.body);
        self.loops.pop();
        self.body.jump_to(latch, span);
        self.body.emit(Op::Tick, span);
        self.body.terminate(Term::Jump(header), span);
        self.body.switch_to(exit);
    }

    fn foreach_sort(&mut self, f: &Foreach, is_stats: bool, span: Span) -> Option<Sort> {
        let descending = |d: SortDir| d == SortDir::Descending;
        if let Some(dir) = f.value_sort {
            let by = if is_stats {
                let op = f.aggregate.unwrap_or(StatOp::Count);
                let Some(what) = StatValue::from_op(op, 0) else {
                    self.m
                        .unsupported(format!("sorting a foreach by @{}", op.name()), span);
                    return None;
                };
                self.m.need(f.global, op);
                SortBy::Aggregate(what)
            } else {
                SortBy::Value
            };
            return Some(Sort {
                by,
                descending: descending(dir),
            });
        }
        f.key_sort.iter().enumerate().find_map(|(i, dir)| {
            dir.map(|dir| Sort {
                by: SortBy::Key(i as u32),
                descending: descending(dir),
            })
        })
    }

    fn delete(&mut self, d: &Delete, span: Span) {
        match d {
            Delete::Global(global) => self.body.emit(Op::Clear { global: *global }, span),
            Delete::Element { global, keys } => {
                let keys = self.values(keys);
                self.body.emit(
                    Op::MapDelete {
                        global: *global,
                        keys,
                    },
                    span,
                );
            }
            Delete::Local(local) => {
                let reg = self.local_regs[local.0 as usize];
                self.zero_into(reg, span);
            }
        }
    }
}
