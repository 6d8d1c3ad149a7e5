//! Concurrency as stap defines it (docs/language.md, "Concurrency").
//!
//! stap locks every global a handler uses for the whole handler, so a
//! read-modify-write of a global never loses an update to a hit of a probe
//! on another CPU. Kernel handlers here run unlocked, on every CPU at once,
//! so the kernel code makes the common read-modify-write forms atomic:
//! - `x++`, `x--`, `x += e`, `x -= e`, and `x = x + e`, `x = e + x`,
//!   `x = x - e` ([`add_form`]), their value unused, `x` a long global or
//!   array element: one atomic add (`ir::Op::AddGlobal`, `ir::Op::MapAdd`);
//! - `if (!(k in a)) { a[k] = v; ... }` ([`test_and_set`]): one insert that
//!   fails when the key is there (`ir::Op::MapInsert`), so exactly one hit
//!   sees the key absent;
//! - `s <<< v`: per-CPU statistics, combined when read.
//!
//! Any other write to a global that the same handler has read (or reads in
//! the value it writes) can lose a concurrent update: [`check`] warns at
//! it, so nothing is lost silently. Elements keyed by `tid()` are exempt:
//! one thread runs one handler at a time. So are elements keyed by a
//! function parameter that every call fills with `tid()` (a helper such as
//! the stdlib's `__indent_level(tid(), delta)` behind `thread_indent`).

use hashbrown::HashSet;

use super::hir::{
    AccessBase, AccessStep, Block, Delete, Expr, ExprKind, FunctionId, GlobalId, Placement,
    Program, Stmt, StmtKind, Type,
};
use crate::ast::{AssignOp, BinaryOp, UnaryOp};
use crate::diag::Diagnostic;
use crate::source::Span;

/// Built-ins whose value cannot change within one handler run, so two
/// evaluations of a key naming them name the same element.
const STABLE_BUILTINS: &[&str] = &[
    "pid",
    "tid",
    "ppid",
    "execname",
    "pexecname",
    "uid",
    "gid",
    "euid",
    "cpu",
    "target",
    "pp",
    "probe_type",
    "is_return",
    "probefunc",
];

/// `x = x + e`, `x = e + x` or `x = x - e` as an atomic add: the delta
/// `e` and whether to negate it. `x` is a long global or an element with
/// stable keys; `e` does not read `x`'s global and has no side effects.
pub fn add_form<'e>(target: &Expr, value: &'e Expr) -> Option<(&'e Expr, bool)> {
    if target.ty != Type::Long || !stable_place(target) {
        return None;
    }
    let global = place_global(target)?;
    let ExprKind::Binary { op, lhs, rhs } = &value.kind else {
        return None;
    };
    let free = |e: &Expr| pure(e) && !reads(e, global);
    match op {
        BinaryOp::Add if same(lhs, target) && free(rhs) => Some((rhs, false)),
        BinaryOp::Add if same(rhs, target) && free(lhs) => Some((lhs, false)),
        BinaryOp::Sub if same(lhs, target) && free(rhs) => Some((rhs, true)),
        _ => None,
    }
}

/// `if (!(k in a)) { a[k] = v; rest }`, made one atomic insert.
pub struct TestAndSet<'a> {
    pub global: GlobalId,
    pub keys: &'a [Expr],
    pub value: &'a Expr,
    /// The assignment's span.
    pub span: Span,
    /// The statements after the assignment.
    pub rest: &'a [Stmt],
}

