//! Name resolution: AST bodies become HIR with every name bound to a local
//! slot, a global, a function or a builtin. Types are left `Unknown` here
//! (except where written) and filled in by `infer`.

mod autocast;

use super::builtins;
use super::hir::{
    self, Expr, ExprKind, FunctionId, GlobalId, Local, LocalId, Stmt, StmtKind, Type,
};
use super::pointer_slots::Slot;
use super::points::{ProbeContext, ResolvedPoint};
use super::slices;
use super::symbols::Elaborator;
use crate::ast;
use crate::diag::Diagnostic;
use crate::source::Span;
use autocast::PointerLocals;
use std::collections::HashMap;

/// Lowers one body (a function's, or a probe's with its alias parts).
pub(crate) struct BodyLowerer<'e, 'a> {
    pub elab: &'e mut Elaborator<'a>,
    pub locals: Vec<Local>,
    local_names: HashMap<String, LocalId>,
    assigned: Vec<bool>,
    first_read: Vec<Option<Span>>,
    /// The probe's context; `None` inside functions.
    pub ctx: Option<ProbeContext>,
    in_function: bool,
    /// The first raw tracepoint argument and classic record field the
    /// body reads (a tracepoint probe reads one kind or the other).
    pub(crate) raw_arg_use: Option<(String, Span)>,
    pub(crate) classic_field_use: Option<(String, Span)>,
    /// Array slices rewritten so far (`slices.rs`), naming their locals.
    slices: u32,
    /// Lowering the operand of `@entry(...)`.
    in_entry: bool,
    /// Lowering an alias's prologue or epilogue (tapset code).
    pub(crate) in_alias_code: bool,
    /// The locals typed by the pointers assigned to them (`autocast.rs`).
    pub(crate) pointers: PointerLocals,
    /// The function being lowered (its name, where it is defined) and how
    /// many parameters it has: they are its first locals.
    pub(crate) function: Option<(String, Span)>,
    pub(crate) param_count: usize,
    /// The slot a store is being worked out for (`autocast.rs`).
    storing: Option<Slot>,
}

/// What [`BodyLowerer::save_locals`] keeps, for a lowering to be undone.
pub(crate) struct SavedLocals {
    locals: Vec<Local>,
    local_names: HashMap<String, LocalId>,
    assigned: Vec<bool>,
    first_read: Vec<Option<Span>>,
    raw_arg_use: Option<(String, Span)>,
    classic_field_use: Option<(String, Span)>,
    slices: u32,
}

fn type_of(name: Option<&crate::source::Spanned<ast::TypeName>>) -> Type {
    match name.map(|t| t.node) {
        Some(ast::TypeName::Long) => Type::Long,
        Some(ast::TypeName::String) => Type::String,
        None => Type::Unknown,
    }
}

pub(crate) fn invalid(span: Span) -> Expr {
    Expr {
        kind: ExprKind::Invalid,
        ty: Type::Unknown,
        span,
    }
}

fn expr(kind: ExprKind, span: Span) -> Expr {
    Expr {
        kind,
        ty: Type::Unknown,
        span,
    }
}

/// `name:type(p:type, ...)`, for arity messages.
pub(crate) fn signature(f: &ast::Function) -> String {
    let ty = |t: Option<&crate::source::Spanned<ast::TypeName>>| match t.map(|t| t.node) {
        Some(ast::TypeName::Long) => ":long",
        Some(ast::TypeName::String) => ":string",
        None => "",
    };
    let params: Vec<String> = f
        .params
        .iter()
        .map(|p| format!("{}{}", p.name.node, ty(p.ty.as_ref())))
        .collect();
    format!(
        "{}{}({})",
        f.name.node,
        ty(f.ret.as_ref()),
        params.join(", ")
    )
}

/// `name:ret(long, string, ...)` of a builtin, for arity messages.
pub(crate) fn builtin_signature(b: &builtins::Builtin) -> String {
    let ty = |p: builtins::ParamType| match p {
        builtins::ParamType::Long => "long",
        builtins::ParamType::String => "string",
        builtins::ParamType::Any => "any",
    };
    let mut params: Vec<String> = b.params.iter().map(|p| ty(*p).to_string()).collect();
    let required = b.min_args();
    for p in params.iter_mut().skip(required) {
        *p = format!("[{p}]");
    }
    if let Some(v) = b.variadic {
        params.push(format!("{}...", ty(v)));
    }
    let ret = match b.ret {
        builtins::ReturnType::Long => ":long",
        builtins::ReturnType::String => ":string",
        builtins::ReturnType::Void => "",
    };
    format!("{}{ret}({})", b.name, params.join(", "))
}

