//! Placement: kernel-event probes run in BPF, begin/end/error/never and
//! host timers on the host. Functions run wherever they are called from
//! (possibly both), and each global records which sides touch it.

use super::hir::{Block, ExprKind, Function, FunctionId, Global, GlobalId, Placement, Probe};
use super::walk::{self, Node};

/// The functions a body calls and the globals it touches, in order of
/// first appearance.
pub(crate) fn references(body: &mut Block) -> (Vec<FunctionId>, Vec<GlobalId>) {
    let mut calls = Vec::new();
    let mut globals = Vec::new();
    walk::block(body, &mut |node| match node {
        Node::Expr(e) => match &e.kind {
            ExprKind::Call { function, .. } if !calls.contains(function) => calls.push(*function),
            ExprKind::Global(g)
            | ExprKind::Index { global: g, .. }
            | ExprKind::In { global: g, .. }
                if !globals.contains(g) =>
            {
                globals.push(*g)
            }
            _ => {}
        },
        Node::Global(g) => {
            if !globals.contains(&g) {
                globals.push(g);
            }
        }
    });
    (calls, globals)
}

pub(crate) fn place(globals: &mut [Global], functions: &mut [Function], probes: &mut [Probe]) {
    let per_function: Vec<(Vec<FunctionId>, Vec<GlobalId>)> = functions
        .iter_mut()
        .map(|f| references(&mut f.body))
        .collect();
    for probe in probes.iter_mut() {
        let side = probe.placement;
        let (mut calls, mut touched) = references(&mut probe.body);
        if let Some(cond) = &mut probe.condition {
            let mut block = Block {
                stmts: vec![super::hir::Stmt {
                    span: cond.span,
                    kind: super::hir::StmtKind::Expr(cond.clone()),
                }],
                span: cond.span,
            };
            let (c, g) = references(&mut block);
            calls.extend(c);
            touched.extend(g);
        }
        for g in touched {
            globals[g.0 as usize].used_by.add(side);
        }
        let mut stack = calls;
        while let Some(f) = stack.pop() {
            if functions[f.0 as usize].runs_on.add(side) {
                let (calls, touched) = &per_function[f.0 as usize];
                stack.extend(calls.iter().copied());
                for g in touched {
                    globals[g.0 as usize].used_by.add(side);
                }
            }
        }
    }
}

/// Every function reachable from the probes, in id order.
pub(crate) fn reachable(functions: &mut [Function], probes: &mut [Probe]) -> Vec<bool> {
    let per_function: Vec<Vec<FunctionId>> = functions
        .iter_mut()
        .map(|f| references(&mut f.body).0)
        .collect();
    let mut seen = vec![false; functions.len()];
    let mut stack: Vec<FunctionId> = Vec::new();
    for p in probes.iter_mut() {
        stack.extend(references(&mut p.body).0);
        if let Some(cond) = &mut p.condition {
            walk::expr(cond, &mut |node| {
                if let Node::Expr(e) = node
                    && let ExprKind::Call { function, .. } = &e.kind
                {
                    stack.push(*function);
                }
            });
        }
    }
    while let Some(f) = stack.pop() {
        if !std::mem::replace(&mut seen[f.0 as usize], true) {
            stack.extend(per_function[f.0 as usize].iter().copied());
        }
    }
    seen
}

impl Placement {
    pub fn describe(self) -> &'static str {
        match self {
            Placement::Kernel => "kernel (BPF)",
            Placement::Host => "host (JIT)",
        }
    }
}
