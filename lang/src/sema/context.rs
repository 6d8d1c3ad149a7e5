//! Context variables and `@cast`: `$skb->dev->name`, `$return`, `$$parms`,
//! `@cast(p, "struct sk_buff")->len`, resolved to typed kernel-memory
//! accesses with byte offsets from [`KernelFacts`].

use super::hir::{
    AccessBase, AccessStep, AccessValue, Bitfield, ContextAccess, ContextSource, ContextVar, Expr,
    ExprKind, PrettyMember, PrettyShape, Type,
};
use super::lower::{BodyLowerer, invalid};
use super::points::ProbeContext;
use crate::ast::{self, BulkContext, ContextVar as AstContextVar, MemberStep, PrettyDepth};
use crate::diag::Diagnostic;
use crate::kernel::{KernelFacts, TypeId, TypeKind, find_member, member_names};
use crate::source::Span;

/// Where a member chain stands after each step.
#[derive(Debug, Clone, Copy)]
enum Cursor {
    /// A value held in a register: a context variable or a loaded pointer.
    Value(TypeId),
    /// A `@cast` pointer to an object of this type.
    PointerTo(TypeId),
    /// An object in kernel memory (its address is known).
    Memory(TypeId),
}

/// The size of a type in bytes, for array subscripts.
pub(crate) fn type_size(facts: &dyn KernelFacts, ty: TypeId) -> u32 {
    match facts.kind(ty) {
        TypeKind::Int { bytes, .. } | TypeKind::Enum { bytes, .. } | TypeKind::Float { bytes } => {
            bytes
        }
        TypeKind::Pointer(_) => 8,
        TypeKind::Array { elem, len } => type_size(facts, elem).saturating_mul(len),
        TypeKind::Struct { size, .. } => size,
        TypeKind::Void | TypeKind::Function | TypeKind::Opaque { .. } => 0,
    }
}

/// The variables `$$vars` and `$$parms` list: the probe point's arguments.
/// A raw tracepoint also offers its classic record's extra fields
/// (`$next_comm`), which are not arguments (and are read from another
/// program type); a classic-only event's fields are its arguments, those
/// that fit in a long.
fn bulk_arguments(mut vars: Vec<ContextVar>) -> Vec<ContextVar> {
    let classic = |v: &ContextVar| matches!(v.source, ContextSource::ClassicField { .. });
    let has_arguments = vars.iter().any(|v| !classic(v));
    vars.retain(|v| match v.source {
        ContextSource::ClassicField { size, .. } => !has_arguments && matches!(size, 1 | 2 | 4 | 8),
        _ => true,
    });
    vars
}

/// `$name` exists in the probed function but cannot be read (a float, a
/// struct by value, a stack argument): the error says why.
fn unreadable_error(
    ctx: &ProbeContext,
    name: &str,
    spelled: &str,
    span: Span,
) -> Option<Diagnostic> {
    let (_, why) = ctx.unreadable.iter().find(|(n, _)| n == name)?;
    Some(
        Diagnostic::error(format!(
            "{spelled} cannot be read in a {} probe",
            ctx.family
        ))
        .at(span, why.clone()),
    )
}

/// Members and array elements one pretty-printed value may list in all:
/// `$$` on a large struct stays a bounded program (its text is cut at
/// MAXSTRINGLEN anyway, long before this many fields).
const PRETTY_ITEMS: usize = 256;

/// How `$x$` (`Shallow`) or `$x$$` (`Deep`) prints a value of type `ty`,
/// as stap's pretty-printer does: at the top a pointer to a struct is
/// followed and a `char *` is read as a string; inside, structs and
/// arrays are expanded only by `$$` (`{...}` and `[...]` otherwise), char
/// arrays print as strings, and pointers are never followed.
pub(crate) fn pretty_shape(facts: &dyn KernelFacts, ty: TypeId, depth: PrettyDepth) -> PrettyShape {
    let deep = depth == PrettyDepth::Deep;
    let mut budget = PRETTY_ITEMS;
    if let TypeKind::Pointer(target) = facts.kind(ty) {
        return match facts.kind(target) {
            TypeKind::Int { .. } if is_plain_char(facts, target) => PrettyShape::StringPointer,
            TypeKind::Struct { .. } => PrettyShape::Deref(Box::new(pretty_nested(
                facts,
                target,
                true,
                deep,
                &mut budget,
            ))),
            _ => PrettyShape::Pointer,
        };
    }
    pretty_nested(facts, ty, true, deep, &mut budget)
}

