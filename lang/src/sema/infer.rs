//! Type inference, stap's way: walk every function and probe over and over,
//! giving each local, global, array key, parameter and return value the
//! type its uses demand, until nothing changes. A final walk reports
//! conflicts (with both sites) and wrong uses; then anything still unknown is
//! an error.

use super::builtins::{self, ParamType, ReturnType};
use super::hir::{
    AccessBase, AccessStep, Block, Delete, Expr, ExprKind, Function, FunctionId, Global, GlobalId,
    LocalId, Probe, Stmt, StmtKind, Type,
};
use crate::ast::{AssignOp, BinaryOp, StatOp};
use crate::diag::Diagnostic;
use crate::printf;
use crate::source::Span;
use std::collections::HashSet;

/// Something that has one type for the whole program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Sym {
    /// A local (or parameter) of body `.0`: functions first, then probes.
    Local(usize, LocalId),
    Global(GlobalId),
    Key(GlobalId, usize),
    Ret(FunctionId),
}

/// Types with the site that decided each one.
#[derive(Default)]
struct Table {
    types: Vec<Type>,
    sites: Vec<Option<Span>>,
}

impl Table {
    fn new(types: impl IntoIterator<Item = (Type, Span)>) -> Table {
        let mut t = Table::default();
        for (ty, span) in types {
            t.types.push(ty);
            t.sites.push(ty.is_known().then_some(span));
        }
        t
    }
}

struct State<'d> {
    bodies: Vec<Table>,
    body_names: Vec<Vec<String>>,
    globals: Table,
    global_names: Vec<String>,
    keys: Vec<Table>,
    rets: Table,
    function_names: Vec<String>,
    param_counts: Vec<usize>,
    has_value_return: Vec<bool>,
    /// The body being walked, and its function if it is one.
    body: usize,
    function: Option<FunctionId>,
    /// Only the final walk reports errors; earlier ones just infer.
    report: bool,
    changed: bool,
    reported: HashSet<Sym>,
    /// Inside a `print`/`println` argument, where histograms may appear.
    hist_ok: bool,
    diags: &'d mut Vec<Diagnostic>,
}

/// Infers every type; writes them into the HIR. Returns, per function,
/// whether it returns nothing: no `return EXPR`, and no use of its value
/// gave it a type (stap's "void" function, typed long here so its calls
/// as statements compile; `misuse` refuses its calls as values).
pub(crate) fn infer(
    globals: &mut [Global],
    referenced: &[bool],
    functions: &mut [Function],
    probes: &mut [Probe],
    diags: &mut Vec<Diagnostic>,
) -> Vec<bool> {
    let errors_before = diags.iter().any(Diagnostic::is_error);
    let mut bodies: Vec<Table> = Vec::new();
    let mut body_names = Vec::new();
    for f in functions.iter() {
        bodies.push(Table::new(f.locals.iter().map(|l| (l.ty, l.span))));
        body_names.push(f.locals.iter().map(|l| l.name.clone()).collect());
    }
    for p in probes.iter() {
        bodies.push(Table::new(p.locals.iter().map(|l| (l.ty, l.span))));
        body_names.push(p.locals.iter().map(|l| l.name.clone()).collect());
    }
    let mut state = State {
        bodies,
        body_names,
        globals: Table::new(globals.iter().map(|g| (g.ty, g.span))),
        global_names: globals.iter().map(|g| g.name.clone()).collect(),
        keys: globals
            .iter()
            .map(|g| Table::new(g.keys.iter().map(|k| (*k, g.span))))
            .collect(),
        rets: Table::new(functions.iter().map(|f| (f.ret, f.span))),
        function_names: functions.iter().map(|f| f.name.clone()).collect(),
        param_counts: functions.iter().map(|f| f.param_count).collect(),
        has_value_return: vec![false; functions.len()],
        body: 0,
        function: None,
        report: false,
        changed: false,
        reported: HashSet::new(),
        hist_ok: false,
        diags,
    };
    // Each round can only move symbols from unknown to known, and there
    // are finitely many, so this ends; the bound is only a guard.
    let symbols: usize = state.bodies.iter().map(|b| b.types.len()).sum::<usize>()
        + state.globals.types.len()
        + state.keys.iter().map(|k| k.types.len()).sum::<usize>()
        + state.rets.types.len();
    for _ in 0..=symbols {
        state.changed = false;
        state.walk_all(functions, probes);
        if !state.changed {
            break;
        }
    }
    state.report = true;
    state.walk_all(functions, probes);
    let quiet = errors_before || state.diags.iter().any(Diagnostic::is_error);
    let returns_nothing = functions
        .iter()
        .enumerate()
        // Not after other errors, which may be why (an embedded-C body).
        .map(|(i, _)| !quiet && !state.rets.types[i].is_known() && !state.has_value_return[i])
        .collect();
    state.finish(globals, referenced, functions, probes, quiet);
    returns_nothing
}