/// `printf(c ? "%x" : ":%x", v)` (stap's own tapsets write this): a
/// format chosen between literals becomes the choice between the calls,
/// `c ? printf("%x", v) : printf(":%x", v)`, so each format is still a
/// literal checked at pass 2 and runs on either side. The arguments are
/// evaluated once either way, after the condition, as before.
fn split_conditional_format(
    name: &ast::Ident,
    args: &[ast::Expr],
    span: Span,
) -> Option<ast::Expr> {
    if !matches!(name.node.as_str(), "printf" | "sprintf") {
        return None;
    }
    let (format, rest) = args.split_first()?;
    let ast::ExprKind::Ternary {
        cond,
        then,
        otherwise,
    } = &format.kind
    else {
        return None;
    };
    let with_format = |format: &ast::Expr| ast::Expr {
        kind: ast::ExprKind::Call {
            name: name.clone(),
            args: std::iter::once(format.clone())
                .chain(rest.iter().cloned())
                .collect(),
        },
        span,
    };
    Some(ast::Expr {
        kind: ast::ExprKind::Ternary {
            cond: cond.clone(),
            then: Box::new(with_format(then)),
            otherwise: Box::new(with_format(otherwise)),
        },
        span,
    })
}

/// Lowers a function's body; parameters become its first locals.
pub(crate) fn lower_function(elab: &mut Elaborator<'_>, id: FunctionId) -> hir::Function {
    let entry = &elab.functions[id.0 as usize];
    let f = entry.ast.clone();
    let from_tapset = entry.from_tapset;
    let mut lowerer = BodyLowerer::new(elab, None);
    lowerer.in_function = true;
    lowerer.function = Some((f.name.node.clone(), f.name.span));
    for p in &f.params {
        if lowerer.local_names.contains_key(&p.name.node) {
            lowerer.elab.error(
                Diagnostic::error(format!("duplicate parameter `{}`", p.name.node))
                    .at(p.name.span, "declared twice"),
            );
            continue;
        }
        let slot = lowerer.new_local(&p.name.node, p.name.span);
        lowerer.locals[slot.0 as usize].ty = type_of(p.ty.as_ref());
        lowerer.assigned[slot.0 as usize] = true;
    }
    let param_count = lowerer.locals.len();
    lowerer.param_count = param_count;
    let body = match &f.body {
        ast::FunctionBody::Block(b) => {
            lowerer.pointers.collect(b);
            lowerer.block(b)
        }
        ast::FunctionBody::EmbeddedC(span) => {
            let what = format!(
                "embedded C (`%{{ %}}`) as the body of function `{}`",
                f.name.node
            );
            let d = lowerer.elab.guru_refusal(&what, *span);
            lowerer.elab.error(d);
            hir::Block {
                stmts: Vec::new(),
                span: *span,
            }
        }
    };
    let locals = lowerer.finish();
    hir::Function {
        name: f.name.node.clone(),
        param_count,
        ret: type_of(f.ret.as_ref()),
        locals,
        body,
        runs_on: hir::Sides::default(),
        from_tapset,
        span: f.name.span,
    }
}

/// Lowers a probe body for one resolved point: alias prologues, the body,
/// then alias epilogues, all sharing one set of locals.
pub(crate) fn lower_probe(
    elab: &mut Elaborator<'_>,
    point: ResolvedPoint<'_>,
    body: &ast::Block,
    probe_span: Span,
) -> hir::Probe {
    let mut lowerer = BodyLowerer::new(elab, Some(point.context.clone()));
    let prologues = point.prologues.iter().map(|p| p.as_ref());
    for part in prologues
        .chain([body])
        .chain(point.epilogues.iter().copied())
    {
        lowerer.pointers.collect(part);
    }
    let mut stmts = Vec::new();
    if point.prologues.is_empty() && point.epilogues.is_empty() {
        stmts = lowerer.block(body).stmts;
    } else {
        // Each part keeps its own block, so spans and the listing show
        // where the alias code ends and the user's begins.
        lowerer.in_alias_code = true;
        for prologue in &point.prologues {
            stmts.push(block_stmt(lowerer.block(prologue)));
        }
        lowerer.in_alias_code = false;
        stmts.push(block_stmt(lowerer.block(body)));
        lowerer.in_alias_code = true;
        for epilogue in &point.epilogues {
            stmts.push(block_stmt(lowerer.block(epilogue)));
        }
        lowerer.in_alias_code = false;
    }
    if point.oneshot {
        let exit = expr(
            ExprKind::Builtin {
                name: "exit".to_string(),
                args: Vec::new(),
            },
            body.span,
        );
        stmts.push(Stmt {
            kind: StmtKind::Expr(exit),
            span: body.span,
        });
    }
    let mut condition: Option<Expr> = None;
    for cond in &point.conditions {
        let c = lowerer.expr(cond);
        condition = Some(match condition {
            None => c,
            Some(prev) => {
                let span = prev.span;
                expr(
                    ExprKind::Binary {
                        op: ast::BinaryOp::And,
                        lhs: Box::new(prev),
                        rhs: Box::new(c),
                    },
                    span,
                )
            }
        });
    }
    let prologues = point.prologues.len();
    let classic_switch = classic_tracepoint(&lowerer, &point);
    let locals = lowerer.finish();
    let mut point = point;
    match classic_switch {
        Ok(Some(fields)) => {
            if let hir::ProbeKind::Tracepoint { args, .. } = &mut point.kind {
                *args = crate::kernel::TracepointArgs::Classic(fields);
            }
        }
        Ok(None) => {}
        Err(d) => elab.error(d),
    }
    let placement = match point.kind {
        hir::ProbeKind::Begin { .. }
        | hir::ProbeKind::End { .. }
        | hir::ProbeKind::Error { .. }
        | hir::ProbeKind::Never
        | hir::ProbeKind::HostTimer { .. }
        | hir::ProbeKind::Procfs { .. } => hir::Placement::Host,
        _ => hir::Placement::Kernel,
    };
    let mut context = point.context.vars.clone();
    context.extend(point.context.ret.clone());
    let entry_event = point.context.entry_event.clone();
    hir::Probe {
        written: point.written,
        resolved: point.resolved,
        alias_chain: point.alias_chain,
        kind: point.kind,
        placement,
        context,
        locals,
        condition,
        body: hir::Block {
            stmts,
            span: body.span,
        },
        prologues,
        entry_event,
        span: probe_span,
    }
}