/// `char` (qualified or not): text. `unsigned char` and `__u8` are bytes,
/// printed as numbers (a MAC address, a hash).
fn is_plain_char(facts: &dyn KernelFacts, ty: TypeId) -> bool {
    if !matches!(facts.kind(ty), TypeKind::Int { is_char: true, .. }) {
        return false;
    }
    let name = facts.type_name(ty);
    let mut words: Vec<&str> = name.split_whitespace().collect();
    words.retain(|w| !matches!(*w, "const" | "volatile"));
    words == ["char"] || words == ["signed", "char"]
}

/// A value inside the top one: structs and arrays expanded if `expand`,
/// and their own members if `deep`.
fn pretty_nested(
    facts: &dyn KernelFacts,
    ty: TypeId,
    expand: bool,
    deep: bool,
    budget: &mut usize,
) -> PrettyShape {
    match facts.kind(ty) {
        TypeKind::Int { bytes, signed, .. } | TypeKind::Enum { bytes, signed, .. } => {
            PrettyShape::Integer {
                bytes,
                signed,
                bitfield: None,
            }
        }
        TypeKind::Pointer(_) => PrettyShape::Pointer,
        TypeKind::Array { elem, len } => {
            if is_plain_char(facts, elem) {
                return PrettyShape::CharArray { len };
            }
            if !expand {
                return PrettyShape::Text("[...]");
            }
            let shown = (len as usize).min(*budget);
            *budget -= shown;
            PrettyShape::Array {
                elem_size: type_size(facts, elem),
                len: shown as u32,
                elem: Box::new(pretty_nested(facts, elem, deep, deep, budget)),
            }
        }
        TypeKind::Struct { .. } if expand => {
            let mut members = Vec::new();
            pretty_members(facts, ty, 0, deep, budget, &mut members);
            PrettyShape::Struct(members)
        }
        TypeKind::Struct { .. } | TypeKind::Opaque { .. } => PrettyShape::Text("{...}"),
        TypeKind::Float { .. } | TypeKind::Function | TypeKind::Void => PrettyShape::Text("?"),
    }
}

/// The members of struct `ty` at `base` bytes into the printed object,
/// an anonymous struct or union's members in line with their parent's.
fn pretty_members(
    facts: &dyn KernelFacts,
    ty: TypeId,
    base: u32,
    deep: bool,
    budget: &mut usize,
    out: &mut Vec<PrettyMember>,
) {
    for member in facts.members(ty) {
        if *budget == 0 {
            return;
        }
        let byte_offset = base + member.bit_offset / 8;
        if member.name.is_empty() {
            pretty_members(facts, member.ty, byte_offset, deep, budget, out);
            continue;
        }
        *budget -= 1;
        let shape = match (member.bitfield_bits, facts.kind(member.ty)) {
            (
                Some(bits),
                TypeKind::Int { bytes, signed, .. } | TypeKind::Enum { bytes, signed, .. },
            ) => PrettyShape::Integer {
                bytes,
                signed,
                bitfield: Some(Bitfield {
                    bit_shift: member.bit_offset % 8,
                    bits,
                }),
            },
            _ => pretty_nested(facts, member.ty, deep, deep, budget),
        };
        out.push(PrettyMember {
            name: member.name,
            byte_offset,
            shape,
        });
    }
}

fn typed(kind: ExprKind, ty: Type, span: Span) -> Expr {
    Expr { kind, ty, span }
}

impl BodyLowerer<'_, '_> {
    /// The operand of `@entry(...)`: it is evaluated at the function's
    /// entry, so a kretprobe's parameters become readable inside it.
    pub(crate) fn entry_expr(&mut self, inner: &ast::Expr) -> Expr {
        let Some(ctx) = self.ctx.as_mut().filter(|c| !c.entry_vars.is_empty()) else {
            return self.expr(inner);
        };
        let saved = ctx.clone();
        let entry_vars = std::mem::take(&mut ctx.entry_vars);
        ctx.unreadable
            .retain(|(name, _)| !entry_vars.iter().any(|v| &v.name == name));
        ctx.vars.extend(entry_vars);
        let lowered = self.expr(inner);
        self.ctx = Some(saved);
        lowered
    }