/// Recognises a test-and-set: the condition is `!(keys in a)`, the branch
/// starts with `a[keys] = v` for the same stable keys, and `v` is pure and
/// does not read `a`. The insert happens exactly when the test holds, so
/// the meaning is unchanged, and no two hits both see the key absent.
pub fn test_and_set<'a>(cond: &'a Expr, then: &'a Stmt) -> Option<TestAndSet<'a>> {
    let ExprKind::Unary {
        op: UnaryOp::Not,
        operand,
    } = &cond.kind
    else {
        return None;
    };
    let ExprKind::In { keys, global } = &operand.kind else {
        return None;
    };
    let (first, rest) = match &then.kind {
        StmtKind::Block(Block { stmts, .. }) => stmts.split_first()?,
        StmtKind::Expr(_) => (then, &[][..]),
        _ => return None,
    };
    let StmtKind::Expr(Expr {
        kind:
            ExprKind::Assign {
                op: AssignOp::Set,
                target,
                value,
            },
        span,
        ..
    }) = &first.kind
    else {
        return None;
    };
    let ExprKind::Index {
        global: written,
        keys: written_keys,
    } = &target.kind
    else {
        return None;
    };
    let same_keys =
        keys.len() == written_keys.len() && keys.iter().zip(written_keys).all(|(a, b)| same(a, b));
    if written != global || !same_keys || !keys.iter().all(stable) {
        return None;
    }
    if !pure(value) || reads(value, *global) {
        return None;
    }
    Some(TestAndSet {
        global: *global,
        keys,
        value,
        span: *span,
        rest,
    })
}

/// The warnings: every write in kernel code that may lose a concurrent
/// update, once per written global and handler or function.
pub fn check(program: &Program) -> Vec<Diagnostic> {
    // First the call sites, to learn which parameters always hold tid().
    let mut survey = Checker::new(program, HashSet::new());
    survey.visit_all();
    let per_thread = per_thread_parameters(program, &survey.calls, &survey.assigned);
    let mut checker = Checker::new(program, per_thread);
    checker.visit_all();
    checker.diags
}

/// What one argument of a call site is, for [`per_thread_parameters`].
#[derive(Clone, Copy, PartialEq)]
enum Arg {
    Tid,
    /// A parameter of the calling function.
    Param(usize),
    Other,
}

/// One call in kernel code: who calls (`None`: a probe handler), whom, with
/// what.
struct CallSite {
    caller: Option<FunctionId>,
    callee: FunctionId,
    args: Vec<Arg>,
}

/// The parameters that hold `tid()` in every run: every call passes
/// `tid()` or such a parameter of its own, and the body never assigns it.
/// An element keyed by one belongs to the calling thread, as one keyed by
/// `tid()` itself does (`thread_indent`'s depth, kept by a helper). The
/// greatest fixpoint, so recursion through such a parameter keeps it.
fn per_thread_parameters(
    program: &Program,
    calls: &[CallSite],
    assigned: &HashSet<(FunctionId, usize)>,
) -> HashSet<(FunctionId, usize)> {
    let mut set: HashSet<(FunctionId, usize)> = HashSet::new();
    for call in calls {
        for index in 0..call.args.len() {
            if !assigned.contains(&(call.callee, index)) {
                set.insert((call.callee, index));
            }
        }
    }
    loop {
        let before = set.len();
        for call in calls {
            for (index, arg) in call.args.iter().enumerate() {
                let per_thread = match (arg, call.caller) {
                    (Arg::Tid, _) => true,
                    (Arg::Param(p), Some(caller)) => set.contains(&(caller, *p)),
                    _ => false,
                };
                if !per_thread {
                    set.remove(&(call.callee, index));
                }
            }
        }
        if set.len() == before {
            break;
        }
    }
    set.retain(|(f, i)| *i < program.function(*f).param_count);
    set
}

struct Checker<'p> {
    program: &'p Program,
    /// Globals read so far in this handler (in statement order).
    read: HashSet<GlobalId>,
    warned: HashSet<GlobalId>,
    diags: Vec<Diagnostic>,
    /// The function being checked; `None` in a probe handler.
    current: Option<FunctionId>,
    /// Parameters known to hold `tid()` (see [`per_thread_parameters`]).
    per_thread: HashSet<(FunctionId, usize)>,
    /// Every call in kernel code, and every parameter its function assigns.
    calls: Vec<CallSite>,
    assigned: HashSet<(FunctionId, usize)>,
}