/// A raw tracepoint probe that reads a field of the classic record (and no
/// raw argument) runs on the classic tracepoint instead, whose context is
/// that record: its fields. Reading both kinds is an error.
fn classic_tracepoint(
    lowerer: &BodyLowerer<'_, '_>,
    point: &ResolvedPoint<'_>,
) -> Result<Option<Vec<crate::kernel::ClassicField>>, Diagnostic> {
    let (Some((field, at)), Some(fields)) =
        (&lowerer.classic_field_use, &point.context.classic_fields)
    else {
        return Ok(None);
    };
    if let Some((arg, arg_at)) = &lowerer.raw_arg_use {
        return Err(Diagnostic::error(format!(
            "`${field}` is a field of the classic tracepoint record and `${arg}` an argument of the raw tracepoint: one probe reads one or the other"
        ))
        .at(*at, "a classic record field")
        .also(*arg_at, "a raw tracepoint argument"));
    }
    Ok(Some(fields.clone()))
}

fn block_stmt(b: hir::Block) -> Stmt {
    Stmt {
        span: b.span,
        kind: StmtKind::Block(b),
    }
}

impl<'e, 'a> BodyLowerer<'e, 'a> {
    fn new(elab: &'e mut Elaborator<'a>, ctx: Option<ProbeContext>) -> Self {
        BodyLowerer {
            elab,
            locals: Vec::new(),
            local_names: HashMap::new(),
            assigned: Vec::new(),
            first_read: Vec::new(),
            ctx,
            in_function: false,
            in_alias_code: false,
            raw_arg_use: None,
            classic_field_use: None,
            slices: 0,
            in_entry: false,
            pointers: PointerLocals::default(),
            function: None,
            param_count: 0,
            storing: None,
        }
    }

    pub(crate) fn is_local(&self, name: &str) -> bool {
        self.local_names.contains_key(name)
    }

    pub(crate) fn save_locals(&self) -> SavedLocals {
        SavedLocals {
            locals: self.locals.clone(),
            local_names: self.local_names.clone(),
            assigned: self.assigned.clone(),
            first_read: self.first_read.clone(),
            raw_arg_use: self.raw_arg_use.clone(),
            classic_field_use: self.classic_field_use.clone(),
            slices: self.slices,
        }
    }

    pub(crate) fn restore_locals(&mut self, saved: SavedLocals) {
        self.locals = saved.locals;
        self.local_names = saved.local_names;
        self.assigned = saved.assigned;
        self.first_read = saved.first_read;
        self.raw_arg_use = saved.raw_arg_use;
        self.classic_field_use = saved.classic_field_use;
        self.slices = saved.slices;
    }

    pub fn error(&mut self, d: Diagnostic) {
        self.elab.error(d);
    }

    fn new_local(&mut self, name: &str, span: Span) -> LocalId {
        let id = LocalId(self.locals.len() as u32);
        self.locals.push(Local {
            name: name.to_string(),
            ty: Type::Unknown,
            span,
        });
        self.local_names.insert(name.to_string(), id);
        self.assigned.push(false);
        self.first_read.push(None);
        id
    }

    /// Warns about locals that are read but never given a value, as stap
    /// does: they read as 0 or "", and are often a misspelt global or
    /// variable, hence the suggestion.
    fn finish(self) -> Vec<Local> {
        let BodyLowerer {
            elab,
            locals,
            assigned,
            first_read,
            local_names,
            ..
        } = self;
        // Gathered only for an error: the global names parse the whole
        // tapset library.
        let mut candidates: Option<Vec<String>> = None;
        for (i, local) in locals.iter().enumerate() {
            if let (false, Some(span)) = (assigned[i], first_read[i]) {
                let candidates = candidates.get_or_insert_with(|| {
                    let mut names = elab.global_names();
                    names.extend(local_names.keys().cloned());
                    names.sort();
                    names
                });
                elab.error(
                    Diagnostic::warning(format!("never-assigned local variable `{}`", local.name))
                        .at(
                            span,
                            "never assigned, and not a global: it reads as 0 or \"\"",
                        )
                        .suggest(
                            &local.name,
                            candidates
                                .iter()
                                .map(String::as_str)
                                .filter(|c| *c != local.name),
                        ),
                );
            }
        }
        locals
    }

