//! Array slices (`*` as a key) in `delete` and `foreach`, rewritten into
//! the plain forms before name resolution, so both backends run them
//! with what they already have (a `foreach` over the whole array, a test
//! of the fixed keys, an element `delete`):
//!
//! ```text
//! delete a[e, *]              { s_1 = e
//!                               foreach ([s_k1, s_k2] in a)
//!                                 if (s_k1 == s_1) delete a[s_k1, s_k2] }
//!
//! foreach ([x, y] in a[*, e] limit n) body
//!                             { s_2 = e; s_lim = n; s_n = 0
//!                               foreach ([x, y] in a)
//!                                 if (y == s_2) { if (s_n >= s_lim) break; s_n++; body } }
//! ```
//!
//! The fixed keys and the limit are evaluated once, before the walk, as
//! stap does. `[k, *] in a`, a test inside an expression, becomes a call
//! of a function written for it, so the walk can stop at the first match:
//!
//! ```text
//! [e, *] in a                 __slice_in_F_S(e)
//!
//! function __slice_in_F_S(__slice_p1) {
//!   foreach ([__slice_k1, __slice_k2] in a)
//!     if (__slice_k1 == __slice_p1) return 1
//!   return 0
//! }
//! ```

use crate::ast::{self, BinaryOp, Expr, ExprKind, Stmt, StmtKind};
use crate::source::{Span, Spanned};

/// True when some key is `*`.
pub(crate) fn is_slice(keys: &[Expr]) -> bool {
    keys.iter().any(|k| matches!(k.kind, ExprKind::Wildcard))
}

/// Hidden locals of one rewrite, named from a counter of the body so two
/// slices in one probe do not share them.
struct Names(u32);

impl Names {
    fn local(&self, what: &str) -> String {
        format!("__slice{}_{what}", self.0)
    }
}

fn var(name: String, span: Span) -> Expr {
    Expr {
        kind: ExprKind::Var(name),
        span,
    }
}

fn assign(target: String, value: Expr, span: Span) -> Stmt {
    let value_span = value.span;
    stmt(
        StmtKind::Expr(Expr {
            kind: ExprKind::Assign {
                op: ast::AssignOp::Set,
                target: Box::new(var(target, span)),
                value: Box::new(value),
            },
            span: value_span,
        }),
        span,
    )
}

fn binary(op: BinaryOp, lhs: Expr, rhs: Expr, span: Span) -> Expr {
    Expr {
        kind: ExprKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        },
        span,
    }
}

fn stmt(kind: StmtKind, span: Span) -> Stmt {
    Stmt { kind, span }
}

fn block(stmts: Vec<Stmt>, span: Span) -> Stmt {
    stmt(StmtKind::Block(ast::Block { stmts, span }), span)
}

/// Saves each fixed key in a hidden local (statements pushed to
/// `prologue`) and returns the test that an element's keys, read from
/// `key_names`, match them. `None` when every key is `*`.
fn match_test(
    slice: &[Expr],
    key_names: &[String],
    names: &Names,
    prologue: &mut Vec<Stmt>,
) -> Option<Expr> {
    let mut test: Option<Expr> = None;
    for (i, (key, name)) in slice.iter().zip(key_names).enumerate() {
        if matches!(key.kind, ExprKind::Wildcard) {
            continue;
        }
        let saved = names.local(&(i + 1).to_string());
        prologue.push(assign(saved.clone(), key.clone(), key.span));
        let equal = binary(
            BinaryOp::Eq,
            var(name.clone(), key.span),
            var(saved, key.span),
            key.span,
        );
        test = Some(match test {
            None => equal,
            Some(before) => binary(BinaryOp::And, before, equal, key.span),
        });
    }
    test
}

/// `foreach ([k1, ..., kN] in array) body`, unsorted and unlimited: the
/// walk that both the slice delete and the slice membership test make.
fn walk_keys(key_names: &[String], array: &ast::Ident, body: Stmt, span: Span) -> Stmt {
    stmt(
        StmtKind::Foreach(Box::new(ast::Foreach {
            value: None,
            keys: key_names
                .iter()
                .map(|k| (Spanned::new(k.clone(), span), None))
                .collect(),
            bracketed: true,
            array: array.clone(),
            slice: None,
            value_sort: None,
            aggregate: None,
            limit: None,
            body,
        })),
        span,
    )
}

