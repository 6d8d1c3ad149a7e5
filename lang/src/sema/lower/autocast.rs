//! Typed-pointer locals, stap's autocast for locals: `p = $skb->dev;
//! p->name`. A local every one of whose typed assignments gives a pointer
//! to the same kernel type is read through `->` and `[ ]` as
//! `@cast(p, "T")` would be.
//!
//! The typed assignments (`p = @cast(x, "T")`, `p = &@cast(x, "T")->f`,
//! `p = $ptr`, `p = $a->ptr`, `p = &$a->f`, `p = @var("ptr")`,
//! `p = @entry($ptr)`, `p = q` of another typed variable, `p = f()` of a
//! call returning a typed pointer) are found before the body is lowered,
//! so a use may come before them in the text (a loop's body). Assignments
//! of plain numbers (`p = 0`) type nothing. Two typed assignments of
//! different types make `p->f` an error naming both; a local that is never
//! used with `->` may hold anything.
//!
//! Globals, parameters and returns are typed the same way from the stores
//! the whole program makes into them (`sema::pointer_slots`): a parameter
//! also by what its calls pass, a built-in's return by its table entry.

use std::collections::{HashMap, HashSet};

use super::BodyLowerer;
use crate::ast;
use crate::diag::Diagnostic;
use crate::kernel::{TypeId, TypeKind};
use crate::sema::builtins;
use crate::sema::hir::{AccessBase, AccessValue, Expr, ExprKind};
use crate::sema::pointer_slots::Slot;
use crate::source::Span;

/// The typed assignments of one body's locals, and what they resolved to.
#[derive(Default)]
pub(crate) struct PointerLocals {
    /// `name = value` where `value` may be a typed pointer, in text order.
    sources: HashMap<String, Vec<ast::Expr>>,
    /// The pointee each resolved local was found to have.
    resolved: HashMap<String, Resolved>,
    /// Locals being resolved: `p = p->next` says nothing about `p`.
    resolving: HashSet<String>,
}

#[derive(Clone)]
enum Resolved {
    /// Every typed assignment gives a pointer to this type.
    Typed(TypeId),
    /// No assignment gives a typed pointer.
    Untyped,
    /// Two assignments disagree (reported once, at the first use).
    Conflict,
}

impl PointerLocals {
    /// Records the assignments of `block` (a probe's body, prologue or
    /// epilogue, or a function's body).
    pub(crate) fn collect(&mut self, block: &ast::Block) {
        for s in &block.stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &ast::Stmt) {
        use ast::StmtKind as S;
        match &s.kind {
            S::Block(b) => self.collect(b),
            S::Expr(e) | S::Delete(e) | S::Return(Some(e)) => self.expr(e),
            S::If {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond);
                self.stmt(then);
                if let Some(o) = otherwise {
                    self.stmt(o);
                }
            }
            S::While { cond, body } => {
                self.expr(cond);
                self.stmt(body);
            }
            S::For {
                init,
                cond,
                step,
                body,
            } => {
                for e in [init, cond, step].into_iter().flatten() {
                    self.expr(e);
                }
                self.stmt(body);
            }
            S::Foreach(f) => {
                for e in f.slice.iter().flatten().chain(&f.limit) {
                    self.expr(e);
                }
                self.stmt(&f.body);
            }
            S::Try { body, handler, .. } => {
                self.collect(body);
                self.collect(handler);
            }
            S::Break | S::Continue | S::Next | S::Return(None) | S::Empty | S::EmbeddedC => {}
        }
    }

    fn expr(&mut self, e: &ast::Expr) {
        use ast::ExprKind as A;
        match &e.kind {
            A::Assign {
                op: ast::AssignOp::Set,
                target,
                value,
            } => {
                if let A::Var(name) = &target.kind
                    && may_be_typed_pointer(value)
                {
                    self.sources
                        .entry(name.clone())
                        .or_default()
                        .push((**value).clone());
                }
                self.expr(value);
            }
            A::Assign { target, value, .. } => {
                self.expr(target);
                self.expr(value);
            }
            A::Unary { operand: a, .. }
            | A::Crement { target: a, .. }
            | A::AddressOf(a)
            | A::Entry(a)
            | A::Defined(a)
            | A::Cast { ptr: a, .. } => self.expr(a),
            A::Binary { lhs, rhs, .. }
            | A::ChooseDefined(lhs, rhs)
            | A::Regex {
                subject: lhs,
                pattern: rhs,
                ..
            } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            A::Ternary {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond);
                self.expr(then);
                self.expr(otherwise);
            }
            A::Member { base, path, .. } => {
                self.expr(base);
                for step in path {
                    if let ast::MemberStep::Subscript(index) = step {
                        self.expr(index);
                    }
                }
            }
            A::Index { keys: args, .. }
            | A::In { keys: args, .. }
            | A::Call { args, .. }
            | A::AtOperator { args, .. } => {
                for a in args {
                    self.expr(a);
                }
            }
            A::Stat { operand, args, .. } => {
                self.expr(operand);
                for a in args {
                    self.expr(a);
                }
            }
            A::Literal(_)
            | A::Var(_)
            | A::Context(_)
            | A::AtVar { .. }
            | A::EmbeddedC
            | A::Wildcard
            | A::Error => {}
        }
    }
}

