//! The nesting limit. Every pass after parsing (elaboration, inference,
//! lowering, emission) walks the tree recursively, so a tree's depth is a
//! stack depth. Parsing itself is table-driven and survives any depth; this
//! check runs right after it, so nothing deeper than [`MAX_NESTING`] reaches
//! a recursive pass. The driver runs the passes on a thread whose stack is
//! sized for that depth (see `src/main.rs`).
//!
//! Depth counts every statement and expression level: `{ {`, `if` inside
//! `if`, `abs(abs(`, the left operand of `a + b + c ...`, brace sets in
//! probe points.

use crate::ast::{self, Expr, ExprKind, Item, MemberStep, PointComponent, Stmt, StmtKind};
use crate::diag::Diagnostic;
use crate::source::Span;

/// The deepest nesting of statements and expressions a file may have.
pub const MAX_NESTING: usize = 1000;

/// The first place where `file` nests deeper than [`MAX_NESTING`], as an
/// error. The walk itself never goes deeper than the limit.
pub fn check(file: &ast::File) -> Option<Diagnostic> {
    let mut walk = Walk { deepest: None };
    for item in &file.items {
        walk.item(item);
        if walk.deepest.is_some() {
            break;
        }
    }
    walk.deepest.map(|span| {
        Diagnostic::error(format!(
            "nesting too deep: more than {MAX_NESTING} levels of statements and expressions"
        ))
        .at(span, format!("level {} starts here", MAX_NESTING + 1))
        .note("help: split the expression or the block into functions or shorter statements")
    })
}

struct Walk {
    /// The span of the first node past the limit.
    deepest: Option<Span>,
}

impl Walk {
    /// Whether the walk may go on at `depth`; records the first overflow.
    fn enter(&mut self, depth: usize, span: Span) -> bool {
        if self.deepest.is_some() {
            return false;
        }
        if depth > MAX_NESTING {
            self.deepest = Some(span);
            return false;
        }
        true
    }

    fn item(&mut self, item: &Item) {
        match item {
            Item::Global(_) | Item::EmbeddedC(_) => {}
            Item::Function(f) => {
                if let ast::FunctionBody::Block(block) = &f.body {
                    self.block(block, 1);
                }
            }
            Item::Probe(p) => {
                self.points(&p.points);
                self.block(&p.body, 1);
            }
            Item::Alias(a) => {
                self.points(&a.names);
                self.points(&a.points);
                self.block(&a.body, 1);
            }
        }
    }

    fn points(&mut self, points: &[ast::ProbePoint]) {
        for point in points {
            self.components(&point.components, 1, point.span);
            if let Some(cond) = &point.condition {
                self.expr(cond, 1);
            }
        }
    }

    fn components(&mut self, components: &[PointComponent], depth: usize, span: Span) {
        if !self.enter(depth, span) {
            return;
        }
        for component in components {
            if let PointComponent::Alternatives(alternatives, span) = component {
                for alternative in alternatives {
                    self.components(alternative, depth + 1, *span);
                }
            }
        }
    }

    fn block(&mut self, block: &ast::Block, depth: usize) {
        if !self.enter(depth, block.span) {
            return;
        }
        for stmt in &block.stmts {
            self.stmt(stmt, depth + 1);
        }
    }