impl<'p> Checker<'p> {
    fn new(program: &'p Program, per_thread: HashSet<(FunctionId, usize)>) -> Checker<'p> {
        Checker {
            program,
            read: HashSet::new(),
            warned: HashSet::new(),
            diags: Vec::new(),
            current: None,
            per_thread,
            calls: Vec::new(),
            assigned: HashSet::new(),
        }
    }

    /// Every kernel probe handler, then every kernel function.
    fn visit_all(&mut self) {
        let program = self.program;
        for probe in &program.probes {
            if probe.placement != Placement::Kernel {
                continue;
            }
            self.read.clear();
            self.warned.clear();
            self.current = None;
            if let Some(c) = &probe.condition {
                self.expr(c, true);
            }
            self.block(&probe.body);
        }
        for (index, function) in program.functions.iter().enumerate() {
            if !function.runs_on.kernel {
                continue;
            }
            self.read.clear();
            self.warned.clear();
            self.current = Some(FunctionId(index as u32));
            self.block(&function.body);
        }
    }

    /// Whether key `e` names the running thread: `tid()`, or a parameter
    /// that always holds it.
    fn is_tid(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Local(local) => self
                .current
                .is_some_and(|f| self.per_thread.contains(&(f, local.0 as usize))),
            _ => is_tid(e),
        }
    }

    /// The survey's record of a call.
    fn call(&mut self, callee: FunctionId, args: &[Expr]) {
        let params = self
            .current
            .map_or(0, |f| self.program.function(f).param_count);
        let args = args
            .iter()
            .map(|a| match &a.kind {
                _ if is_tid(a) => Arg::Tid,
                ExprKind::Local(local) if (local.0 as usize) < params => {
                    Arg::Param(local.0 as usize)
                }
                _ => Arg::Other,
            })
            .collect();
        self.calls.push(CallSite {
            caller: self.current,
            callee,
            args,
        });
    }

    /// The survey's record of an assignment to a local.
    fn assigns(&mut self, target: &Expr) {
        if let (ExprKind::Local(local), Some(f)) = (&target.kind, self.current) {
            self.assigned.insert((f, local.0 as usize));
        }
    }