    /// `$x`, `$x->f`, `@cast(...)->f`, `&...`, `$$vars`, `@var("x")`.
    /// With --skip-badvars one that cannot be resolved reads as 0, and its
    /// errors become warnings (stap substitutes 0 without an error).
    pub(crate) fn context_expr(&mut self, e: &ast::Expr) -> Expr {
        if !self.elab.skip_badvars {
            return self.resolve_context_expr(e);
        }
        let before = self.elab.diags.len();
        let resolved = self.resolve_context_expr(e);
        let failed = self.elab.diags[before..].iter().any(Diagnostic::is_error);
        if !matches!(resolved.kind, ExprKind::Invalid) || !failed {
            return resolved;
        }
        for d in &mut self.elab.diags[before..] {
            d.severity = crate::diag::Severity::Warning;
            d.notes.push("--skip-badvars: it reads as 0".into());
        }
        typed(ExprKind::Long(0), Type::Long, e.span)
    }

    fn resolve_context_expr(&mut self, e: &ast::Expr) -> Expr {
        let (inner, address_of) = match &e.kind {
            ast::ExprKind::AddressOf(inner) => (inner.as_ref(), true),
            _ => (e, false),
        };
        let (base, path, pretty): (&ast::Expr, &[MemberStep], Option<PrettyDepth>) =
            match &inner.kind {
                ast::ExprKind::Member { base, path, pretty } => {
                    (base.as_ref(), path.as_slice(), *pretty)
                }
                _ => (inner, &[], None),
            };
        if let ast::ExprKind::Context(AstContextVar::Bulk { which, pretty }) = &base.kind {
            return self.bulk(*which, *pretty, base.span);
        }
        // `$$name` and `$$provider` (the parser spells them `$name`):
        // an SDT marker's, known when the probe is resolved.
        if let ast::ExprKind::Context(AstContextVar::Named(var)) = &base.kind
            && path.is_empty()
            && !address_of
            && let Some((provider, marker)) = self.ctx.as_ref().and_then(|c| c.marker.as_ref())
        {
            match var.as_str() {
                "$name" => return typed(ExprKind::Str(marker.clone()), Type::String, e.span),
                "$provider" => {
                    return typed(ExprKind::Str(provider.clone()), Type::String, e.span);
                }
                _ => {}
            }
        }
        if self.is_entry_param(base) {
            // A parameter in a kretprobe: as in stap, the value it had at
            // the entry, saved there (the implicit `@entry`).
            let lowered = self.entry_expr(e);
            let ty = lowered.ty;
            return typed(ExprKind::Entry(Box::new(lowered)), ty, e.span);
        }
        // `&@cast(p, "T")` is `p`, once `T` is known to exist (so
        // `@defined(&@cast(0, "T"))` tells whether the type exists).
        if address_of && path.is_empty() && matches!(base.kind, ast::ExprKind::Cast { .. }) {
            return match self.access_base(base) {
                Some((AccessBase::Cast { ptr, .. }, _)) => *ptr,
                _ => invalid(e.span),
            };
        }
        if address_of && path.is_empty() {
            self.error(Diagnostic::error("`&` needs a member access").at(
                e.span,
                "write `&$var->member` or `&@cast(p, \"T\")->member`",
            ));
            return invalid(e.span);
        }
        let Some((mut access_base, mut cursor)) = self.access_base(base) else {
            return invalid(e.span);
        };
        let mut path = path;
        if let Some((element, cursor_at)) = self.classic_element(&access_base, path) {
            access_base = AccessBase::Var(element);
            cursor = cursor_at;
            path = &path[1..];
        }
        if self.refuse_user_members(&access_base, path) {
            return invalid(e.span);
        }
        let Some(access) = self.member_chain(access_base, cursor, path, pretty, address_of, e.span)
        else {
            return invalid(e.span);
        };
        let ty = match access.value {
            AccessValue::Pretty(_) => Type::String,
            _ => Type::Long,
        };
        typed(ExprKind::Context(Box::new(access)), ty, e.span)
    }