    /// Resolves a plain name: a local, else a global, else a new local.
    fn var(&mut self, name: &str, span: Span, write: bool) -> ExprKind {
        let id = match self.local_names.get(name) {
            Some(id) => *id,
            None => match self.elab.lookup_global(name, span) {
                Some(g) => {
                    self.note_arity(g, 0, span);
                    return ExprKind::Global(g);
                }
                None => self.new_local(name, span),
            },
        };
        if write {
            self.assigned[id.0 as usize] = true;
        } else {
            self.first_read[id.0 as usize].get_or_insert(span);
        }
        ExprKind::Local(id)
    }

    /// A local that a construct binds (foreach keys): never a global.
    fn binding(&mut self, name: &ast::Ident) -> LocalId {
        let id = match self.local_names.get(&name.node) {
            Some(id) => *id,
            None => self.new_local(&name.node, name.span),
        };
        self.assigned[id.0 as usize] = true;
        id
    }

    /// Checks that every use of a global agrees on scalar vs array and on
    /// the number of keys.
    fn note_arity(&mut self, g: GlobalId, keys: usize, span: Span) {
        let entry = &mut self.elab.globals[g.0 as usize];
        let name = entry.hir.name.clone();
        let declared_array = entry.hir.is_array;
        let decl_span = entry.hir.span;
        match entry.arity {
            None if declared_array && keys == 0 => {
                self.error(
                    Diagnostic::error(format!("array `{name}` used as a scalar"))
                        .at(span, "used without an index")
                        .also(decl_span, "declared as an array here"),
                );
            }
            None => {
                entry.arity = Some((keys, span));
                entry.hir.is_array = keys > 0;
            }
            Some((n, _)) if n == keys => {}
            Some((n, first)) => {
                let d = match (n, keys) {
                    (0, _) => Diagnostic::error(format!("scalar `{name}` used as an array"))
                        .at(span, "indexed here")
                        .also(first, "used as a scalar here"),
                    (_, 0) => Diagnostic::error(format!("array `{name}` used as a scalar"))
                        .at(span, "used without an index")
                        .also(first, "used as an array here"),
                    _ => Diagnostic::error(format!(
                        "array `{name}` indexed with {keys} key(s) here but {n} elsewhere"
                    ))
                    .at(span, format!("{keys} key(s)"))
                    .also(first, format!("{n} key(s) here")),
                };
                self.error(d);
            }
        }
    }

    /// The global an array name refers to.
    fn array(&mut self, name: &ast::Ident, keys: usize) -> Option<GlobalId> {
        if self.local_names.contains_key(&name.node) {
            self.error(
                Diagnostic::error(format!("`{}` is a local variable, not an array", name.node))
                    .at(name.span, "used as an array")
                    .note("help: arrays must be declared with `global`"),
            );
            return None;
        }
        match self.elab.lookup_global(&name.node, name.span) {
            Some(g) => {
                if keys > 0 {
                    self.note_arity(g, keys, name.span);
                } else if let Some((0, first)) = self.elab.globals[g.0 as usize].arity {
                    self.error(
                        Diagnostic::error(format!("scalar `{}` used as an array", name.node))
                            .at(name.span, "iterated or tested as an array")
                            .also(first, "used as a scalar here"),
                    );
                } else {
                    self.elab.globals[g.0 as usize].hir.is_array = true;
                }
                Some(g)
            }
            None => {
                let names = self.elab.global_names();
                self.error(
                    Diagnostic::error(format!("unknown array `{}`", name.node))
                        .at(name.span, "not a declared global")
                        .note("help: declare it with `global`")
                        .suggest(&name.node, names.iter().map(String::as_str)),
                );
                None
            }
        }
    }

    pub fn block(&mut self, b: &ast::Block) -> hir::Block {
        hir::Block {
            stmts: b.stmts.iter().map(|s| self.stmt(s)).collect(),
            span: b.span,
        }
    }

    fn boxed(&mut self, s: &ast::Stmt) -> Box<Stmt> {
        Box::new(self.stmt(s))
    }