    fn block(&mut self, b: &Block) {
        for s in &b.stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Block(b) => self.block(b),
            StmtKind::Expr(e) => self.expr(e, false),
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                if let Some(tas) = test_and_set(cond, then) {
                    for k in tas.keys {
                        self.expr(k, true);
                    }
                    self.expr(tas.value, true);
                    for s in tas.rest {
                        self.stmt(s);
                    }
                } else {
                    self.expr(cond, true);
                    self.stmt(then);
                }
                if let Some(o) = otherwise {
                    self.stmt(o);
                }
            }
            // Twice: a read in one iteration precedes a write in the next.
            StmtKind::While { cond, body } => {
                for _ in 0..2 {
                    self.expr(cond, true);
                    self.stmt(body);
                }
            }
            StmtKind::For {
                init,
                cond,
                step,
                body,
            } => {
                if let Some(i) = init {
                    self.expr(i, false);
                }
                for _ in 0..2 {
                    if let Some(c) = cond {
                        self.expr(c, true);
                    }
                    self.stmt(body);
                    if let Some(st) = step {
                        self.expr(st, false);
                    }
                }
            }
            StmtKind::Foreach(fe) => {
                self.read.insert(fe.global);
                if let Some(l) = &fe.limit {
                    self.expr(l, true);
                }
                for _ in 0..2 {
                    self.stmt(&fe.body);
                }
            }
            StmtKind::Try { body, handler, .. } => {
                self.block(body);
                self.block(handler);
            }
            StmtKind::Return(Some(e)) => self.expr(e, true),
            StmtKind::Delete(Delete::Element { keys, .. }) => {
                for k in keys {
                    self.expr(k, true);
                }
            }
            StmtKind::Return(None)
            | StmtKind::Delete(_)
            | StmtKind::Break
            | StmtKind::Continue
            | StmtKind::Next
            | StmtKind::Empty => {}
        }
    }

    /// Visits `e` in evaluation order; `want`: its value is used.
    fn expr(&mut self, e: &Expr, want: bool) {
        match &e.kind {
            ExprKind::Global(g) => {
                self.read.insert(*g);
            }
            ExprKind::Index { global, keys } | ExprKind::In { keys, global } => {
                self.exprs(keys);
                self.read.insert(*global);
            }
            ExprKind::Assign { op, target, value } => {
                self.assigns(target);
                let atomic = match op {
                    AssignOp::Aggregate => true,
                    AssignOp::Set => match (want, add_form(target, value)) {
                        (false, Some((delta, _))) => {
                            self.expr(delta, true);
                            self.target_keys(target);
                            return;
                        }
                        _ => false,
                    },
                    AssignOp::Compound(op) => {
                        !want
                            && matches!(op, BinaryOp::Add | BinaryOp::Sub)
                            && target.ty == Type::Long
                    }
                };
                self.expr(value, true);
                self.target_keys(target);
                let rmw = matches!(op, AssignOp::Compound(_));
                if !atomic {
                    self.write(target, rmw);
                }
            }
            ExprKind::Crement { target, .. } => {
                self.assigns(target);
                self.target_keys(target);
                if want || target.ty != Type::Long {
                    self.write(target, true);
                }
            }
            // Reading a statistic combines the CPUs' shares: no update of
            // another hit is lost.
            ExprKind::Stat { operand, args, .. } => {
                if let ExprKind::Index { keys, .. } = &operand.kind {
                    self.exprs(keys);
                }
                self.exprs(args);
            }
            ExprKind::Context(access) => {
                if let AccessBase::Cast { ptr, .. } = &access.base {
                    self.expr(ptr, true);
                }
                for step in &access.steps {
                    if let AccessStep::Subscript { index, .. } = step {
                        self.expr(index, true);
                    }
                }
            }
            ExprKind::Call { function, args } => {
                self.call(*function, args);
                self.exprs(args)
            }
            ExprKind::Builtin { args, .. } => self.exprs(args),
            ExprKind::Entry(inner) | ExprKind::Unary { operand: inner, .. } => {
                self.expr(inner, true)
            }
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs, true);
                self.expr(rhs, true);
            }
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond, true);
                self.expr(then, want);
                self.expr(otherwise, want);
            }
            ExprKind::Regex {
                subject, pattern, ..
            } => {
                self.expr(subject, true);
                self.expr(pattern, true);
            }
            ExprKind::Long(_)
            | ExprKind::Str(_)
            | ExprKind::Local(_)
            | ExprKind::Bulk { .. }
            | ExprKind::Invalid => {}
        }
    }

    fn exprs(&mut self, es: &[Expr]) {
        for e in es {
            self.expr(e, true);
        }
    }

    fn target_keys(&mut self, target: &Expr) {
        if let ExprKind::Index { keys, .. } = &target.kind {
            self.exprs(keys);
        }
    }

    /// A non-atomic write of `target`: a warning if the handler read the
    /// global before (or `rmw`: the write reads it itself).
    fn write(&mut self, target: &Expr, rmw: bool) {
        let Some(global) = place_global(target) else {
            return;
        };
        if let ExprKind::Index { keys, .. } = &target.kind
            && keys.iter().any(|k| self.is_tid(k))
        {
            return;
        }
        if !(rmw || self.read.contains(&global)) || !self.warned.insert(global) {
            return;
        }
        let name = &self.program.global(global).name;
        self.diags.push(
            Diagnostic::warning(format!(
                "concurrent hits of this probe may lose updates to `{name}`"
            ))
            .at(target.span, "read and written without a lock")
            .note(
                "stap locks globals for the whole handler; kernel handlers here run unlocked \
                 on every CPU, and only `x++`, `x += e`, `x = x + e`, `a[k] = a[k] + e` and \
                 `if (!(k in a)) a[k] = v` are atomic (docs/language.md, Concurrency)",
            ),
        );
    }
}

fn place_global(e: &Expr) -> Option<GlobalId> {
    match &e.kind {
        ExprKind::Global(g) | ExprKind::Index { global: g, .. } => Some(*g),
        _ => None,
    }
}