    /// `$name` naming a parameter that only the entry can read (a
    /// kretprobe's: its registers are gone at the return).
    fn is_entry_param(&self, base: &ast::Expr) -> bool {
        let name = match &base.kind {
            ast::ExprKind::Context(AstContextVar::Named(name)) => name.as_str(),
            ast::ExprKind::AtVar { name, .. } => name.node.split('@').next().unwrap_or_default(),
            _ => return false,
        };
        self.ctx
            .as_ref()
            .is_some_and(|c| c.entry_vars.iter().any(|v| v.name == name))
    }

    fn no_context_error(&self, what: &str, span: Span) -> Option<Diagnostic> {
        match &self.ctx {
            None => Some(
                Diagnostic::error(format!("{what} is not available in functions"))
                    .at(span, "context variables belong to probes")
                    .note("help: pass the value to the function as a parameter"),
            ),
            Some(ctx) if ctx.no_prototype.is_some() => Some(
                Diagnostic::error(ctx.no_prototype.clone().unwrap_or_default())
                    .at(span, format!("{what} needs the function's BTF prototype")),
            ),
            Some(ctx) if ctx.no_dwarf.is_some() => Some(
                Diagnostic::error(ctx.no_dwarf.clone().unwrap_or_default())
                    .at(span, format!("{what} needs the binary's DWARF")),
            ),
            Some(ctx) if ctx.needs_dwarf => Some(Diagnostic::unsupported(
                format!(
                    "{what} in a {} probe (needs the binary's DWARF)",
                    ctx.family
                ),
                span,
            )),
            Some(ctx) if ctx.vars.is_empty() && ctx.ret.is_none() && !ctx.is_return => {
                let family = ctx.family;
                if matches!(family, "kernel.trace" | "kernel.function" | "process") {
                    None
                } else {
                    Some(
                        Diagnostic::error(format!(
                            "{what} is not available in {family} probes: they have no context"
                        ))
                        .at(span, format!("used in a {family} probe")),
                    )
                }
            }
            Some(_) => None,
        }
    }

    fn bulk(&mut self, which: BulkContext, pretty: Option<PrettyDepth>, span: Span) -> Expr {
        let spelled = match which {
            BulkContext::Vars => "$$vars",
            BulkContext::Parms => "$$parms",
            BulkContext::Locals => "$$locals",
            BulkContext::Return => "$$return",
        };
        // A function without a prototype has no parameters to list: its
        // bulk forms are empty, as stap's are without parameter DWARF.
        let unknown_parameters = self.ctx.as_ref().is_some_and(|c| c.no_prototype.is_some());
        if !unknown_parameters && let Some(d) = self.no_context_error(&format!("`{spelled}`"), span)
        {
            self.error(d);
            return invalid(span);
        }
        let ctx = self
            .ctx
            .as_ref()
            .map(|c| (c.vars.clone(), c.ret.clone(), c.is_return));
        let Some((vars, ret, is_return)) = ctx else {
            return invalid(span);
        };
        let vars: Vec<ContextVar> = match which {
            BulkContext::Vars | BulkContext::Parms => bulk_arguments(vars),
            BulkContext::Return if is_return => ret.into_iter().collect(),
            BulkContext::Return => {
                self.error(
                    Diagnostic::error("`$$return` is only available in .return probes")
                        .at(span, "not in a .return probe"),
                );
                return invalid(span);
            }
            BulkContext::Locals => {
                self.error(Diagnostic::unsupported(
                    "`$$locals` (needs kernel DWARF)",
                    span,
                ));
                return invalid(span);
            }
        };
        let shapes = match pretty {
            Some(depth) => vars
                .iter()
                .map(|v| pretty_shape(self.elab.facts, v.ty, depth))
                .collect(),
            None => Vec::new(),
        };
        typed(
            ExprKind::Bulk {
                which,
                vars,
                pretty,
                shapes,
            },
            Type::String,
            span,
        )
    }