    fn stmt(&mut self, s: &ast::Stmt) -> Stmt {
        use ast::StmtKind as A;
        let kind = match &s.kind {
            A::Block(b) => StmtKind::Block(self.block(b)),
            A::Expr(e) => StmtKind::Expr(self.expr(e)),
            A::If {
                cond,
                then,
                otherwise,
            } => match self.static_truth(cond) {
                // `if (@defined($x)) ... $x ...`: as in stap, the branch
                // that cannot run is dropped before its names resolve.
                Some(true) => return self.stmt(then),
                Some(false) => match otherwise {
                    Some(o) => return self.stmt(o),
                    None => StmtKind::Empty,
                },
                None => StmtKind::If {
                    cond: self.expr(cond),
                    then: self.boxed(then),
                    otherwise: otherwise.as_ref().map(|o| self.boxed(o)),
                },
            },
            A::While { cond, body } => StmtKind::While {
                cond: self.expr(cond),
                body: self.boxed(body),
            },
            A::For {
                init,
                cond,
                step,
                body,
            } => StmtKind::For {
                init: init.as_ref().map(|e| self.expr(e)),
                cond: cond.as_ref().map(|e| self.expr(e)),
                step: step.as_ref().map(|e| self.expr(e)),
                body: self.boxed(body),
            },
            A::Foreach(f) if f.slice.is_some() => return self.foreach_slice(f, s.span),
            A::Delete(ast::Expr {
                kind: ast::ExprKind::Index { array, keys },
                ..
            }) if slices::is_slice(keys) => {
                self.slices += 1;
                return self.stmt(&slices::delete(array, keys, s.span, self.slices));
            }
            A::Foreach(f) => match self.foreach(f) {
                Some(f) => StmtKind::Foreach(Box::new(f)),
                None => StmtKind::Empty,
            },
            A::Break => StmtKind::Break,
            A::Continue => StmtKind::Continue,
            // In a function too: it leaves the calling probe's handler.
            A::Next => StmtKind::Next,
            A::Return(value) => {
                if !self.in_function && value.is_some() {
                    self.error(
                        Diagnostic::error("a probe cannot return a value")
                            .at(s.span, "`return` with a value in a probe")
                            .note("help: use `next` to leave a probe"),
                    );
                }
                let value = value.as_ref().map(|e| self.expr(e));
                if let (Some(value), Some((_, function))) = (&value, &self.function) {
                    let slot = Slot::Return {
                        function: *function,
                    };
                    self.store_pointer(slot, value);
                }
                StmtKind::Return(value)
            }
            A::Delete(target) => match self.delete(target) {
                Some(d) => StmtKind::Delete(d),
                None => StmtKind::Empty,
            },
            A::Empty => StmtKind::Empty,
            A::EmbeddedC => {
                let d = self
                    .elab
                    .guru_refusal("embedded C (`%{ %}`) in a statement", s.span);
                self.error(d);
                StmtKind::Empty
            }
            A::Try { body, var, handler } => {
                let body = self.block(body);
                let message = var.as_ref().map(|v| self.binding(v));
                StmtKind::Try {
                    body,
                    message,
                    handler: self.block(handler),
                }
            }
        };
        Stmt { kind, span: s.span }
    }

    /// `int_arg(N)` and the other register arguments in a system call's
    /// return read the call's arguments, as stap's kretprobe does from
    /// the entry registers: here they are taken at the call's enter event,
    /// as an implicit `@entry`.
    fn at_syscall_entry(&self, call: Expr) -> Expr {
        let ExprKind::Builtin { name, .. } = &call.kind else {
            return call;
        };
        let register_arg = builtins::REGISTER_ARGS.contains(&name.as_str());
        let at_return = self.ctx.as_ref().is_some_and(|c| c.entry_event.is_some());
        if !register_arg || !at_return || self.in_entry {
            return call;
        }
        let span = call.span;
        expr(ExprKind::Entry(Box::new(call)), span)
    }

    /// `foreach (... in a[k, *])`: rewritten over the whole array.
    fn foreach_slice(&mut self, f: &ast::Foreach, span: Span) -> Stmt {
        let slice = f.slice.as_deref().unwrap_or_default();
        if slice.len() != f.keys.len() {
            let at = slice.first().map_or(f.array.span, |k| k.span);
            self.error(
                Diagnostic::error(format!(
                    "the slice has {} keys but the loop binds {}",
                    slice.len(),
                    f.keys.len()
                ))
                .at(at, "one key or `*` per key variable"),
            );
            return Stmt {
                kind: StmtKind::Empty,
                span,
            };
        }
        self.slices += 1;
        self.stmt(&slices::foreach(f, slice, span, self.slices))
    }

    fn foreach(&mut self, f: &ast::Foreach) -> Option<hir::Foreach> {
        let global = self.array(&f.array, f.keys.len())?;
        let value = f.value.as_ref().map(|v| self.binding(v));
        let keys = f.keys.iter().map(|(k, _)| self.binding(k)).collect();
        let key_sort = f.keys.iter().map(|(_, s)| *s).collect();
        let limit = f.limit.as_ref().map(|e| self.expr(e));
        let body = self.stmt(&f.body);
        Some(hir::Foreach {
            global,
            value,
            keys,
            key_sort,
            value_sort: f.value_sort,
            aggregate: f.aggregate.as_ref().map(|a| a.node),
            limit,
            body,
        })
    }

    fn delete(&mut self, target: &ast::Expr) -> Option<hir::Delete> {
        match &target.kind {
            ast::ExprKind::Var(name) => {
                if let Some(id) = self.local_names.get(name) {
                    return Some(hir::Delete::Local(*id));
                }
                match self.elab.lookup_global(name, target.span) {
                    Some(g) => Some(hir::Delete::Global(g)),
                    None => {
                        let names = self.elab.global_names();
                        self.error(
                            Diagnostic::error(format!("unknown variable `{name}`"))
                                .at(target.span, "nothing to delete")
                                .suggest(name, names.iter().map(String::as_str)),
                        );
                        None
                    }
                }
            }
            ast::ExprKind::Index { array, keys } => {
                let global = self.array(array, keys.len())?;
                let keys = keys.iter().map(|k| self.expr(k)).collect();
                Some(hir::Delete::Element { global, keys })
            }
            ast::ExprKind::Error => None,
            _ => {
                self.error(
                    Diagnostic::error("`delete` needs a variable, an array or an array element")
                        .at(target.span, "cannot delete this"),
                );
                None
            }
        }
    }

