//! Placement: kernel-event probes run in BPF, begin/end/error/never and
//! host timers on the host. Functions run wherever they are called from
//! (possibly both), and each global records which sides touch it.

use super::hir::{ExprKind, Function, FunctionId, Global, GlobalId, Placement, Probe};
use super::walk::{self, Node};

/// The functions a body calls and the globals it touches, in order of
/// first appearance.
#[derive(Default)]
struct References {
    calls: Vec<FunctionId>,
    globals: Vec<GlobalId>,
}

impl References {
    fn note(&mut self, node: Node<'_>) {
        let global = match node {
            Node::Expr(e) => match &e.kind {
                ExprKind::Call { function, .. } => {
                    if !self.calls.contains(function) {
                        self.calls.push(*function);
                    }
                    return;
                }
                ExprKind::Global(g)
                | ExprKind::Index { global: g, .. }
                | ExprKind::In { global: g, .. } => *g,
                _ => return,
            },
            Node::Global(g) => g,
        };
        if !self.globals.contains(&global) {
            self.globals.push(global);
        }
    }

    fn of_function(f: &mut Function) -> References {
        let mut refs = References::default();
        walk::block(&mut f.body, &mut |node| refs.note(node));
        refs
    }

    /// A probe's body and its `if (...)` condition.
    fn of_probe(p: &mut Probe) -> References {
        let mut refs = References::default();
        walk::block(&mut p.body, &mut |node| refs.note(node));
        if let Some(cond) = &mut p.condition {
            walk::expr(cond, &mut |node| refs.note(node));
        }
        refs
    }
}

pub(crate) fn place(globals: &mut [Global], functions: &mut [Function], probes: &mut [Probe]) {
    let per_function: Vec<References> = functions.iter_mut().map(References::of_function).collect();
    for probe in probes.iter_mut() {
        let side = probe.placement;
        let refs = References::of_probe(probe);
        for g in refs.globals {
            globals[g.0 as usize].used_by.add(side);
        }
        let mut stack = refs.calls;
        while let Some(f) = stack.pop() {
            if functions[f.0 as usize].runs_on.add(side) {
                let callee = &per_function[f.0 as usize];
                stack.extend(callee.calls.iter().copied());
                for g in &callee.globals {
                    globals[g.0 as usize].used_by.add(side);
                }
            }
        }
    }
}

/// Which functions the probes reach, directly or through other functions.
pub(crate) fn reachable(functions: &mut [Function], probes: &mut [Probe]) -> Vec<bool> {
    let per_function: Vec<Vec<FunctionId>> = functions
        .iter_mut()
        .map(|f| References::of_function(f).calls)
        .collect();
    let mut seen = vec![false; functions.len()];
    let mut stack: Vec<FunctionId> = probes
        .iter_mut()
        .flat_map(|p| References::of_probe(p).calls)
        .collect();
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