    /// Looks up `$name` in the probe's context.
    fn context_var(&mut self, name: &str, span: Span) -> Option<ContextVar> {
        let spelled = format!("`${name}`");
        if let Some(d) = self.no_context_error(&spelled, span) {
            // A parameter of a function probed without its prototype, read
            // by an alias's code: an error only if the value is used
            // (`scheduler.cpu_on`'s `task_prev` where only its clone
            // `finish_task_switch.isra.0` is known).
            let unknown_parameter = self.ctx.as_ref().is_some_and(|c| c.no_prototype.is_some());
            if self.in_alias_code && unknown_parameter {
                self.elab.alias_errors.push((span, d));
            } else {
                self.error(d);
            }
            return None;
        }
        let ctx = self.ctx.as_ref()?;
        if let Some(v) = ctx.vars.iter().find(|v| v.name == name) {
            if ctx.classic_fields.is_some() {
                let used = Some((name.to_string(), span));
                match v.source {
                    ContextSource::ClassicField { .. } => {
                        self.classic_field_use = self.classic_field_use.take().or(used)
                    }
                    _ => self.raw_arg_use = self.raw_arg_use.take().or(used),
                }
            }
            return Some(v.clone());
        }
        if let Some(d) = unreadable_error(ctx, name, &spelled, span) {
            self.error(d);
            return None;
        }
        let available: Vec<String> = ctx.vars.iter().map(|v| format!("${}", v.name)).collect();
        let listing = if available.is_empty() {
            "this probe has no context variables".to_string()
        } else {
            format!("this probe has {}", available.join(", "))
        };
        let names: Vec<&str> = ctx.vars.iter().map(|v| v.name.as_str()).collect();
        let d = Diagnostic::error(format!("no context variable {spelled} in this probe"))
            .at(span, "not an argument of this probe point")
            .note(listing)
            .suggest(name, names);
        self.error(d);
        None
    }

    fn return_var(&mut self, span: Span) -> Option<ContextVar> {
        if let Some(d) = self.no_context_error("`$return`", span) {
            self.error(d);
            return None;
        }
        let ctx = self.ctx.as_ref()?;
        if !ctx.is_return {
            let d = Diagnostic::error("`$return` is only available in .return probes")
                .at(span, "not in a .return probe");
            self.error(d);
            return None;
        }
        if let Some(d) = unreadable_error(ctx, "return", "`$return`", span) {
            self.error(d);
            return None;
        }
        match ctx.ret.clone() {
            Some(r) => Some(r),
            None => {
                self.error(
                    Diagnostic::error("`$return` of a function that returns void")
                        .at(span, "nothing is returned"),
                );
                None
            }
        }
    }

    /// Process probes read user memory, whose struct layouts the DWARF
    /// reader does not expand: `$p->x` is refused, `$p[i]` of a scalar
    /// pointer works.
    fn refuse_user_members(&mut self, base: &AccessBase, path: &[MemberStep]) -> bool {
        let in_process = self.ctx.as_ref().is_some_and(|c| c.family == "process");
        if !in_process || !matches!(base, AccessBase::Var(_)) {
            return false;
        }
        let Some(field) = path.iter().find_map(|step| match step {
            MemberStep::Field(name) => Some(name),
            MemberStep::Subscript(_) => None,
        }) else {
            return false;
        };
        self.error(
            Diagnostic::unsupported("member access on user-space types", field.span).note(
                "help: read the field with user_int()/user_long() at the pointer plus its offset",
            ),
        );
        true
    }

    /// `$field[N]` of an array field of a classic tracepoint record (`char
    /// next_comm[16]`): the record is the program's context, read only at
    /// constant offsets, so element N is a field of its own.
    fn classic_element(
        &self,
        base: &AccessBase,
        path: &[MemberStep],
    ) -> Option<(ContextVar, Cursor)> {
        let AccessBase::Var(v) = base else {
            return None;
        };
        let ContextSource::ClassicField { offset, .. } = v.source else {
            return None;
        };
        let Some(MemberStep::Subscript(index)) = path.first() else {
            return None;
        };
        let ast::ExprKind::Literal(ast::Literal::Number(n)) = index.kind else {
            return None;
        };
        let facts = self.elab.facts;
        let TypeKind::Array { elem, len } = facts.kind(v.ty) else {
            return None;
        };
        let n = u32::try_from(n).ok().filter(|n| *n < len)?;
        let size = type_size(facts, elem);
        let element = ContextVar {
            name: format!("{}[{n}]", v.name),
            ty: elem,
            type_name: facts.type_name(elem),
            source: ContextSource::ClassicField {
                offset: offset + n * size,
                size,
            },
        };
        Some((element, Cursor::Value(elem)))
    }