    fn boxed_expr(&mut self, e: &ast::Expr) -> Box<Expr> {
        Box::new(self.expr(e))
    }

    /// An assignment target (or `++`/`<<<` operand).
    fn lvalue(&mut self, e: &ast::Expr) -> Expr {
        match &e.kind {
            ast::ExprKind::Var(name) => expr(self.var(name, e.span, true), e.span),
            ast::ExprKind::Index { .. } => self.expr(e),
            ast::ExprKind::Context(_)
            | ast::ExprKind::Member { .. }
            | ast::ExprKind::Cast { .. }
            | ast::ExprKind::AtVar { .. } => {
                let d = self.elab.guru_refusal("writing to kernel memory", e.span);
                self.error(d);
                invalid(e.span)
            }
            ast::ExprKind::Error => invalid(e.span),
            _ => {
                self.error(
                    Diagnostic::error("cannot assign to this expression")
                        .at(e.span, "not a variable"),
                );
                invalid(e.span)
            }
        }
    }

    pub fn expr(&mut self, e: &ast::Expr) -> Expr {
        use ast::ExprKind as A;
        let span = e.span;
        let kind = match &e.kind {
            A::Literal(ast::Literal::Number(n)) => ExprKind::Long(*n),
            A::Literal(ast::Literal::String(s)) => ExprKind::Str(s.clone()),
            A::Var(name) => self.var(name, span, false),
            A::Index { array, keys } => {
                let keys: Vec<Expr> = keys.iter().map(|k| self.expr(k)).collect();
                match self.array(array, keys.len()) {
                    Some(global) => ExprKind::Index { global, keys },
                    None => ExprKind::Invalid,
                }
            }
            A::Context(_) if self.is_procfs_value(e) => ExprKind::Builtin {
                name: builtins::PROCFS_VALUE.to_string(),
                args: Vec::new(),
            },
            A::Context(ast::ContextVar::Named(name)) if name == "ctx" && self.in_lsm_probe() => {
                ExprKind::Builtin {
                    name: builtins::LSM_CTX.to_string(),
                    args: Vec::new(),
                }
            }
            A::Context(_)
            | A::Member { .. }
            | A::Cast { .. }
            | A::AtVar { .. }
            | A::AddressOf(_) => {
                return self.context_expr(e);
            }
            A::EmbeddedC => {
                let d = self
                    .elab
                    .guru_refusal("embedded C (`%{ %}`) in an expression", span);
                self.error(d);
                return invalid(span);
            }
            A::Wildcard => {
                self.error(Diagnostic::unsupported(
                    "array slices (`*` as a key) outside `delete`, `foreach` and `in`",
                    span,
                ));
                return invalid(span);
            }
            A::AtOperator { name, .. } => {
                let why = match name.as_str() {
                    "const" => "its value comes from kernel headers through embedded C",
                    "perf" => "perf counters bound to a probe are not implemented",
                    "probewrite" => "not implemented",
                    _ => "reading registers is not implemented",
                };
                self.error(Diagnostic::unsupported(format!("@{name}"), span).note(why.to_string()));
                return invalid(span);
            }
            A::Call { name, args } => return self.call(name, args, span),
            A::Stat { op, operand, args } => ExprKind::Stat {
                op: *op,
                operand: self.boxed_expr(operand),
                args: args.iter().map(|a| self.expr(a)).collect(),
            },
            A::Entry(inner) => {
                let allowed = self
                    .ctx
                    .as_ref()
                    .is_some_and(|c| c.is_return || c.entry_event.is_some());
                if !allowed {
                    self.error(
                        Diagnostic::error("@entry is only available in .return probes")
                            .at(span, "not in a .return probe"),
                    );
                    return invalid(span);
                }
                let was_in_entry = std::mem::replace(&mut self.in_entry, true);
                let inner = self.entry_expr(inner);
                self.in_entry = was_in_entry;
                ExprKind::Entry(Box::new(inner))
            }
            A::Defined(inner) => ExprKind::Long(i64::from(self.is_defined(inner))),
            A::ChooseDefined(a, b) => {
                let pick = if self.is_defined(a) { a } else { b };
                return self.expr(pick);
            }
            A::Unary { op, operand } => ExprKind::Unary {
                op: *op,
                operand: self.boxed_expr(operand),
            },
            A::Binary { op, lhs, rhs } => ExprKind::Binary {
                op: *op,
                lhs: self.boxed_expr(lhs),
                rhs: self.boxed_expr(rhs),
            },
            A::Assign { op, target, value } if self.is_procfs_value(target) => {
                return self.assign_procfs_value(*op, value, span);
            }
            A::Assign { op, target, value } if self.is_verdict(target) => {
                return self.assign_verdict(*op, value, span);
            }
            A::Assign { op, target, value } => {
                // Compound assignments also read the target.
                if *op != ast::AssignOp::Set
                    && let A::Var(name) = &target.kind
                {
                    self.var(name, target.span, false);
                }
                let value = self.boxed_expr(value);
                let target = self.lvalue(target);
                if let (ast::AssignOp::Set, ExprKind::Global(g)) = (op, &target.kind) {
                    let name = self.elab.globals[g.0 as usize].hir.name.clone();
                    self.store_pointer(Slot::Global(name), &value);
                }
                ExprKind::Assign {
                    op: *op,
                    target: Box::new(target),
                    value,
                }
            }
            A::Crement {
                increment,
                prefix,
                target,
            } => ExprKind::Crement {
                increment: *increment,
                prefix: *prefix,
                target: Box::new(self.lvalue(target)),
            },
            A::Ternary {
                cond,
                then,
                otherwise,
            } => match self.static_truth(cond) {
                Some(true) => return self.expr(then),
                Some(false) => return self.expr(otherwise),
                None => ExprKind::Ternary {
                    cond: self.boxed_expr(cond),
                    then: self.boxed_expr(then),
                    otherwise: self.boxed_expr(otherwise),
                },
            },
            A::In { keys, array } if slices::is_slice(keys) => {
                // A test over a slice is a walk of the array: a function
                // written for it, called with the fixed keys.
                let function = slices::membership(keys, array, span);
                let name = function.name.clone();
                self.elab.add_synthesized_function(function);
                let fixed: Vec<ast::Expr> = keys
                    .iter()
                    .filter(|k| !matches!(k.kind, A::Wildcard))
                    .cloned()
                    .collect();
                return self.call(&name, &fixed, span);
            }
            A::In { keys, array } => {
                let keys: Vec<Expr> = keys.iter().map(|k| self.expr(k)).collect();
                match self.array(array, keys.len()) {
                    Some(global) => ExprKind::In { keys, global },
                    None => ExprKind::Invalid,
                }
            }
            A::Regex {
                negated,
                subject,
                pattern,
            } => ExprKind::Regex {
                negated: *negated,
                subject: self.boxed_expr(subject),
                pattern: self.boxed_expr(pattern),
            },
            A::Error => ExprKind::Invalid,
        };
        expr(kind, span)
    }