/// The forms whose value can be a pointer of a known kernel type.
fn may_be_typed_pointer(e: &ast::Expr) -> bool {
    use ast::ExprKind as A;
    matches!(
        e.kind,
        A::Cast { .. }
            | A::AddressOf(_)
            | A::Member { .. }
            | A::Context(ast::ContextVar::Named(_) | ast::ContextVar::Return)
            | A::AtVar { .. }
            | A::Entry(_)
            | A::Var(_)
            | A::Call { .. }
    )
}

/// Types compared for agreement: `const struct T` is `struct T`.
fn unqualified(name: &str) -> String {
    name.split_whitespace()
        .filter(|w| !matches!(*w, "const" | "volatile" | "restrict"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What holds the pointers being typed, for messages.
pub(crate) enum Holder<'n> {
    Local(&'n str),
    Param { function: &'n str, name: &'n str },
    Global(&'n str),
    Return(&'n str),
}

impl Holder<'_> {
    /// `p->`, `f()->`: the use that needs a type.
    fn at_use(&self) -> String {
        match self {
            Holder::Local(n) | Holder::Global(n) | Holder::Param { name: n, .. } => {
                format!("`{n}->`")
            }
            Holder::Return(f) => format!("`{f}()->`"),
        }
    }

    /// The value to name in a `@cast` hint.
    fn value(&self) -> String {
        match self {
            Holder::Local(n) | Holder::Global(n) | Holder::Param { name: n, .. } => n.to_string(),
            Holder::Return(f) => format!("{f}(...)"),
        }
    }

    /// "local `p` is assigned" and the like, before "pointers to ...".
    fn given(&self) -> String {
        match self {
            Holder::Local(n) => format!("local `{n}` is assigned"),
            Holder::Global(n) => format!("global `{n}` is assigned"),
            Holder::Param { function, name } => {
                format!("parameter `{name}` of `{function}()` is given")
            }
            Holder::Return(f) => format!("`{f}()` returns"),
        }
    }

    /// "local `p` is not assigned" and the like, before "a pointer of ...".
    fn not_given(&self) -> String {
        match self {
            Holder::Local(n) => format!("local `{n}` is not assigned"),
            Holder::Global(n) => format!("global `{n}` is not assigned"),
            Holder::Param { function, name } => {
                format!("parameter `{name}` of `{function}()` is not given")
            }
            Holder::Return(f) => format!("`{f}()` does not return"),
        }
    }

    /// Where its typed pointers come from.
    fn typed_by(&self) -> &'static str {
        match self {
            Holder::Local(_) => {
                "a local is typed by assignments of `@cast(...)`, `&@cast(...)->f`, a `$pointer`, `@var(...)`, `@entry($pointer)`, a typed variable or a call returning a typed pointer; a number or a `void *` types nothing"
            }
            Holder::Global(_) => {
                "a global is typed by the typed pointers assigned to it anywhere in the script (`g = $task`, `g = task_current()`); a number or a `void *` types nothing"
            }
            Holder::Param { .. } => {
                "a parameter is typed by the typed pointers its calls pass (`f($task)`, `f(task_current())`) and those assigned to it in the function"
            }
            Holder::Return(_) => {
                "a function's return is typed by its `return` statements' typed pointers (`return &@cast(p, \"T\")`, `return $task->parent`); of the built-ins, `task_current()` and `pid2task()` return a `struct task_struct *`"
            }
        }
    }
}

impl BodyLowerer<'_, '_> {
    /// Whether `name` has typed assignments or is a parameter, i.e.
    /// `name->f` is autocast.
    pub(crate) fn is_pointer_local(&mut self, name: &str, span: Span) -> bool {
        self.param_index(name).is_some()
            || (self.pointers.sources.contains_key(name)
                && (self.is_local(name) || self.elab.lookup_global(name, span).is_none()))
    }

    /// The index of parameter `name` of the function being lowered.
    fn param_index(&self, name: &str) -> Option<usize> {
        let id = self.local_names.get(name)?;
        (self.function.is_some() && (id.0 as usize) < self.param_count).then_some(id.0 as usize)
    }

    fn holder_of<'n>(&'n self, name: &'n str) -> Holder<'n> {
        match (&self.function, self.param_index(name)) {
            (Some((function, _)), Some(_)) => Holder::Param { function, name },
            _ => Holder::Local(name),
        }
    }

    /// The type `name` points to, from its typed assignments; `None` (with
    /// the error reported) when they disagree or none gives a type.
    pub(crate) fn pointer_local_target(&mut self, name: &str, span: Span) -> Option<TypeId> {
        let result = match self.pointers.resolved.get(name).cloned() {
            Some(done) => done,
            None => self.resolve_pointer_local(name, span)?,
        };
        match result {
            Resolved::Typed(t) => Some(t),
            Resolved::Untyped => {
                let d = untyped_error(&self.holder_of(name), span);
                self.error(d);
                None
            }
            Resolved::Conflict => None,
        }
    }

    /// Types `name` from its assignments (`None` while it is already being
    /// typed: `p = p->next` says nothing about `p`), and a parameter also
    /// from what its calls pass. The answer is kept only at the outermost
    /// resolution: an inner one may have missed a type through that cycle
    /// (`p = $skb; q = p; p = q`).
    fn resolve_pointer_local(&mut self, name: &str, span: Span) -> Option<Resolved> {
        if !self.pointers.resolving.insert(name.to_string()) {
            return None;
        }
        let passed = match (&self.function, self.param_index(name)) {
            (Some((_, function)), Some(index)) => {
                let slot = Slot::Param {
                    function: *function,
                    index,
                };
                self.elab.pointer_slots.values(&slot, self.storing.as_ref())
            }
            _ => Vec::new(),
        };
        let sources = self.pointers.sources.get(name).cloned().unwrap_or_default();
        let mut first: Option<(TypeId, Span)> = None;
        let mut untyped = Vec::new();
        let mut result = Resolved::Untyped;
        let found = passed.into_iter().map(Ok).chain(sources.iter().map(Err));
        for source in found {
            let typed = match source {
                Ok(passed) => passed,
                Err(source) => match self.trial_pointee(source) {
                    Some(target) => (target, source.span),
                    None => {
                        untyped.push(source);
                        continue;
                    }
                },
            };
            match first {
                None => {
                    first = Some(typed);
                    result = Resolved::Typed(typed.0);
                }
                Some(first) => {
                    if !self.agrees(name, span, first, typed) {
                        result = Resolved::Conflict;
                        break;
                    }
                }
            }
        }
        self.pointers.resolving.remove(name);
        // Once `p` is typed, `p = p->next` is too, and must agree.
        if let (Resolved::Typed(_), Some(first)) = (&result, first) {
            self.pointers
                .resolved
                .insert(name.to_string(), result.clone());
            for source in untyped {
                if let Some(target) = self.trial_pointee(source)
                    && !self.agrees(name, span, first, (target, source.span))
                {
                    result = Resolved::Conflict;
                    break;
                }
            }
        }
        if self.pointers.resolving.is_empty() {
            self.pointers
                .resolved
                .insert(name.to_string(), result.clone());
        } else {
            self.pointers.resolved.remove(name);
        }
        Some(result)
    }

    /// Whether two typed assignments of local `name` point to one type; if
    /// not, the error naming both, at the use.
    fn agrees(
        &mut self,
        name: &str,
        span: Span,
        first: (TypeId, Span),
        other: (TypeId, Span),
    ) -> bool {
        let facts = self.elab.facts;
        let (a, b) = (facts.type_name(first.0), facts.type_name(other.0));
        if unqualified(&a) == unqualified(&b) {
            return true;
        }
        let d = conflict_error(&self.holder_of(name), span, (&a, first.1), (&b, other.1));
        self.error(d);
        false
    }

    /// The type the pointers stored in `slot` (a global, a parameter, a
    /// return) agree on; `None`, with the error at `span`, when they
    /// disagree or there are none.
    pub(crate) fn slot_target(
        &mut self,
        slot: &Slot,
        holder: &Holder<'_>,
        span: Span,
    ) -> Option<TypeId> {
        let values = self.elab.pointer_slots.values(slot, self.storing.as_ref());
        let Some(&first) = values.first() else {
            self.error(untyped_error(holder, span));
            return None;
        };
        let facts = self.elab.facts;
        let a = facts.type_name(first.0);
        for &other in &values[1..] {
            let b = facts.type_name(other.0);
            if unqualified(&a) != unqualified(&b) {
                self.error(conflict_error(holder, span, (&a, first.1), (&b, other.1)));
                return None;
            }
        }
        Some(first.0)
    }

    /// What global `name` points to, for `name->f`.
    pub(crate) fn global_target(&mut self, name: &str, span: Span) -> Option<TypeId> {
        self.slot_target(&Slot::Global(name.to_string()), &Holder::Global(name), span)
    }

    /// What a lowered call returns a pointer to, for `f()->x`.
    pub(crate) fn returned_target(&mut self, call: &Expr, name: &str) -> Option<TypeId> {
        match &call.kind {
            ExprKind::Call { function, .. } => {
                let slot = Slot::Return {
                    function: self.elab.functions[function.0 as usize].ast.name.span,
                };
                self.slot_target(&slot, &Holder::Return(name), call.span)
            }
            ExprKind::Builtin { name, .. } => {
                let target = self.builtin_target(name);
                if target.is_none() {
                    self.error(untyped_error(&Holder::Return(name), call.span));
                }
                target
            }
            _ => None,
        }
    }

    /// The type a built-in's returned address points to (`task_current`).
    fn builtin_target(&self, name: &str) -> Option<TypeId> {
        let ty = builtins::lookup(name)?.pointee?;
        self.elab.facts.find_type(ty).ok().flatten()
    }

    /// Records the pointer `value` gives, if typed, as stored in `slot`.
    pub(crate) fn store_pointer(&mut self, slot: Slot, value: &Expr) {
        let storing = self.storing.replace(slot.clone());
        let target = self.pointee(value);
        self.storing = storing;
        if let Some(target) = target {
            self.elab.pointer_slots.store(slot, target, value.span);
        }
    }

    /// What `value` points to, found by lowering it and then forgetting
    /// that (its diagnostics and the locals it named): the assignment is
    /// lowered again where it stands.
    fn trial_pointee(&mut self, value: &ast::Expr) -> Option<TypeId> {
        let saved = self.save_locals();
        let before = self.elab.diags.len();
        let before_alias = self.elab.alias_errors.len();
        let lowered = self.expr(value);
        let failed = self.elab.diags[before..].iter().any(Diagnostic::is_error);
        self.elab.diags.truncate(before);
        self.elab.alias_errors.truncate(before_alias);
        let target = if failed { None } else { self.pointee(&lowered) };
        self.restore_locals(saved);
        target
    }

    /// The type a lowered value points to, if it is a typed pointer (a
    /// `void *` types nothing: it is how untyped addresses are passed).
    fn pointee(&mut self, e: &Expr) -> Option<TypeId> {
        let facts = self.elab.facts;
        let target = self.pointee_of(e)?;
        (!matches!(facts.kind(target), TypeKind::Void)).then_some(target)
    }

    fn pointee_of(&mut self, e: &Expr) -> Option<TypeId> {
        let facts = self.elab.facts;
        match &e.kind {
            ExprKind::Context(access) => match access.value {
                AccessValue::AddressOf => Some(access.ty),
                // `@cast(x, "T")` alone: its cursor is the `T` itself.
                AccessValue::Pointer
                    if access.steps.is_empty()
                        && matches!(access.base, AccessBase::Cast { .. }) =>
                {
                    Some(access.ty)
                }
                AccessValue::Pointer => match facts.kind(access.ty) {
                    TypeKind::Pointer(target) => Some(target),
                    _ => None,
                },
                _ => None,
            },
            ExprKind::Entry(inner) => self.pointee(inner),
            ExprKind::Local(id) => {
                let name = self.locals[id.0 as usize].name.clone();
                if !self.pointers.sources.contains_key(&name) && self.param_index(&name).is_none() {
                    return None;
                }
                self.quietly(|this| this.pointer_local_target(&name, e.span))
            }
            ExprKind::Global(g) => {
                let name = self.elab.globals[g.0 as usize].hir.name.clone();
                self.quietly(|this| this.global_target(&name, e.span))
            }
            ExprKind::Call { .. } => self.quietly(|this| this.returned_target(e, "")),
            ExprKind::Builtin { name, .. } => self.builtin_target(name),
            _ => None,
        }
    }

    /// `f`'s answer without its diagnostics: a value that is not a typed
    /// pointer is no error until something reads through it.
    fn quietly<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let before = self.elab.diags.len();
        let answer = f(self);
        self.elab.diags.truncate(before);
        answer
    }
}

/// Two typed values of one holder point to different types.
fn conflict_error(
    holder: &Holder<'_>,
    use_span: Span,
    first: (&str, Span),
    second: (&str, Span),
) -> Diagnostic {
    let ((a, a_span), (b, b_span)) = (first, second);
    Diagnostic::error(format!(
        "{} pointers to two types, `{a}` and `{b}`",
        holder.given()
    ))
    .at(use_span, format!("{} needs one type", holder.at_use()))
    .also(a_span, format!("a `{a} *`"))
    .also(b_span, format!("a `{b} *`"))
    .note(format!(
        "help: name the type at the use: `@cast({}, \"{b}\")->...`",
        holder.value()
    ))
}

fn untyped_error(holder: &Holder<'_>, span: Span) -> Diagnostic {
    Diagnostic::error(format!("{} a pointer of a known type", holder.not_given()))
        .at(span, "`->` needs the type it points to")
        .note(holder.typed_by())
        .note("help: use `@cast(ptr, \"struct name\")->member` to read through a pointer")
}