    fn stmt(&mut self, stmt: &Stmt, depth: usize) {
        if !self.enter(depth, stmt.span) {
            return;
        }
        let next = depth + 1;
        match &stmt.kind {
            // `{` is one level, though it is a statement holding a block.
            StmtKind::Block(block) => self.block(block, depth),
            StmtKind::Expr(e) | StmtKind::Delete(e) | StmtKind::Return(Some(e)) => {
                self.expr(e, next)
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond, next);
                self.stmt(then, next);
                if let Some(otherwise) = otherwise {
                    self.stmt(otherwise, next);
                }
            }
            StmtKind::While { cond, body } => {
                self.expr(cond, next);
                self.stmt(body, next);
            }
            StmtKind::For {
                init,
                cond,
                step,
                body,
            } => {
                for e in [init, cond, step].into_iter().flatten() {
                    self.expr(e, next);
                }
                self.stmt(body, next);
            }
            StmtKind::Foreach(foreach) => {
                if let Some(limit) = &foreach.limit {
                    self.expr(limit, next);
                }
                if let Some(slice) = &foreach.slice {
                    self.exprs(slice, next);
                }
                self.stmt(&foreach.body, next);
            }
            StmtKind::Try { body, handler, .. } => {
                self.block(body, next);
                self.block(handler, next);
            }
            StmtKind::Return(None)
            | StmtKind::Break
            | StmtKind::Continue
            | StmtKind::Next
            | StmtKind::Empty
            | StmtKind::EmbeddedC => {}
        }
    }

    fn exprs(&mut self, exprs: &[Expr], depth: usize) {
        for e in exprs {
            self.expr(e, depth);
        }
    }

    fn expr(&mut self, expr: &Expr, depth: usize) {
        if !self.enter(depth, expr.span) {
            return;
        }
        let next = depth + 1;
        match &expr.kind {
            ExprKind::Literal(_)
            | ExprKind::Var(_)
            | ExprKind::Context(_)
            | ExprKind::AtVar { .. }
            | ExprKind::EmbeddedC
            | ExprKind::Wildcard
            | ExprKind::Error => {}
            ExprKind::AtOperator { args, .. } => self.exprs(args, next),
            ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => self.exprs(keys, next),
            ExprKind::Member { base, path, .. } => {
                self.expr(base, next);
                for step in path {
                    if let MemberStep::Subscript(e) = step {
                        self.expr(e, next);
                    }
                }
            }
            ExprKind::Cast { ptr: e, .. }
            | ExprKind::AddressOf(e)
            | ExprKind::Entry(e)
            | ExprKind::Defined(e)
            | ExprKind::Unary { operand: e, .. }
            | ExprKind::Crement { target: e, .. } => self.expr(e, next),
            ExprKind::Call { args, .. } => self.exprs(args, next),
            ExprKind::Stat { operand, args, .. } => {
                self.expr(operand, next);
                self.exprs(args, next);
            }
            ExprKind::ChooseDefined(a, b)
            | ExprKind::Binary { lhs: a, rhs: b, .. }
            | ExprKind::Assign {
                target: a,
                value: b,
                ..
            }
            | ExprKind::Regex {
                subject: a,
                pattern: b,
                ..
            } => {
                self.expr(a, next);
                self.expr(b, next);
            }
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond, next);
                self.expr(then, next);
                self.expr(otherwise, next);
            }
        }
    }
}

/// Drops a tree that may be deeper than the stack allows by handing its
/// nodes over one level at a time: `Box` drops are recursive, and a tree
/// refused by [`check`] can be as deep as the script is long.
pub fn drop_deep(file: ast::File) {
    // Leaking is the simple, bounded-stack way out: this only happens on a
    // failed compile, right before the process reports the error and exits
    // (or, in the interactive session, once per refused input).
    std::mem::forget(file);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::KernelFacts;
    use crate::parse::parse_file;
    use crate::preprocess::PreprocessEnv;
    use crate::source::SourceMap;
    use crate::testing::FakeKernel;

    fn errors(text: &str) -> Vec<String> {
        let mut map = SourceMap::new();
        let file = map.add("t.stp", text);
        let kernel = FakeKernel::new();
        let config = |name: &str| kernel.config(name);
        let env = PreprocessEnv {
            kernel: kernel.version(),
            arch: kernel.arch(),
            config: &config,
            args: &[],
        };
        let parsed = parse_file(&map, file, &env);
        parsed
            .diags
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.message.clone())
            .collect()
    }

    #[test]
    fn nesting_at_the_limit_is_accepted_and_past_it_refused() {
        // `probe begin {` is level 1, each inner block one more.
        let at = |n: usize| format!("probe begin {{ {}x=1;{} }}", "{".repeat(n), "}".repeat(n));
        assert!(errors(&at(MAX_NESTING - 10)).is_empty());
        let deep = errors(&at(5000));
        assert_eq!(deep.len(), 1, "{deep:?}");
        assert!(deep[0].starts_with("nesting too deep"), "{deep:?}");
    }

    #[test]
    fn deep_calls_conditions_and_operator_chains_are_refused() {
        let calls = format!(
            "probe begin {{ x = {}1{} }}",
            "abs(".repeat(5000),
            ")".repeat(5000)
        );
        let ifs = format!("probe begin {{ {} x = 1 }}", "if (1) ".repeat(6000));
        let sum = format!("probe begin {{ x = 1{} }}", " + 1".repeat(20_000));
        let unary = format!("probe begin {{ x = {}1 }}", "- ".repeat(20_000));
        for text in [calls, ifs, sum, unary] {
            let found = errors(&text);
            assert!(
                found.iter().any(|m| m.starts_with("nesting too deep")),
                "{found:?}"
            );
        }
    }
}