    /// `@defined(e)`: whether `e` resolves, decided at compile time.
    /// A condition decided at compile time because it rests on `@defined`
    /// (`@defined(a)`, `!@defined(a) && @defined(b)`, ...); `None` for any
    /// other condition.
    fn static_truth(&mut self, cond: &ast::Expr) -> Option<bool> {
        match &cond.kind {
            ast::ExprKind::Defined(inner) => Some(self.is_defined(inner)),
            ast::ExprKind::Unary {
                op: ast::UnaryOp::Not,
                operand,
            } => self.static_truth(operand).map(|b| !b),
            ast::ExprKind::Binary {
                op: op @ (ast::BinaryOp::And | ast::BinaryOp::Or),
                lhs,
                rhs,
            } => {
                let (l, r) = (self.static_truth(lhs)?, self.static_truth(rhs)?);
                Some(if *op == ast::BinaryOp::And {
                    l && r
                } else {
                    l || r
                })
            }
            _ => None,
        }
    }

    pub(crate) fn is_defined(&mut self, e: &ast::Expr) -> bool {
        let before = self.elab.diags.len();
        let before_alias = self.elab.alias_errors.len();
        let lowered = self.expr(e);
        let defined = self.elab.diags.len() == before && !matches!(lowered.kind, ExprKind::Invalid);
        self.elab.diags.truncate(before);
        self.elab.alias_errors.truncate(before_alias);
        defined
    }

    /// `$value` in a procfs probe: the text a read probe answers, or the
    /// body a write probe received. Unlike other context variables it is
    /// writable, and may grow past MAXSTRINGLEN up to the probe's maxsize.
    fn is_procfs_value(&self, e: &ast::Expr) -> bool {
        matches!(&e.kind, ast::ExprKind::Context(ast::ContextVar::Named(name)) if name == "value")
            && self.ctx.as_ref().is_some_and(|c| c.family == "procfs")
    }

    /// An LSM probe (`kernel.lsm("HOOK")`), where stap gives `$ctx` and a
    /// writable `$return` besides the hook's parameters.
    fn in_lsm_probe(&self) -> bool {
        self.ctx.as_ref().is_some_and(|c| c.family == "kernel.lsm")
    }

    /// The variable that holds a kernel program's verdict, where the
    /// probe's program decides what the kernel does: `$return` in an LSM
    /// probe (0 allows, a negative errno denies), `$verdict` in a
    /// netfilter probe (stap's NF_DROP 0, NF_ACCEPT 1).
    fn is_verdict(&self, e: &ast::Expr) -> bool {
        use ast::ContextVar as C;
        let family = self.ctx.as_ref().map(|c| c.family);
        match &e.kind {
            ast::ExprKind::Context(C::Return) => family == Some("kernel.lsm"),
            ast::ExprKind::Context(C::Named(name)) => {
                name == "verdict" && family == Some("netfilter")
            }
            _ => false,
        }
    }