fn stable_place(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Global(_) => true,
        ExprKind::Index { keys, .. } => keys.iter().all(stable),
        _ => false,
    }
}

fn is_tid(e: &Expr) -> bool {
    matches!(&e.kind, ExprKind::Builtin { name, args } if name == "tid" && args.is_empty())
}

/// Whether two evaluations of `e` in one handler run give the same value
/// with nothing in between: literals, locals, context, stable built-ins.
fn stable(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Long(_) | ExprKind::Str(_) | ExprKind::Local(_) => true,
        ExprKind::Context(access) => {
            matches!(access.base, AccessBase::Var(_))
                && access
                    .steps
                    .iter()
                    .all(|s| matches!(s, AccessStep::Member { .. }))
        }
        ExprKind::Builtin { name, args } => {
            STABLE_BUILTINS.contains(&name.as_str()) && args.iter().all(stable)
        }
        ExprKind::Unary { operand, .. } => stable(operand),
        ExprKind::Binary { lhs, rhs, .. } => stable(lhs) && stable(rhs),
        _ => false,
    }
}

/// No side effects (no assignment, call or built-in that may have one).
fn pure(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Long(_)
        | ExprKind::Str(_)
        | ExprKind::Local(_)
        | ExprKind::Global(_)
        | ExprKind::Context(_) => true,
        ExprKind::Index { keys, .. } | ExprKind::In { keys, .. } => keys.iter().all(pure),
        ExprKind::Builtin { name, args } => {
            STABLE_BUILTINS.contains(&name.as_str()) && args.iter().all(pure)
        }
        ExprKind::Unary { operand, .. } => pure(operand),
        ExprKind::Binary { lhs, rhs, .. } => pure(lhs) && pure(rhs),
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => pure(cond) && pure(then) && pure(otherwise),
        _ => false,
    }
}

/// Whether `e` reads `global` (for the few kinds `pure` admits).
fn reads(e: &Expr, global: GlobalId) -> bool {
    match &e.kind {
        ExprKind::Global(g) => *g == global,
        ExprKind::Index { global: g, keys } | ExprKind::In { global: g, keys } => {
            *g == global || keys.iter().any(|k| reads(k, global))
        }
        ExprKind::Builtin { args, .. } => args.iter().any(|a| reads(a, global)),
        ExprKind::Unary { operand, .. } => reads(operand, global),
        ExprKind::Binary { lhs, rhs, .. } => reads(lhs, global) || reads(rhs, global),
        ExprKind::Ternary {
            cond,
            then,
            otherwise,
        } => reads(cond, global) || reads(then, global) || reads(otherwise, global),
        _ => false,
    }
}

/// Structural equality of stable expressions, spans aside.
fn same(a: &Expr, b: &Expr) -> bool {
    match (&a.kind, &b.kind) {
        (ExprKind::Long(x), ExprKind::Long(y)) => x == y,
        (ExprKind::Str(x), ExprKind::Str(y)) => x == y,
        (ExprKind::Local(x), ExprKind::Local(y)) => x == y,
        (ExprKind::Global(x), ExprKind::Global(y)) => x == y,
        (ExprKind::Index { global: g, keys: k }, ExprKind::Index { global: h, keys: l }) => {
            g == h && k.len() == l.len() && k.iter().zip(l).all(|(x, y)| same(x, y))
        }
        (ExprKind::Context(x), ExprKind::Context(y)) => {
            x.base == y.base && x.steps == y.steps && x.ty == y.ty
        }
        (ExprKind::Builtin { name: n, args: x }, ExprKind::Builtin { name: m, args: y }) => {
            n == m && x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (ExprKind::Unary { op: o, operand: x }, ExprKind::Unary { op: p, operand: y }) => {
            o == p && same(x, y)
        }
        (
            ExprKind::Binary {
                op: o,
                lhs: a1,
                rhs: b1,
            },
            ExprKind::Binary {
                op: p,
                lhs: a2,
                rhs: b2,
            },
        ) => o == p && same(a1, a2) && same(b1, b2),
        _ => false,
    }
}