impl State<'_> {
    fn walk_all(&mut self, functions: &mut [Function], probes: &mut [Probe]) {
        let n = functions.len();
        for (i, f) in functions.iter_mut().enumerate() {
            self.body = i;
            self.function = Some(FunctionId(i as u32));
            self.block(&mut f.body);
        }
        for (i, p) in probes.iter_mut().enumerate() {
            self.body = n + i;
            self.function = None;
            if let Some(c) = &mut p.condition {
                self.expr(c);
                self.demand(c, Type::Long);
            }
            self.block(&mut p.body);
        }
    }

    /// Writes the types back, and reports what stayed unknown (unless
    /// earlier errors probably caused it).
    fn finish(
        &mut self,
        globals: &mut [Global],
        referenced: &[bool],
        functions: &mut [Function],
        probes: &mut [Probe],
        quiet: bool,
    ) {
        for (i, g) in globals.iter_mut().enumerate() {
            let used = referenced.get(i).copied().unwrap_or(true);
            g.ty = self.globals.types[i];
            g.keys = self.keys[i].types.clone();
            if !g.ty.is_known() {
                if used && !quiet {
                    self.diags.push(
                        Diagnostic::error(format!("unresolved type for global `{}`", g.name))
                            .at(g.span, "its type cannot be inferred")
                            .note(
                                "help: give it an initial value, or use it where its type is clear",
                            ),
                    );
                }
                g.ty = Type::Long;
            }
            for (k, key) in g.keys.iter_mut().enumerate() {
                if !key.is_known() {
                    if used && !quiet {
                        self.diags.push(
                            Diagnostic::error(format!(
                                "unresolved type for key {} of array `{}`",
                                k + 1,
                                g.name
                            ))
                            .at(g.span, "its type cannot be inferred"),
                        );
                    }
                    *key = Type::Long;
                }
            }
        }
        for (i, f) in functions.iter_mut().enumerate() {
            f.ret = self.rets.types[i];
            if !f.ret.is_known() {
                if self.has_value_return[i] && !quiet {
                    self.diags.push(
                        Diagnostic::error(format!(
                            "unresolved type for the return value of `{}`",
                            f.name
                        ))
                        .at(f.span, "its return type cannot be inferred")
                        .note("help: declare it, as in `function name:long(...)`"),
                    );
                }
                // A function that never returns a value returns 0.
                f.ret = Type::Long;
            }
            let is_param = |l: usize| l < f.param_count;
            self.write_locals(i, &mut f.locals, &f.name, &is_param, quiet);
        }
        let n = functions.len();
        for (i, p) in probes.iter_mut().enumerate() {
            self.write_locals(n + i, &mut p.locals, &p.resolved, &|_| false, quiet);
        }
    }

    fn write_locals(
        &mut self,
        body: usize,
        locals: &mut [super::hir::Local],
        owner: &str,
        is_param: &dyn Fn(usize) -> bool,
        quiet: bool,
    ) {
        for (l, local) in locals.iter_mut().enumerate() {
            local.ty = self.bodies[body].types[l];
            if !local.ty.is_known() {
                if !quiet {
                    let what = if is_param(l) { "parameter" } else { "local" };
                    self.diags.push(
                        Diagnostic::error(format!(
                            "unresolved type for {what} `{}` in `{owner}`",
                            local.name
                        ))
                        .at(local.span, "its type cannot be inferred"),
                    );
                }
                local.ty = Type::Long;
            }
        }
    }

    fn describe(&self, sym: Sym) -> String {
        match sym {
            Sym::Local(body, l) => {
                let name = &self.body_names[body][l.0 as usize];
                match self.param_counts.get(body) {
                    Some(n) if (l.0 as usize) < *n => {
                        format!("parameter `{name}` of `{}`", self.function_names[body])
                    }
                    _ => format!("local `{name}`"),
                }
            }
            Sym::Global(g) => format!("global `{}`", self.global_names[g.0 as usize]),
            Sym::Key(g, k) => format!(
                "key {} of array `{}`",
                k + 1,
                self.global_names[g.0 as usize]
            ),
            Sym::Ret(f) => format!(
                "the return value of `{}`",
                self.function_names[f.0 as usize]
            ),
        }
    }

    fn slot(&mut self, sym: Sym) -> Option<(&mut Type, &mut Option<Span>)> {
        let (table, index) = match sym {
            Sym::Local(body, l) => (self.bodies.get_mut(body)?, l.0 as usize),
            Sym::Global(g) => (&mut self.globals, g.0 as usize),
            Sym::Key(g, k) => (self.keys.get_mut(g.0 as usize)?, k),
            Sym::Ret(f) => (&mut self.rets, f.0 as usize),
        };
        let ty = table.types.get_mut(index)?;
        let site = table.sites.get_mut(index)?;
        Some((ty, site))
    }

    fn sym_type(&mut self, sym: Sym) -> Type {
        self.slot(sym).map_or(Type::Unknown, |(t, _)| *t)
    }

    /// Gives `sym` the type `ty` demanded at `span`.
    fn unify(&mut self, sym: Sym, ty: Type, span: Span) {
        if !ty.is_known() {
            return;
        }
        let Some((current, site)) = self.slot(sym) else {
            return;
        };
        if !current.is_known() {
            *current = ty;
            *site = Some(span);
            self.changed = true;
            return;
        }
        let (had, first) = (*current, *site);
        // Reading a stats value is reported where it is read, in `expr`.
        if had == ty || had == Type::Stats || !self.report || !self.reported.insert(sym) {
            return;
        }
        let what = self.describe(sym);
        let mut d = Diagnostic::error(format!(
            "type conflict: {what} is {}, but used as {}",
            had.name(),
            ty.name()
        ))
        .at(span, format!("used as {} here", ty.name()));
        if let Some(first) = first {
            d = d.also(first, format!("{what} is {} because of this", had.name()));
        }
        self.diags.push(d);
    }

    /// Makes two symbols agree.
    fn link(&mut self, a: Sym, b: Sym, span: Span) {
        let (ta, tb) = (self.sym_type(a), self.sym_type(b));
        self.unify(b, ta, span);
        self.unify(a, tb, span);
    }

    fn local(&self, l: LocalId) -> Sym {
        Sym::Local(self.body, l)
    }

    /// Demands that `e` have type `ty`: symbols take it on, anything else
    /// must already have it.
    fn demand(&mut self, e: &Expr, ty: Type) {
        if !ty.is_known() {
            return;
        }
        match &e.kind {
            ExprKind::Local(l) => self.unify(self.local(*l), ty, e.span),
            ExprKind::Global(g) | ExprKind::Index { global: g, .. } => {
                self.unify(Sym::Global(*g), ty, e.span)
            }
            ExprKind::Call { function, .. } => self.unify(Sym::Ret(*function), ty, e.span),
            ExprKind::Ternary {
                then, otherwise, ..
            } => {
                self.demand(then, ty);
                self.demand(otherwise, ty);
            }
            ExprKind::Assign {
                op: AssignOp::Set,
                target,
                ..
            } => self.demand(target, ty),
            ExprKind::Invalid => {}
            _ => {
                if self.report && e.ty.is_known() && e.ty != ty && e.ty != Type::Stats {
                    self.diags.push(
                        Diagnostic::error(format!(
                            "type mismatch: expected {}, found {}",
                            ty.name(),
                            e.ty.name()
                        ))
                        .at(e.span, format!("this is a {}", e.ty.name())),
                    );
                }
            }
        }
    }

    /// Makes two operands agree (`==`, `=`, `?:` branches). When both are
    /// known and differ, the conflict is reported once, on a symbol if
    /// there is one (so it names both sites).
    fn cross(&mut self, a: &Expr, b: &Expr) -> Type {
        let plain = |t: Type| if t == Type::Stats { Type::Unknown } else { t };
        let (ta, tb) = (plain(a.ty), plain(b.ty));
        if ta.is_known() && tb.is_known() && ta != tb && !is_symbol(b) && is_symbol(a) {
            self.demand(a, tb);
            return tb;
        }
        if ta.is_known() {
            self.demand(b, ta);
            ta
        } else {
            self.demand(a, tb);
            tb
        }
    }

    /// `value` flows into `sym`: the symbol learns the value's type, or an
    /// untyped value (a local, a call) learns the symbol's.
    fn flow(&mut self, sym: Sym, value: &Expr) {
        if value.ty.is_known() {
            if value.ty != Type::Stats {
                self.unify(sym, value.ty, value.span);
            }
        } else {
            let want = self.sym_type(sym);
            self.demand(value, want);
        }
    }

    fn block(&mut self, b: &mut Block) {
        for s in &mut b.stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &mut Stmt) {
        match &mut s.kind {
            StmtKind::Block(b) => self.block(b),
            StmtKind::Expr(e) => {
                self.expr(e);
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.condition(cond);
                self.stmt(then);
                if let Some(o) = otherwise {
                    self.stmt(o);
                }
            }
            StmtKind::While { cond, body } => {
                self.condition(cond);
                self.stmt(body);
            }
            StmtKind::For {
                init,
                cond,
                step,
                body,
            } => {
                if let Some(e) = init {
                    self.expr(e);
                }
                if let Some(c) = cond {
                    self.condition(c);
                }
                if let Some(e) = step {
                    self.expr(e);
                }
                self.stmt(body);
            }
            StmtKind::Foreach(f) => {
                let g = f.global;
                for (i, k) in f.keys.iter().enumerate() {
                    self.link(self.local(*k), Sym::Key(g, i), s.span);
                }
                if let Some(v) = f.value {
                    if self.sym_type(Sym::Global(g)) == Type::Stats {
                        // Bound to the aggregate the loop sorts by.
                        self.unify(self.local(v), Type::Long, s.span);
                    } else {
                        self.link(self.local(v), Sym::Global(g), s.span);
                    }
                }
                if let Some(limit) = &mut f.limit {
                    self.expr(limit);
                    self.demand(limit, Type::Long);
                }
                self.stmt(&mut f.body);
            }
            StmtKind::Return(Some(e)) => {
                self.expr(e);
                if let Some(f) = self.function {
                    self.has_value_return[f.0 as usize] = true;
                    self.flow(Sym::Ret(f), e);
                }
            }
            StmtKind::Delete(Delete::Element { global, keys }) => {
                let g = *global;
                self.keys_of(g, keys);
            }
            StmtKind::Try {
                body,
                message,
                handler,
            } => {
                self.block(body);
                if let Some(m) = message {
                    self.unify(self.local(*m), Type::String, s.span);
                }
                self.block(handler);
            }
            StmtKind::Return(None)
            | StmtKind::Delete(_)
            | StmtKind::Break
            | StmtKind::Continue
            | StmtKind::Next
            | StmtKind::Empty => {}
        }
    }

    fn condition(&mut self, e: &mut Expr) {
        self.expr(e);
        self.demand(e, Type::Long);
    }

    fn keys_of(&mut self, g: GlobalId, keys: &mut [Expr]) {
        for (i, k) in keys.iter_mut().enumerate() {
            self.expr(k);
            self.flow(Sym::Key(g, i), k);
        }
    }

    /// A stats global or element, the operand of `<<<` or `@count(...)`.
    fn stats_operand(&mut self, e: &mut Expr, what: &str) {
        let g = match &mut e.kind {
            ExprKind::Global(g) => *g,
            ExprKind::Index { global, keys } => {
                let g = *global;
                self.keys_of(g, keys);
                g
            }
            ExprKind::Invalid => return,
            _ => {
                self.expr(e);
                if self.report {
                    self.diags.push(
                        Diagnostic::error(format!("{what} needs a global statistics variable"))
                            .at(e.span, "not a global or array element")
                            .note("help: declare a global and add values with `<<<`"),
                    );
                }
                return;
            }
        };
        self.unify(Sym::Global(g), Type::Stats, e.span);
        e.ty = self.sym_type(Sym::Global(g));
    }

    fn stats_value_error(&mut self, e: &Expr, g: GlobalId) {
        if !self.report || self.sym_type(Sym::Global(g)) != Type::Stats {
            return;
        }
        let name = &self.global_names[g.0 as usize];
        self.diags.push(
            Diagnostic::error(format!("statistics `{name}` used as a value"))
                .at(e.span, "a statistics aggregate has no single value")
                .note(format!(
                    "help: extract one with @count({name}), @sum, @min, @max, @avg or @variance, or print @hist_log({name})"
                )),
        );
    }

    fn expr(&mut self, e: &mut Expr) -> Type {
        let hist_ok = std::mem::replace(&mut self.hist_ok, false);
        let span = e.span;
        let ty = match &mut e.kind {
            ExprKind::Long(_) => Type::Long,
            ExprKind::Str(_) => Type::String,
            ExprKind::Local(l) => self.sym_type(self.local(*l)),
            ExprKind::Global(g) => {
                let g = *g;
                self.stats_value_error(e, g);
                self.sym_type(Sym::Global(g))
            }
            ExprKind::Index { global, keys } => {
                let g = *global;
                self.keys_of(g, keys);
                let t = self.sym_type(Sym::Global(g));
                if t == Type::Stats && self.report {
                    let copy = Expr {
                        kind: ExprKind::Invalid,
                        ty: t,
                        span,
                    };
                    self.stats_value_error(&copy, g);
                }
                t
            }
            ExprKind::Context(access) => {
                if let AccessBase::Cast { ptr, .. } = &mut access.base {
                    self.expr(ptr);
                    self.demand(ptr, Type::Long);
                }
                for step in &mut access.steps {
                    if let AccessStep::Subscript { index, .. } = step {
                        self.expr(index);
                        self.demand(index, Type::Long);
                    }
                }
                e.ty
            }
            ExprKind::Bulk { .. } => Type::String,
            ExprKind::Call { function, args } => {
                let f = *function;
                for (i, a) in args.iter_mut().enumerate() {
                    self.expr(a);
                    self.flow(Sym::Local(f.0 as usize, LocalId(i as u32)), a);
                }
                self.sym_type(Sym::Ret(f))
            }
            ExprKind::Builtin { name, args } => {
                let name = name.clone();
                self.builtin(&name, args, span)
            }
            ExprKind::Stat { op, operand, args } => {
                let op = *op;
                self.stats_operand(operand, &format!("@{}", op.name()));
                for a in args.iter_mut() {
                    self.expr(a);
                    self.demand(a, Type::Long);
                }
                if matches!(op, StatOp::HistLog | StatOp::HistLinear) {
                    if !hist_ok && self.report {
                        self.diags.push(
                            Diagnostic::error(format!("@{} can only be printed", op.name()))
                                .at(span, "a histogram is not a value")
                                .note(format!("help: print it with `print(@{}(...))`", op.name())),
                        );
                    }
                    Type::String
                } else {
                    Type::Long
                }
            }
            ExprKind::Entry(inner) => self.expr(inner),
            ExprKind::Unary { operand, .. } => {
                self.expr(operand);
                self.demand(operand, Type::Long);
                Type::Long
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let op = *op;
                self.expr(lhs);
                self.expr(rhs);
                match op {
                    BinaryOp::Concat => {
                        self.demand(lhs, Type::String);
                        self.demand(rhs, Type::String);
                        Type::String
                    }
                    BinaryOp::Eq
                    | BinaryOp::Ne
                    | BinaryOp::Lt
                    | BinaryOp::Le
                    | BinaryOp::Gt
                    | BinaryOp::Ge => {
                        self.cross(lhs, rhs);
                        Type::Long
                    }
                    _ => {
                        self.demand(lhs, Type::Long);
                        self.demand(rhs, Type::Long);
                        Type::Long
                    }
                }
            }
            ExprKind::Assign { op, target, value } => match *op {
                AssignOp::Set => {
                    self.expr(value);
                    self.expr(target);
                    self.cross(value, target)
                }
                AssignOp::Aggregate => {
                    self.stats_operand(target, "`<<<`");
                    self.expr(value);
                    self.demand(value, Type::Long);
                    Type::Long
                }
                AssignOp::Compound(BinaryOp::Concat) => {
                    self.expr(value);
                    self.expr(target);
                    self.demand(target, Type::String);
                    self.demand(value, Type::String);
                    Type::String
                }
                AssignOp::Compound(_) => {
                    self.expr(value);
                    self.expr(target);
                    self.demand(target, Type::Long);
                    self.demand(value, Type::Long);
                    Type::Long
                }
            },
            ExprKind::Crement { target, .. } => {
                self.expr(target);
                self.demand(target, Type::Long);
                Type::Long
            }
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                self.condition(cond);
                self.expr(then);
                self.expr(otherwise);
                self.cross(then, otherwise)
            }
            ExprKind::In { keys, global } => {
                let g = *global;
                self.keys_of(g, keys);
                Type::Long
            }
            ExprKind::Regex {
                subject, pattern, ..
            } => {
                self.expr(subject);
                self.expr(pattern);
                self.demand(subject, Type::String);
                self.demand(pattern, Type::String);
                Type::Long
            }
            ExprKind::Invalid => Type::Unknown,
        };
        // A symbol may have learnt its type from a demand made above.
        let ty = match &e.kind {
            ExprKind::Local(l) => self.sym_type(self.local(*l)),
            ExprKind::Global(g) | ExprKind::Index { global: g, .. } => {
                self.sym_type(Sym::Global(*g))
            }
            ExprKind::Call { function, .. } => self.sym_type(Sym::Ret(*function)),
            ExprKind::Assign {
                op: AssignOp::Set,
                target,
                ..
            } => target.ty.max_known(ty),
            _ => ty,
        };
        e.ty = ty;
        ty
    }

    fn builtin(&mut self, name: &str, args: &mut [Expr], span: Span) -> Type {
        let Some(b) = builtins::lookup(name) else {
            return Type::Unknown;
        };
        match name {
            "printf" | "sprintf" => self.format_call(name, args, span),
            _ => {
                let printing = matches!(name, "print" | "println");
                for (i, a) in args.iter_mut().enumerate() {
                    self.hist_ok = printing;
                    let t = self.expr(a);
                    let want = match b.param(i) {
                        Some(ParamType::Long) => Type::Long,
                        Some(ParamType::String) => Type::String,
                        Some(ParamType::Any) | None => Type::Unknown,
                    };
                    if want.is_known()
                        && t.is_known()
                        && t != want
                        && t != Type::Stats
                        && !is_symbol(a)
                    {
                        if self.report {
                            self.diags.push(
                                Diagnostic::error(format!(
                                    "argument {} of `{name}` must be a {}, found {}",
                                    i + 1,
                                    want.name(),
                                    t.name()
                                ))
                                .at(a.span, format!("this is a {}", t.name()))
                                .note(format!("`{}`", super::lower::builtin_signature(b))),
                            );
                        }
                    } else {
                        self.demand(a, want);
                    }
                }
            }
        }
        match b.ret {
            ReturnType::String => Type::String,
            ReturnType::Long | ReturnType::Void => Type::Long,
        }
    }

    /// `printf(fmt, ...)`: the format must be a literal, and its directives
    /// decide the number and types of the other arguments.
    fn format_call(&mut self, name: &str, args: &mut [Expr], span: Span) {
        let Some((format, rest)) = args.split_first_mut() else {
            return;
        };
        self.expr(format);
        for a in rest.iter_mut() {
            self.expr(a);
        }
        let ExprKind::Str(text) = &format.kind else {
            if self.report && !matches!(format.kind, ExprKind::Invalid) {
                self.diags.push(
                    Diagnostic::error(format!("the format of `{name}` must be a literal string"))
                        .at(format.span, "not a string literal")
                        .note(format!(
                            "help: write `{name}(\"%s\", value)` to print a computed string"
                        )),
                );
            }
            return;
        };
        let pieces = match printf::parse(text) {
            Ok(p) => p,
            Err(e) => {
                if self.report {
                    self.diags.push(
                        Diagnostic::error(format!("invalid format for `{name}`: {}", e.message))
                            .at(format.span, "in this format"),
                    );
                }
                return;
            }
        };
        // Each consumed argument with the directive that consumes it.
        let mut wanted: Vec<(printf::ArgKind, String)> = Vec::new();
        for piece in &pieces {
            if let printf::Piece::Spec(spec) = piece {
                let directive = text
                    .get(spec.offset..spec.offset + spec.len)
                    .unwrap_or("%")
                    .to_string();
                for kind in spec.arg_kinds() {
                    wanted.push((kind, directive.clone()));
                }
            }
        }
        for (i, a) in rest.iter_mut().enumerate() {
            let Some((kind, directive)) = wanted.get(i) else {
                break;
            };
            let want = match kind {
                printf::ArgKind::Long => Type::Long,
                printf::ArgKind::String => Type::String,
            };
            if a.ty.is_known() && a.ty != want && a.ty != Type::Stats && !is_symbol(a) {
                if self.report {
                    self.diags.push(
                        Diagnostic::error(format!(
                            "`{directive}` expects a {}, but argument {} is a {}",
                            want.name(),
                            i + 2,
                            a.ty.name()
                        ))
                        .at(a.span, format!("this is a {}", a.ty.name()))
                        .also(format.span, format!("`{directive}` in this format")),
                    );
                }
            } else {
                self.demand(a, want);
            }
        }
        if !self.report {
            return;
        }
        if rest.len() < wanted.len() {
            self.diags.push(
                Diagnostic::error(format!(
                    "too few arguments for the format of `{name}`: it needs {}, found {}",
                    wanted.len(),
                    rest.len()
                ))
                .at(span, format!("{} argument(s) after the format", rest.len()))
                .also(
                    format.span,
                    format!("`{}` has no argument", wanted[rest.len()].1),
                ),
            );
        } else if rest.len() > wanted.len() {
            self.diags.push(
                Diagnostic::error(format!(
                    "too many arguments for the format of `{name}`: it needs {}, found {}",
                    wanted.len(),
                    rest.len()
                ))
                .at(rest[wanted.len()].span, "no directive prints this")
                .also(
                    format.span,
                    format!("this format has {} directive argument(s)", wanted.len()),
                ),
            );
        }
    }
}

/// Symbols learn their type from a demand; a conflict with one is
/// reported by `unify` with both sites, so plain checks skip them.
fn is_symbol(e: &Expr) -> bool {
    matches!(
        e.kind,
        ExprKind::Local(_) | ExprKind::Global(_) | ExprKind::Index { .. } | ExprKind::Call { .. }
    )
}

impl Type {
    fn max_known(self, other: Type) -> Type {
        if self.is_known() { self } else { other }
    }
}
