//! stap's display of unread globals: a global of the user's script that
//! the program writes but never reads is printed when the session ends,
//! after the script's own end probes. stap does it by adding one `end`
//! probe per such global to the program; so does this file, so `-p2`
//! lists them and they run wherever end probes run (on the host, reading
//! the BPF maps that kernel probes wrote).
//!
//! The rules (stap's): a plain assignment or `<<<` writes; `++`, `+=`,
//! `delete` and a `foreach` read too; a global only a tapset declares is
//! never shown. The format: `name=0x5` for a number (stap prints `%#x`,
//! which always has the `0x`), `name="text"` for a string, `name[k1,"k2"]=`
//! per element with string keys quoted, elements in decreasing order of
//! value, and `name @count=N @min=N @max=N @sum=N @avg=N` for a statistic
//! (`name @count=0x0` when it is empty).

use super::hir::{Expr, ExprKind, GlobalId, Program, Type};
use super::walk::{self, Node};
use crate::ast::{self, AssignOp, BinaryOp, Literal, SortDir, StatOp};
use crate::source::{Span, Spanned};
use std::collections::HashSet;

/// The user's globals that the program writes and never reads, in
/// declaration order.
pub(super) fn unread_globals(program: &mut Program) -> Vec<GlobalId> {
    let mut uses = Uses::default();
    for function in &mut program.functions {
        walk::block(&mut function.body, &mut |node| uses.note(node));
    }
    for probe in &mut program.probes {
        walk::block(&mut probe.body, &mut |node| uses.note(node));
        if let Some(condition) = &mut probe.condition {
            walk::expr(condition, &mut |node| uses.note(node));
        }
    }
    program
        .globals
        .iter()
        .enumerate()
        .map(|(i, g)| (GlobalId(i as u32), g))
        .filter(|(id, g)| !g.from_tapset && uses.written.contains(id) && !uses.read.contains(id))
        .map(|(id, _)| id)
        .collect()
}

#[derive(Default)]
struct Uses {
    read: HashSet<GlobalId>,
    written: HashSet<GlobalId>,
    /// The targets of pure writes (`=`, `<<<`) met so far, by address:
    /// the walk shows an assignment before its target, and the target
    /// itself is then no read.
    pure_targets: HashSet<*const Expr>,
}

impl Uses {
    fn note(&mut self, node: Node<'_>) {
        let e = match node {
            // `foreach` and `delete`: a read (and, for stap, also a write).
            Node::Global(g) => {
                self.read.insert(g);
                return;
            }
            Node::Expr(e) => e,
        };
        match &e.kind {
            ExprKind::Assign { op, target, .. } => {
                if let Some(g) = global_of(&target.kind) {
                    self.written.insert(g);
                    if matches!(op, AssignOp::Set | AssignOp::Aggregate) {
                        self.pure_targets.insert(&**target as *const Expr);
                    }
                }
            }
            ExprKind::Crement { target, .. } => {
                if let Some(g) = global_of(&target.kind) {
                    self.written.insert(g);
                }
            }
            ExprKind::Global(g) | ExprKind::Index { global: g, .. }
                if !self.pure_targets.contains(&(&*e as *const Expr)) =>
            {
                self.read.insert(*g);
            }
            ExprKind::In { global, .. } => {
                self.read.insert(*global);
            }
            _ => {}
        }
    }
}

fn global_of(kind: &ExprKind) -> Option<GlobalId> {
    match kind {
        ExprKind::Global(g) | ExprKind::Index { global: g, .. } => Some(*g),
        _ => None,
    }
}

/// The end probes that print `shown`, as a file of their own: each node
/// carries the global's declaration as its place, as stap's synthetic
/// probes name the global's token.
pub(super) fn end_probes(program: &Program, shown: &[GlobalId]) -> ast::File {
    let items = shown
        .iter()
        .map(|&id| {
            let g = program.global(id);
            let b = Builder { at: g.span };
            let body = if g.is_array {
                b.array_display(&g.name, &g.keys, &g.ty)
            } else {
                b.scalar_display(&g.name, &g.ty)
            };
            ast::Item::Probe(ast::Probe {
                points: vec![ast::ProbePoint {
                    components: vec![ast::PointComponent::Named {
                        name: b.ident("end"),
                        arg: None,
                    }],
                    optional: false,
                    sufficient: false,
                    condition: None,
                    span: b.at,
                }],
                body: ast::Block {
                    stmts: vec![body],
                    span: b.at,
                },
                span: b.at,
            })
        })
        .collect();
    ast::File { items }
}