    fn access_base(&mut self, base: &ast::Expr) -> Option<(AccessBase, Cursor)> {
        match &base.kind {
            ast::ExprKind::Context(AstContextVar::Named(name)) => {
                let v = self.context_var(name, base.span)?;
                let ty = v.ty;
                Some((AccessBase::Var(v), Cursor::Value(ty)))
            }
            ast::ExprKind::AtVar { name, module } => {
                if let Some(module) = module {
                    self.error(
                        Diagnostic::unsupported("@var of a variable in a module", module.span)
                            .note("BTF has no types for kernel global variables"),
                    );
                    return None;
                }
                // `@var("name@file")`: the file part needs DWARF; the name is enough here.
                let bare = name.node.split('@').next().unwrap_or_default();
                let v = self.context_var(bare, name.span)?;
                let ty = v.ty;
                Some((AccessBase::Var(v), Cursor::Value(ty)))
            }
            ast::ExprKind::Context(AstContextVar::Return) => {
                let v = self.return_var(base.span)?;
                let ty = v.ty;
                Some((AccessBase::Var(v), Cursor::Value(ty)))
            }
            ast::ExprKind::Cast { ptr, ty, module } => {
                // The module/header argument (`kernel<linux/skbuff.h>`) is
                // accepted: BTF has every kernel type. A module named in it
                // (`kernel:nfsd`, `nfsd`) is opened, from its file when it
                // is not loaded, so its types are found; when it cannot be,
                // the lookup below says the type is unknown.
                let ptr = self.expr(ptr);
                let facts = self.elab.facts;
                for name in module.iter().flat_map(|m| cast_modules(&m.node)) {
                    let _ = facts.open_module(name);
                }
                // stap takes a bare name too (`"timer_list"`): a struct,
                // then a union, of that name.
                let bare = !["struct ", "union ", "enum "]
                    .iter()
                    .any(|p| ty.node.trim_start().starts_with(p));
                let looked_up = facts.find_type(&ty.node).and_then(|found| match found {
                    None if bare => match facts.find_type(&format!("struct {}", ty.node.trim()))? {
                        None => facts.find_type(&format!("union {}", ty.node.trim())),
                        some => Ok(some),
                    },
                    found => Ok(found),
                });
                let found = match looked_up {
                    Ok(found) => found,
                    Err(e) => {
                        self.error(
                            Diagnostic::error(format!("cannot read kernel types: {e}"))
                                .at(ty.span, "here"),
                        );
                        return None;
                    }
                };
                let Some(target) = found else {
                    let names = facts.struct_names();
                    let wanted = ty
                        .node
                        .trim_start_matches("struct ")
                        .trim_start_matches("union ");
                    let candidates: Vec<String> = names
                        .iter()
                        .map(|n| {
                            n.trim_start_matches("struct ")
                                .trim_start_matches("union ")
                                .to_string()
                        })
                        .collect();
                    let near = crate::diag::nearest_names(
                        wanted,
                        candidates.iter().map(String::as_str),
                        3,
                    );
                    let mut d = Diagnostic::error(format!("unknown type `{}` in @cast", ty.node))
                        .at(ty.span, "not a type of this kernel's BTF");
                    if !near.is_empty() {
                        let list: Vec<String> =
                            near.iter().map(|n| format!("`struct {n}`")).collect();
                        d = d.note(format!("help: did you mean {}?", list.join(", ")));
                    }
                    self.error(d);
                    return None;
                };
                Some(self.pointer_to(ptr, target))
            }
            // `@entry($p)->f`: the pointer saved at entry, typed as `$p`,
            // followed when the return probe runs (stap's autocast).
            ast::ExprKind::Entry(inner) if self.entry_pointee(inner).is_some() => {
                let target = self.entry_pointee(inner)?;
                let ptr = self.expr(base);
                Some(self.pointer_to(ptr, target))
            }
            // `p->f` of a local assigned typed pointers: `@cast(p, "T")->f`.
            ast::ExprKind::Var(name) if self.is_pointer_local(name, base.span) => {
                let target = self.pointer_local_target(name, base.span)?;
                let ptr = self.expr(base);
                Some(self.pointer_to(ptr, target))
            }
            // `g->f` of a global assigned typed pointers.
            ast::ExprKind::Var(name)
                if !self.is_local(name) && self.elab.lookup_global(name, base.span).is_some() =>
            {
                let target = self.global_target(name, base.span)?;
                let ptr = self.expr(base);
                Some(self.pointer_to(ptr, target))
            }
            // `@choose_defined($a, $b)->f`: the chain from the defined one.
            ast::ExprKind::ChooseDefined(a, b) => {
                let pick = if self.is_defined(a) { a } else { b };
                self.access_base(pick)
            }
            // `f()->x` of a function returning typed pointers, or of a
            // built-in known to (`task_current()`).
            ast::ExprKind::Call { name, .. } => {
                let ptr = self.expr(base);
                let target = self.returned_target(&ptr, &name.node)?;
                Some(self.pointer_to(ptr, target))
            }
            ast::ExprKind::Error => None,
            _ => {
                self.error(
                    Diagnostic::error("`->` needs a context variable or `@cast` on its left")
                        .at(base.span, "not kernel data")
                        .note("help: use `@cast(ptr, \"struct name\")->member` to read through a pointer"),
                );
                None
            }
        }
    }