/// `delete array[keys]` with some key `*`.
pub(crate) fn delete(array: &ast::Ident, keys: &[Expr], span: Span, counter: u32) -> Stmt {
    let names = Names(counter);
    let key_names: Vec<String> = (1..=keys.len())
        .map(|i| names.local(&format!("k{i}")))
        .collect();
    let mut stmts = Vec::new();
    let Some(test) = match_test(keys, &key_names, &names, &mut stmts) else {
        // Every key is `*`: the whole array.
        let whole = var(array.node.clone(), array.span);
        return stmt(StmtKind::Delete(whole), span);
    };
    let element = Expr {
        kind: ExprKind::Index {
            array: array.clone(),
            keys: key_names.iter().map(|k| var(k.clone(), span)).collect(),
        },
        span,
    };
    let remove = stmt(
        StmtKind::If {
            cond: test,
            then: Box::new(stmt(StmtKind::Delete(element), span)),
            otherwise: None,
        },
        span,
    );
    stmts.push(walk_keys(&key_names, array, remove, span));
    block(stmts, span)
}

/// `foreach (... in array[slice] ...) body`: the same loop over the whole
/// array, running the body for the matching elements only; `limit`
/// counts those.
pub(crate) fn foreach(f: &ast::Foreach, slice: &[Expr], span: Span, counter: u32) -> Stmt {
    let names = Names(counter);
    let key_names: Vec<String> = f.keys.iter().map(|(k, _)| k.node.clone()).collect();
    let mut stmts = Vec::new();
    let test = match_test(slice, &key_names, &names, &mut stmts);
    let mut body = vec![f.body.clone()];
    if let Some(limit) = &f.limit {
        let (bound, seen) = (names.local("limit"), names.local("seen"));
        stmts.push(assign(bound.clone(), limit.clone(), limit.span));
        let zero = Expr {
            kind: ExprKind::Literal(ast::Literal::Number(0)),
            span: limit.span,
        };
        stmts.push(assign(seen.clone(), zero, limit.span));
        let reached = binary(
            BinaryOp::Ge,
            var(seen.clone(), limit.span),
            var(bound, limit.span),
            limit.span,
        );
        let count = Expr {
            kind: ExprKind::Crement {
                increment: true,
                prefix: false,
                target: Box::new(var(seen, limit.span)),
            },
            span: limit.span,
        };
        body.splice(
            0..0,
            [
                stmt(
                    StmtKind::If {
                        cond: reached,
                        then: Box::new(stmt(StmtKind::Break, limit.span)),
                        otherwise: None,
                    },
                    limit.span,
                ),
                stmt(StmtKind::Expr(count), limit.span),
            ],
        );
    }
    let body = block(body, f.body.span);
    let body = match test {
        Some(cond) => stmt(
            StmtKind::If {
                cond,
                then: Box::new(body),
                otherwise: None,
            },
            f.body.span,
        ),
        None => body,
    };
    stmts.push(stmt(
        StmtKind::Foreach(Box::new(ast::Foreach {
            slice: None,
            limit: None,
            body,
            ..f.clone()
        })),
        span,
    ));
    block(stmts, span)
}

/// The function that `[keys] in array` calls (see the module's header),
/// taking the fixed keys in order as its parameters. Its name comes from
/// the test's place (file and offset), so lowering the same code again
/// (a probe body runs once per point) names the same function.
pub(crate) fn membership(keys: &[Expr], array: &ast::Ident, span: Span) -> ast::Function {
    let key_names: Vec<String> = (1..=keys.len()).map(|i| format!("__slice_k{i}")).collect();
    let mut params = Vec::new();
    let mut test: Option<Expr> = None;
    for (i, (key, name)) in keys.iter().zip(&key_names).enumerate() {
        if matches!(key.kind, ExprKind::Wildcard) {
            continue;
        }
        let param = format!("__slice_p{}", i + 1);
        params.push(ast::Param {
            name: Spanned::new(param.clone(), key.span),
            ty: None,
        });
        let equal = binary(
            BinaryOp::Eq,
            var(name.clone(), key.span),
            var(param, key.span),
            key.span,
        );
        test = Some(match test {
            None => equal,
            Some(before) => binary(BinaryOp::And, before, equal, key.span),
        });
    }
    let number = |n| Expr {
        kind: ExprKind::Literal(ast::Literal::Number(n)),
        span,
    };
    let found = stmt(StmtKind::Return(Some(number(1))), span);
    let body = match test {
        Some(cond) => stmt(
            StmtKind::If {
                cond,
                then: Box::new(found),
                otherwise: None,
            },
            span,
        ),
        None => found,
    };
    let walk = walk_keys(&key_names, array, body, span);
    ast::Function {
        name: Spanned::new(format!("__slice_in_{}_{}", span.file.0, span.start), span),
        private: false,
        ret: Some(Spanned::new(ast::TypeName::Long, span)),
        params,
        body: ast::FunctionBody::Block(ast::Block {
            stmts: vec![walk, stmt(StmtKind::Return(Some(number(0))), span)],
            span,
        }),
        span,
    }
}