const STATS: [StatOp; 5] = [
    StatOp::Count,
    StatOp::Min,
    StatOp::Max,
    StatOp::Sum,
    StatOp::Avg,
];

/// AST nodes, all placed at one span.
struct Builder {
    at: Span,
}

impl Builder {
    fn ident(&self, name: &str) -> ast::Ident {
        Spanned::new(name.to_string(), self.at)
    }

    fn expr(&self, kind: ast::ExprKind) -> ast::Expr {
        ast::Expr {
            kind,
            span: self.at,
        }
    }

    fn stmt(&self, kind: ast::StmtKind) -> ast::Stmt {
        ast::Stmt {
            kind,
            span: self.at,
        }
    }

    fn var(&self, name: &str) -> ast::Expr {
        self.expr(ast::ExprKind::Var(name.to_string()))
    }

    fn call(&self, name: &str, args: Vec<ast::Expr>) -> ast::Expr {
        self.expr(ast::ExprKind::Call {
            name: self.ident(name),
            args,
        })
    }

    fn printf(&self, format: String, mut args: Vec<ast::Expr>) -> ast::Stmt {
        args.insert(
            0,
            self.expr(ast::ExprKind::Literal(Literal::String(format))),
        );
        self.stmt(ast::StmtKind::Expr(self.call("printf", args)))
    }

    fn stat(&self, op: StatOp, operand: ast::Expr) -> ast::Expr {
        self.expr(ast::ExprKind::Stat {
            op,
            operand: Box::new(operand),
            args: Vec::new(),
        })
    }

    /// The format and arguments of one value: a statistic's five
    /// aggregates, a quoted string, or a number in stap's `%#x`.
    fn value_part(&self, ty: &Type, value: ast::Expr) -> (String, Vec<ast::Expr>) {
        match ty {
            Type::Stats => {
                let format: String = STATS
                    .iter()
                    .map(|op| format!(" @{}=%d", op.name()))
                    .collect();
                let args = STATS
                    .iter()
                    .map(|&op| self.stat(op, value.clone()))
                    .collect();
                (format, args)
            }
            Type::String => ("=%s".into(), vec![self.call("string_quoted", vec![value])]),
            _ => ("=0x%x".into(), vec![value]),
        }
    }

    fn scalar_display(&self, name: &str, ty: &Type) -> ast::Stmt {
        let (format, args) = self.value_part(ty, self.var(name));
        let show = self.printf(format!("{name}{format}\n"), args);
        if *ty != Type::Stats {
            return show;
        }
        // An empty statistic has no @min, @max or @avg.
        let empty = self.expr(ast::ExprKind::Binary {
            op: BinaryOp::Eq,
            lhs: Box::new(self.stat(StatOp::Count, self.var(name))),
            rhs: Box::new(self.expr(ast::ExprKind::Literal(Literal::Number(0)))),
        });
        self.stmt(ast::StmtKind::If {
            cond: empty,
            then: Box::new(self.printf(format!("{name} @count=0x0\n"), Vec::new())),
            otherwise: Some(Box::new(show)),
        })
    }

    /// `foreach (__val = [__idx0, ...] in name-) printf(...)`; a statistic
    /// has no value to bind, its aggregates are read from the element.
    fn array_display(&self, name: &str, keys: &[Type], ty: &Type) -> ast::Stmt {
        let key_names: Vec<String> = (0..keys.len()).map(|i| format!("__idx{i}")).collect();
        let mut key_format = Vec::new();
        let mut args = Vec::new();
        for (key, ty) in key_names.iter().zip(keys) {
            if *ty == Type::String {
                key_format.push("%s");
                args.push(self.call("string_quoted", vec![self.var(key)]));
            } else {
                key_format.push("%d");
                args.push(self.var(key));
            }
        }
        let stats = *ty == Type::Stats;
        let value = if stats {
            self.expr(ast::ExprKind::Index {
                array: self.ident(name),
                keys: key_names.iter().map(|k| self.var(k)).collect(),
            })
        } else {
            self.var("__val")
        };
        let (value_format, value_args) = self.value_part(ty, value);
        args.extend(value_args);
        let format = format!("{name}[{}]{value_format}\n", key_format.join(","));
        self.stmt(ast::StmtKind::Foreach(Box::new(ast::Foreach {
            value: (!stats).then(|| self.ident("__val")),
            keys: key_names.iter().map(|k| (self.ident(k), None)).collect(),
            bracketed: true,
            array: self.ident(name),
            slice: None,
            value_sort: Some(SortDir::Descending),
            aggregate: None,
            limit: None,
            body: self.printf(format, args),
        })))
    }
}