    /// `ptr` read as a pointer to `target`, as `@cast(ptr, "T")` reads it:
    /// the one base that `@cast`, `@entry($p)->f` and typed-pointer locals
    /// share.
    fn pointer_to(&self, ptr: Expr, target: TypeId) -> (AccessBase, Cursor) {
        let base = AccessBase::Cast {
            ptr: Box::new(ptr),
            target,
            target_name: self.elab.facts.type_name(target),
        };
        (base, Cursor::PointerTo(target))
    }

    /// What `$name` points to, for `@entry($name)->f`.
    fn entry_pointee(&self, inner: &ast::Expr) -> Option<TypeId> {
        let ast::ExprKind::Context(AstContextVar::Named(name)) = &inner.kind else {
            return None;
        };
        let ctx = self.ctx.as_ref()?;
        let var = ctx
            .vars
            .iter()
            .chain(&ctx.entry_vars)
            .find(|v| &v.name == name)?;
        match self.elab.facts.kind(var.ty) {
            TypeKind::Pointer(target) => Some(target),
            _ => None,
        }
    }

    /// The struct a `->` or `[ ]` step starts from, with whether it goes
    /// through a pointer.
    fn step_target(&self, cursor: Cursor) -> Option<(TypeId, bool)> {
        let facts = self.elab.facts;
        match cursor {
            Cursor::PointerTo(t) => Some((t, true)),
            Cursor::Value(t) | Cursor::Memory(t) => match facts.kind(t) {
                TypeKind::Pointer(p) => Some((p, true)),
                TypeKind::Struct { .. } | TypeKind::Array { .. }
                    if matches!(cursor, Cursor::Memory(_)) =>
                {
                    Some((t, false))
                }
                _ => None,
            },
        }
    }