    /// Setting the verdict: it changes what the kernel does, so, as in
    /// stap, it needs guru mode.
    fn assign_verdict(&mut self, op: ast::AssignOp, value: &ast::Expr, span: Span) -> Expr {
        if op != ast::AssignOp::Set {
            self.error(
                Diagnostic::error(format!("`{}` on a probe's verdict", op.symbol()))
                    .at(span, "the verdict is only set, not read")
                    .note("help: assign it with `=`"),
            );
            return invalid(span);
        }
        if !self.elab.guru {
            self.error(
                Diagnostic::error("setting the probe's verdict requires guru mode (-g)")
                    .at(span, "needs guru mode")
                    .note("the verdict decides what the kernel does (deny, drop); stap allows setting it only with -g"),
            );
            return invalid(span);
        }
        let value = self.expr(value);
        expr(
            ExprKind::Builtin {
                name: builtins::SET_VERDICT.to_string(),
                args: vec![value],
            },
            span,
        )
    }

    /// `$value = e` and `$value .= e` become calls of the host's procfs
    /// buffer, which (unlike a string) is bounded by maxsize.
    fn assign_procfs_value(&mut self, op: ast::AssignOp, value: &ast::Expr, span: Span) -> Expr {
        let name = match op {
            ast::AssignOp::Set => builtins::PROCFS_SET,
            ast::AssignOp::Compound(ast::BinaryOp::Concat) => builtins::PROCFS_APPEND,
            _ => {
                self.error(
                    Diagnostic::error(format!("`$value {}` in a procfs probe", op.symbol()))
                        .at(span, "`$value` is a string")
                        .note("help: assign it with `=` or append to it with `.=`"),
                );
                return invalid(span);
            }
        };
        let value = self.expr(value);
        expr(
            ExprKind::Builtin {
                name: name.to_string(),
                args: vec![value],
            },
            span,
        )
    }

    fn call(&mut self, name: &ast::Ident, args: &[ast::Expr], span: Span) -> Expr {
        if let Some(split) = split_conditional_format(name, args, span) {
            return self.expr(&split);
        }
        let lowered: Vec<Expr> = args.iter().map(|a| self.expr(a)).collect();
        if let Some(function) =
            self.elab
                .lookup_function_for_call(&name.node, lowered.len(), name.span)
        {
            let f = self.elab.functions[function.0 as usize].ast.clone();
            if f.params.len() != lowered.len() {
                self.error(
                    Diagnostic::error(format!(
                        "wrong number of arguments to `{}`: expected {}, found {}",
                        name.node,
                        f.params.len(),
                        lowered.len()
                    ))
                    .at(span, format!("called with {} argument(s)", lowered.len()))
                    .also(f.name.span, format!("defined as `{}`", signature(&f))),
                );
                return invalid(span);
            }
            for (index, arg) in lowered.iter().enumerate() {
                let slot = Slot::Param {
                    function: f.name.span,
                    index,
                };
                self.store_pointer(slot, arg);
            }
            return expr(
                ExprKind::Call {
                    function,
                    args: lowered,
                },
                span,
            );
        }
        // stap's other names of the register arguments.
        let builtin_name = builtins::register_arg_alias(&name.node).unwrap_or(&name.node);
        if let Some(builtin) = builtins::callable(builtin_name) {
            let n = lowered.len();
            if n < builtin.min_args() || builtin.max_args().is_some_and(|max| n > max) {
                let expected = match builtin.max_args() {
                    None => format!("at least {}", builtin.min_args()),
                    Some(max) if max == builtin.min_args() => max.to_string(),
                    Some(max) => format!("{} to {max}", builtin.min_args()),
                };
                self.error(
                    Diagnostic::error(format!(
                        "wrong number of arguments to `{}`: expected {expected}, found {n}",
                        name.node
                    ))
                    .at(span, format!("called with {n} argument(s)"))
                    .note(format!(
                        "`{}` is a builtin: {}",
                        builtin_signature(builtin),
                        builtin.doc
                    )),
                );
                return invalid(span);
            }
            let call = expr(
                ExprKind::Builtin {
                    name: builtin_name.to_string(),
                    args: lowered,
                },
                span,
            );
            return self.at_syscall_entry(call);
        }
        if let Some(why) = super::refused::reason(&name.node) {
            self.error(
                Diagnostic::error(format!("unsupported: `{}()` {why}", name.node)).at(
                    name.span,
                    "a function of stap's tapsets that stap-rs refuses",
                ),
            );
            return invalid(span);
        }
        let mut candidates = self.elab.function_names();
        candidates.extend(
            builtins::all()
                .iter()
                .filter(|b| !b.internal)
                .map(|b| b.name.to_string()),
        );
        self.error(
            Diagnostic::error(format!("unknown function `{}`", name.node))
                .at(
                    name.span,
                    "not a function of the script, the tapsets or the builtins",
                )
                .suggest(&name.node, candidates.iter().map(String::as_str)),
        );
        invalid(span)
    }
}