    fn member_chain(
        &mut self,
        base: AccessBase,
        mut cursor: Cursor,
        path: &[MemberStep],
        pretty: Option<PrettyDepth>,
        address_of: bool,
        span: Span,
    ) -> Option<ContextAccess> {
        let facts = self.elab.facts;
        let mut steps = Vec::new();
        let mut described = match &base {
            AccessBase::Var(v) => format!("${}", v.name),
            AccessBase::Cast { target_name, .. } => format!("@cast(..., \"{target_name}\")"),
        };
        for step in path {
            let current = match cursor {
                Cursor::Value(t) | Cursor::Memory(t) => facts.type_name(t),
                Cursor::PointerTo(t) => format!("{} *", facts.type_name(t)),
            };
            match step {
                MemberStep::Field(name) => {
                    let Some((target, through_pointer)) = self.step_target(cursor) else {
                        self.error(
                            Diagnostic::error(format!(
                                "`{described}` is not a pointer to a struct or union"
                            ))
                            .at(name.span, format!("`{described}` has type `{current}`")),
                        );
                        return None;
                    };
                    match facts.kind(target) {
                        TypeKind::Struct { .. } => {}
                        TypeKind::Opaque { name: opaque } => {
                            self.error(
                                Diagnostic::error(format!(
                                    "`{opaque}` has no known layout in this kernel's BTF"
                                ))
                                .at(name.span, "cannot read its members"),
                            );
                            return None;
                        }
                        _ => {
                            self.error(
                                Diagnostic::error(format!(
                                    "`{described}` is not a pointer to a struct or union"
                                ))
                                .at(name.span, format!("`{described}` has type `{current}`")),
                            );
                            return None;
                        }
                    }
                    let Some(member) = find_member(facts, target, &name.node) else {
                        let names = member_names(facts, target);
                        let d = Diagnostic::error(format!(
                            "`{}` has no member named `{}`",
                            facts.type_name(target),
                            name.node
                        ))
                        .at(name.span, "unknown member")
                        .suggest(&name.node, names.iter().map(String::as_str));
                        self.error(d);
                        return None;
                    };
                    let bitfield = member.bitfield_bits.map(|bits| Bitfield {
                        bit_shift: member.bit_offset % 8,
                        bits,
                    });
                    steps.push(AccessStep::Member {
                        name: name.node.clone(),
                        through_pointer,
                        byte_offset: member.bit_offset / 8,
                        bitfield,
                        ty: member.ty,
                        type_name: facts.type_name(member.ty),
                    });
                    described = format!("{described}->{}", name.node);
                    cursor = Cursor::Memory(member.ty);
                }
                MemberStep::Subscript(index) => {
                    let index_expr = self.expr(index);
                    let elem = match cursor {
                        Cursor::PointerTo(t) => Some((t, true)),
                        Cursor::Value(t) | Cursor::Memory(t) => match facts.kind(t) {
                            TypeKind::Pointer(p) => Some((p, true)),
                            TypeKind::Array { elem, .. } if matches!(cursor, Cursor::Memory(_)) => {
                                Some((elem, false))
                            }
                            _ => None,
                        },
                    };
                    let Some((elem, through_pointer)) = elem else {
                        self.error(
                            Diagnostic::error(format!("`{described}` cannot be subscripted")).at(
                                index.span,
                                format!(
                                    "`{described}` has type `{current}`, not a pointer or array"
                                ),
                            ),
                        );
                        return None;
                    };
                    steps.push(AccessStep::Subscript {
                        index: Box::new(index_expr),
                        through_pointer,
                        elem_size: type_size(facts, elem),
                        ty: elem,
                        type_name: facts.type_name(elem),
                    });
                    described = format!("{described}[...]");
                    cursor = Cursor::Memory(elem);
                }
            }
        }
        let (ty, type_name) = match cursor {
            Cursor::Value(t) | Cursor::Memory(t) => (t, facts.type_name(t)),
            Cursor::PointerTo(t) => (t, format!("{} *", facts.type_name(t))),
        };
        let value = if let Some(depth) = pretty {
            AccessValue::Pretty(depth)
        } else if address_of {
            AccessValue::AddressOf
        } else {
            match cursor {
                Cursor::PointerTo(_) => AccessValue::Pointer,
                Cursor::Value(t) | Cursor::Memory(t) => match facts.kind(t) {
                    TypeKind::Int { bytes, signed, .. } | TypeKind::Enum { bytes, signed, .. } => {
                        AccessValue::Integer { bytes, signed }
                    }
                    TypeKind::Pointer(_) => AccessValue::Pointer,
                    TypeKind::Array { .. } | TypeKind::Struct { .. }
                        if matches!(cursor, Cursor::Memory(_)) =>
                    {
                        AccessValue::Address
                    }
                    _ => {
                        self.error(
                            Diagnostic::error(format!(
                                "`{described}` of type `{type_name}` cannot be used as a value"
                            ))
                            .at(span, "not an integer, pointer, array or struct member")
                            .note(format!(
                                "help: pretty-print it as a string with `{described}$`"
                            )),
                        );
                        return None;
                    }
                },
            }
        };
        // `@cast(p, "T")$` prints the `T` that `p` points to.
        let shape = pretty.map(|depth| match cursor {
            Cursor::PointerTo(t) => {
                let pointee = pretty_shape(facts, t, depth);
                match pointee {
                    PrettyShape::Struct(_) => PrettyShape::Deref(Box::new(pointee)),
                    _ => PrettyShape::Pointer,
                }
            }
            Cursor::Value(t) | Cursor::Memory(t) => pretty_shape(facts, t, depth),
        });
        Some(ContextAccess {
            base,
            steps,
            ty,
            type_name,
            value,
            shape,
        })
    }
}

/// The modules an `@cast` module argument names: `kernel:nfsd:sunrpc`
/// names two; `kernel`, `kernel<linux/fs.h>` and header lists name none.
fn cast_modules(text: &str) -> impl Iterator<Item = &str> {
    text.split(':').filter(|part| {
        !part.is_empty()
            && *part != "kernel"
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    })
}
