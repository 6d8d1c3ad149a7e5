//! Probe point resolution: brace sets, wildcards, aliases (with their
//! prologues and epilogues), `?` and `!`, and each family's arguments,
//! checked against the kernel's tracepoints and functions.

use super::KernelProbes;
use super::hir::{ContextSource, ContextVar, FunctionMechanism, ProbeKind, ProcessTarget};
use super::symbols::Elaborator;
use crate::ast::{self, Literal, PointComponent};
use crate::ast_print::quote_string;
use crate::diag::Diagnostic;
use crate::kernel::{
    FactsError, FunctionProto, KernelFacts, Mechanism, Tracepoint, TracepointArgs, TypeId, TypeKind,
};
use crate::source::Span;

/// One probe point with brace sets expanded: `name(arg)` components.
#[derive(Debug, Clone)]
struct Component {
    name: String,
    arg: Option<Literal>,
    span: Span,
}

/// What a probe body may read: the context variables of its point.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProbeContext {
    /// The family, for "not available in begin probes".
    pub family: &'static str,
    pub vars: Vec<ContextVar>,
    /// `$return` in a `.return` probe (`None` elsewhere, or for `void`).
    pub ret: Option<ContextVar>,
    pub is_return: bool,
    /// Uprobes: variables would need what the DWARF reader does not give
    /// (statement probes: variable locations).
    pub needs_dwarf: bool,
    /// Uprobes: why the binary's DWARF could not give the function's
    /// parameters (no debug info, no such function), for `$var` errors.
    pub no_dwarf: Option<String>,
    /// Parameters (or `return`) the function has but a uprobe cannot read
    /// from registers, with the reason.
    pub unreadable: Vec<(String, String)>,
    /// Kretprobes and uretprobes: the parameters, readable only inside `@entry(...)`
    /// (an entry probe saves the value; they are also in `unreadable`).
    pub entry_vars: Vec<ContextVar>,
}

/// One concrete point a probe body gets attached to.
pub(crate) struct ResolvedPoint<'a> {
    pub written: String,
    pub resolved: String,
    pub alias_chain: Vec<String>,
    pub kind: ProbeKind,
    pub context: ProbeContext,
    /// Innermost alias first: they run in this order before the body.
    pub prologues: Vec<&'a ast::Block>,
    /// Outermost alias first: they run in this order after the body.
    pub epilogues: Vec<&'a ast::Block>,
    pub conditions: Vec<&'a ast::Expr>,
    /// `oneshot`: the body ends with `exit()`.
    pub oneshot: bool,
    pub span: Span,
}

/// The families, for "did you mean" on an unknown point.
const FAMILIES: &[&str] = &[
    "begin",
    "end",
    "error",
    "never",
    "init",
    "oneshot",
    "kernel.trace",
    "kernel.function",
    "kernel.function.return",
    "kernel.function.call",
    "module.function",
    "timer.s",
    "timer.sec",
    "timer.ms",
    "timer.msec",
    "timer.us",
    "timer.usec",
    "timer.ns",
    "timer.nsec",
    "timer.hz",
    "timer.jiffies",
    "timer.profile",
    "perf.sw.cpu_clock",
    "perf.sw.task_clock",
    "perf.type.config",
    "process.function",
    "process.statement",
    "netfilter.hook.pf",
    "netfilter.pf.hook",
];

/// `fnmatch`-style matching with `*` and `?`.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            backtrack = Some((pi, ti));
            pi += 1;
        } else if let Some((bp, bt)) = backtrack {
            pi = bp + 1;
            ti = bt + 1;
            backtrack = Some((bp, bt + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn has_wildcard(s: &str) -> bool {
    s.contains('*') || s.contains('?')
}

fn render(components: &[Component]) -> String {
    let parts: Vec<String> = components
        .iter()
        .map(|c| match &c.arg {
            None => c.name.clone(),
            Some(Literal::Number(n)) => format!("{}({n})", c.name),
            Some(Literal::String(s)) => format!("{}({})", c.name, quote_string(s)),
        })
        .collect();
    parts.join(".")
}

/// Expands brace sets: `kernel.{function("a"),trace("b")}` gives two.
fn expand(components: &[PointComponent]) -> Vec<Vec<Component>> {
    let mut out: Vec<Vec<Component>> = vec![Vec::new()];
    for c in components {
        match c {
            PointComponent::Named { name, arg } => {
                for seq in &mut out {
                    seq.push(Component {
                        name: name.node.clone(),
                        arg: arg.as_ref().map(|a| a.node.clone()),
                        span: arg.as_ref().map_or(name.span, |a| name.span.to(a.span)),
                    });
                }
            }
            PointComponent::Alternatives(alts, _) => {
                let mut next = Vec::new();
                for prefix in &out {
                    for alt in alts {
                        for tail in expand(alt) {
                            let mut seq = prefix.clone();
                            seq.extend(tail);
                            next.push(seq);
                        }
                    }
                }
                out = next;
            }
        }
    }
    out
}

fn facts_error(e: FactsError, span: Span) -> Diagnostic {
    Diagnostic::error(format!("cannot read kernel facts: {e}")).at(span, "while resolving this")
}

fn number_arg(c: &Component, what: &str) -> Result<i64, Diagnostic> {
    match &c.arg {
        Some(Literal::Number(n)) => Ok(*n),
        _ => Err(
            Diagnostic::error(format!("`{what}` needs a number argument"))
                .at(c.span, "expected `(N)`"),
        ),
    }
}

fn string_arg<'c>(c: &'c Component, what: &str) -> Result<&'c str, Diagnostic> {
    match &c.arg {
        Some(Literal::String(s)) => Ok(s),
        _ => Err(
            Diagnostic::error(format!("`{what}` needs a string argument"))
                .at(c.span, "expected `(\"...\")`"),
        ),
    }
}

fn no_arg(c: &Component) -> Result<(), Diagnostic> {
    match c.arg {
        None => Ok(()),
        Some(_) => Err(Diagnostic::error(format!("`{}` takes no argument", c.name))
            .at(c.span, "unexpected argument")),
    }
}

fn positive(n: i64, c: &Component) -> Result<u64, Diagnostic> {
    u64::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| Diagnostic::error("the period must be positive").at(c.span, "here"))
}

fn tracepoint_context(tp: &Tracepoint, facts: &dyn crate::kernel::KernelFacts) -> ProbeContext {
    let vars = match &tp.args {
        TracepointArgs::Raw(params) => params
            .iter()
            .enumerate()
            .map(|(i, p)| ContextVar {
                name: p.name.clone(),
                ty: p.ty,
                type_name: facts.type_name(p.ty),
                source: ContextSource::TracepointArg(i as u32),
            })
            .collect(),
        TracepointArgs::Classic(fields) => fields
            .iter()
            .map(|f| ContextVar {
                name: f.name.clone(),
                ty: f.ty,
                type_name: facts.type_name(f.ty),
                source: ContextSource::ClassicField {
                    offset: f.offset,
                    size: f.size,
                },
            })
            .collect(),
    };
    ProbeContext {
        family: "kernel.trace",
        vars,
        ..ProbeContext::default()
    }
}

fn function_context(
    proto: &FunctionProto,
    is_return: bool,
    mechanism: FunctionMechanism,
    facts: &dyn crate::kernel::KernelFacts,
) -> ProbeContext {
    // A kretprobe sees the registers at the return, where the argument
    // registers hold whatever the function left there.
    let kretprobe = is_return && mechanism == FunctionMechanism::Kprobe;
    let mut unreadable = Vec::new();
    let mut vars = Vec::new();
    let mut entry_vars = Vec::new();
    // Arguments are numbered by register (the fentry ctx word or the
    // pt_regs argument register), not by position.
    let mut slot = 0;
    for p in &proto.params {
        let var = ContextVar {
            name: p.name.clone(),
            ty: p.ty,
            type_name: facts.type_name(p.ty),
            source: ContextSource::FunctionParam(slot),
        };
        slot += arg_slots(facts, p.ty);
        if kretprobe {
            unreadable.push((
                p.name.clone(),
                format!(
                    "a kretprobe sees the registers at the return, where the arguments are gone: \
                     read the value at the entry with @entry(${})",
                    p.name
                ),
            ));
            entry_vars.push(var);
            continue;
        }
        vars.push(var);
    }
    // fexit's return value follows the argument words, which the backend
    // counts one per parameter: past a two-word struct, name the word.
    let struct_args = slot as usize != proto.params.len();
    let ret_source = if struct_args && mechanism == FunctionMechanism::Fentry {
        ContextSource::FunctionParam(slot)
    } else {
        ContextSource::Return
    };
    let ret = proto.ret.filter(|_| is_return).map(|ty| ContextVar {
        name: "return".to_string(),
        ty,
        type_name: facts.type_name(ty),
        source: ret_source,
    });
    ProbeContext {
        family: "kernel.function",
        vars,
        ret,
        is_return,
        unreadable,
        entry_vars,
        ..ProbeContext::default()
    }
}

/// The 8-byte argument registers a parameter of type `ty` takes in the
/// x86_64 and BPF calling conventions: two for a struct of 9 to 16 bytes
/// passed by value (such as sockptr_t), else one.
fn arg_slots(facts: &dyn KernelFacts, ty: TypeId) -> u32 {
    match facts.kind(ty) {
        TypeKind::Struct { size, .. } if (9..=16).contains(&size) => 2,
        _ => 1,
    }
}

/// Integer and pointer arguments a uprobe reads from registers: the
/// x86_64 SysV (and BPF backend) limit.
const REGISTER_ARGS: u32 = 6;

/// How a value of this type travels in a call.
enum Passing {
    /// In a general-purpose register (integers, enums, pointers).
    Register,
    /// In a floating-point register, which BPF cannot read.
    Float,
    /// Anything else (a struct by value): it shifts the registers of the
    /// arguments after it in ways DWARF alone does not tell.
    Other,
}

fn passing(facts: &dyn KernelFacts, ty: TypeId) -> Passing {
    match facts.kind(ty) {
        TypeKind::Int { .. } | TypeKind::Enum { .. } | TypeKind::Pointer(_) => Passing::Register,
        TypeKind::Float { .. } => Passing::Float,
        _ => Passing::Other,
    }
}

/// The context of a `process(...).function(...)` probe: parameters from
/// the binary's DWARF, each read from the register the calling convention
/// puts it in.
fn user_function_context(
    proto: &FunctionProto,
    is_return: bool,
    facts: &dyn KernelFacts,
) -> ProbeContext {
    let mut vars = Vec::new();
    let mut entry_vars = Vec::new();
    let mut unreadable = Vec::new();
    let mut register = 0u32;
    let mut lost: Option<String> = None;
    for p in &proto.params {
        let type_name = facts.type_name(p.ty);
        let why = match (passing(facts, p.ty), &lost) {
            (Passing::Register, Some(after)) => Some(format!(
                "it follows `{after}`, passed by value, so its register is unknown"
            )),
            (Passing::Register, None) if register >= REGISTER_ARGS => Some(format!(
                "only the first {REGISTER_ARGS} integer and pointer arguments are in registers"
            )),
            (Passing::Register, None) => None,
            (Passing::Float, _) => Some(format!(
                "`{type_name}` travels in a floating-point register, which uprobes cannot read"
            )),
            (Passing::Other, _) => {
                lost.get_or_insert_with(|| p.name.clone());
                Some(format!(
                    "`{type_name}` is passed by value, which stap-rs cannot read"
                ))
            }
        };
        match why {
            Some(why) => unreadable.push((p.name.clone(), why)),
            None => {
                let var = ContextVar {
                    name: p.name.clone(),
                    ty: p.ty,
                    type_name,
                    source: ContextSource::FunctionParam(register),
                };
                register += 1;
                if is_return {
                    // A uretprobe sees the registers at the return, where
                    // the arguments are gone: an entry uprobe saves them.
                    unreadable.push((
                        p.name.clone(),
                        format!(
                            "a return probe sees the registers at the return, where the \
                             arguments are gone: read the value at the entry with @entry(${})",
                            p.name
                        ),
                    ));
                    entry_vars.push(var);
                } else {
                    vars.push(var);
                }
            }
        }
    }
    let mut ret = None;
    if let Some(ty) = proto.ret.filter(|_| is_return) {
        let type_name = facts.type_name(ty);
        match passing(facts, ty) {
            Passing::Register => {
                ret = Some(ContextVar {
                    name: "return".to_string(),
                    ty,
                    type_name,
                    source: ContextSource::Return,
                });
            }
            _ => unreadable.push((
                "return".to_string(),
                format!("a `{type_name}` return value is not in the integer return register"),
            )),
        }
    }
    ProbeContext {
        family: "process",
        vars,
        ret,
        is_return,
        unreadable,
        entry_vars,
        ..ProbeContext::default()
    }
}

/// The context of a process probe whose DWARF could not be had.
fn no_dwarf_context(is_return: bool, why: String) -> ProbeContext {
    ProbeContext {
        family: "process",
        is_return,
        no_dwarf: Some(why),
        ..ProbeContext::default()
    }
}

/// A point of a family without context variables.
fn plain(
    kind: ProbeKind,
    family: &'static str,
    resolved: String,
    span: Span,
) -> ResolvedPoint<'static> {
    ResolvedPoint {
        written: String::new(),
        resolved,
        alias_chain: Vec::new(),
        kind,
        context: ProbeContext {
            family,
            ..ProbeContext::default()
        },
        prologues: Vec::new(),
        epilogues: Vec::new(),
        conditions: Vec::new(),
        oneshot: false,
        span,
    }
}

fn with_context(mut p: ResolvedPoint<'static>, context: ProbeContext) -> ResolvedPoint<'static> {
    p.context = context;
    p
}

fn needs_dwarf(what: &str, span: Span) -> Diagnostic {
    Diagnostic::unsupported(format!("{what} (needs kernel DWARF)"), span)
}

impl<'a> Elaborator<'a> {
    /// Resolves every point of a user probe. Failures of `?`/`!` points are
    /// skipped; the others are reported.
    pub fn resolve_probe_points(
        &mut self,
        points: &'a [ast::ProbePoint],
    ) -> Vec<ResolvedPoint<'a>> {
        let mut chain = Vec::new();
        let (resolved, errors) = self.resolve_list(points, &mut chain, true);
        self.diags.extend(errors);
        resolved
    }

    /// Resolves a list of points in order, honouring `?` and `!`.
    /// `top` records the written text of each point on its results.
    fn resolve_list(
        &mut self,
        points: &'a [ast::ProbePoint],
        chain: &mut Vec<String>,
        top: bool,
    ) -> (Vec<ResolvedPoint<'a>>, Vec<Diagnostic>) {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for point in points {
            let optional = point.optional || point.sufficient;
            let mut found = Vec::new();
            for alternative in expand(&point.components) {
                match self.resolve_one(&alternative, point.span, chain) {
                    Ok(mut resolved) => {
                        for r in &mut resolved {
                            if top {
                                r.written = render(&alternative);
                            }
                            if let Some(cond) = &point.condition {
                                r.conditions.push(cond);
                            }
                        }
                        found.extend(resolved);
                    }
                    Err(e) if !optional => errors.push(e),
                    Err(_) => {}
                }
            }
            let resolved_any = !found.is_empty();
            out.extend(found);
            if point.sufficient && resolved_any {
                break;
            }
        }
        (out, errors)
    }

    fn resolve_one(
        &mut self,
        comps: &[Component],
        span: Span,
        chain: &mut Vec<String>,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        if let Some(builtin) = self.resolve_family(comps, span)? {
            return Ok(builtin);
        }
        if comps.iter().all(|c| c.arg.is_none()) {
            let pattern: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
            let matches = |name: &str| {
                let parts: Vec<&str> = name.split('.').collect();
                parts.len() == pattern.len()
                    && parts.iter().zip(&pattern).all(|(n, p)| glob_match(p, n))
            };
            self.pull_aliases(matches);
            let aliases: Vec<(String, &'a ast::ProbeAlias)> = self
                .aliases
                .iter()
                .filter(|a| matches(&a.name))
                .map(|a| (a.name.clone(), a.ast))
                .collect();
            if !aliases.is_empty() {
                let wildcard = pattern.iter().any(|p| has_wildcard(p));
                return self.expand_aliases(aliases, wildcard, span, chain);
            }
        }
        let written = render(comps);
        let dotted: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let dotted = dotted.join(".");
        let mut candidates: Vec<String> = FAMILIES.iter().map(|s| s.to_string()).collect();
        candidates.extend(self.all_alias_names());
        Err(
            Diagnostic::error(format!("unknown probe point `{written}`"))
                .at(span, "no probe family or alias matches this")
                .suggest(&dotted, candidates.iter().map(String::as_str)),
        )
    }

    /// Expands the aliases a point matched. Under a wildcard, as for
    /// `kernel.function("tcp_*")`, an alias this kernel cannot run (a
    /// function-only alias without fentry or kprobes) is left out, and
    /// it is an error only if none of them resolves.
    fn expand_aliases(
        &mut self,
        aliases: Vec<(String, &'a ast::ProbeAlias)>,
        wildcard: bool,
        span: Span,
        chain: &mut Vec<String>,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let mut out = Vec::new();
        let mut first_error = None;
        for (name, alias) in aliases {
            if chain.contains(&name) {
                return Err(Diagnostic::error(format!("recursive probe alias `{name}`"))
                    .at(span, "used here")
                    .also(alias.span, "the alias refers back to itself")
                    .note(format!("expansion: {} -> {name}", chain.join(" -> "))));
            }
            chain.push(name.clone());
            let (resolved, errors) = self.resolve_list(&alias.points, chain, false);
            chain.pop();
            if let Some(first) = errors.into_iter().next() {
                let error = first
                    .also(span, format!("while expanding alias `{name}` used here"))
                    .note(format!("in probe alias `{name}`"));
                if !wildcard {
                    return Err(error);
                }
                first_error.get_or_insert(error);
                continue;
            }
            for mut r in resolved {
                r.alias_chain.insert(0, name.clone());
                if alias.epilogue {
                    r.epilogues.insert(0, &alias.body);
                } else {
                    r.prologues.push(&alias.body);
                }
                r.span = span;
                out.push(r);
            }
        }
        match first_error {
            Some(error) if out.is_empty() => Err(error),
            _ => Ok(out),
        }
    }

    /// The built-in families. `Ok(None)`: not one of them (maybe an alias).
    fn resolve_family(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<Option<Vec<ResolvedPoint<'a>>>, Diagnostic> {
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let order = |c: &Component| -> Result<i64, Diagnostic> {
            match c.arg {
                None => Ok(0),
                Some(_) => number_arg(c, &c.name),
            }
        };
        let one = |p: ResolvedPoint<'static>| Ok(Some(vec![p]));
        match names.as_slice() {
            ["begin"] | ["init"] => {
                let order = order(&comps[0])?;
                let text = render(comps);
                one(plain(ProbeKind::Begin { order }, "begin", text, span))
            }
            ["oneshot"] => {
                no_arg(&comps[0])?;
                let mut p = plain(
                    ProbeKind::Begin { order: 0 },
                    "begin",
                    "oneshot".into(),
                    span,
                );
                p.oneshot = true;
                one(p)
            }
            ["end"] => {
                let order = order(&comps[0])?;
                one(plain(ProbeKind::End { order }, "end", render(comps), span))
            }
            ["error"] => {
                let order = order(&comps[0])?;
                one(plain(
                    ProbeKind::Error { order },
                    "error",
                    render(comps),
                    span,
                ))
            }
            ["never"] => {
                no_arg(&comps[0])?;
                one(plain(ProbeKind::Never, "never", "never".into(), span))
            }
            ["kernel", "trace"] => {
                no_arg(&comps[0])?;
                let spec = string_arg(&comps[1], "kernel.trace")?;
                self.resolve_tracepoints(spec, comps[1].span).map(Some)
            }
            ["kernel", "function", rest @ ..] | ["module", "function", rest @ ..] => {
                let module = if names[0] == "module" {
                    Some(string_arg(&comps[0], "module")?.to_string())
                } else {
                    no_arg(&comps[0])?;
                    None
                };
                let spec = string_arg(&comps[1], "kernel.function")?;
                let is_return = match rest {
                    [] | ["call"] => false,
                    ["return"] => true,
                    ["inline"] => {
                        return Err(needs_dwarf(".inline probes", comps[2].span));
                    }
                    _ => {
                        return Err(Diagnostic::error(format!(
                            "unknown suffix `.{}` on kernel.function",
                            rest.join(".")
                        ))
                        .at(span, "expected `.call` or `.return`"));
                    }
                };
                self.resolve_functions(module, spec, is_return, comps[1].span)
                    .map(Some)
            }
            ["kernel", "statement", ..] | ["module", "statement", ..] => {
                Err(needs_dwarf("kernel.statement probes", span))
            }
            ["timer", "profile"] => {
                no_arg(&comps[1])?;
                let text = "timer.profile".to_string();
                one(plain(ProbeKind::TimerProfile, "timer.profile", text, span))
            }
            ["timer", unit] | ["timer", unit, "randomize"] => {
                let Some(scale) = timer_unit_ns(unit, self.facts) else {
                    return Err(Diagnostic::error(format!("unknown timer unit `{unit}`"))
                        .at(comps[1].span, "unknown unit")
                        .suggest(
                            unit,
                            [
                                "s", "sec", "ms", "msec", "us", "usec", "ns", "nsec", "hz",
                                "jiffies", "profile",
                            ],
                        ));
                };
                let n = positive(number_arg(&comps[1], "timer")?, &comps[1])?;
                let period_ns = scale.period(n);
                let randomize_ns = match comps.get(2) {
                    Some(c) => scale.period(positive(number_arg(c, "randomize")?, c)?),
                    None => 0,
                };
                let kind = ProbeKind::HostTimer {
                    period_ns,
                    randomize_ns,
                };
                one(plain(kind, "timer", render(comps), span))
            }
            ["perf", ..] => self.resolve_perf(comps, span).map(|p| Some(vec![p])),
            ["netfilter", "hook" | "pf", ..] => {
                self.resolve_netfilter(comps, span).map(|p| Some(vec![p]))
            }
            ["process", rest @ ..] => {
                let path = string_arg(&comps[0], "process")?.to_string();
                let (target, is_return) = match rest {
                    ["function"] | ["function", "call"] => (
                        ProcessTarget::Function(string_arg(&comps[1], "function")?.into()),
                        false,
                    ),
                    ["function", "return"] => (
                        ProcessTarget::Function(string_arg(&comps[1], "function")?.into()),
                        true,
                    ),
                    ["statement"] => (
                        ProcessTarget::Statement(string_arg(&comps[1], "statement")?.into()),
                        false,
                    ),
                    _ => {
                        return Err(Diagnostic::error(format!(
                            "unknown process probe `{}`",
                            render(comps)
                        ))
                        .at(
                            span,
                            "expected `.function(\"f\")[.return]` or `.statement(\"...\")`",
                        ));
                    }
                };
                let context = self.process_context(&path, &target, is_return);
                let kind = ProbeKind::Process {
                    path,
                    target,
                    is_return,
                };
                one(with_context(
                    plain(kind, "process", render(comps), span),
                    context,
                ))
            }
            _ => Ok(None),
        }
    }

    /// What a process probe's body may read. The DWARF is read here, but
    /// its absence is an error only when the body uses a `$var`: the
    /// register built-ins (`int_arg(1)`) need none.
    fn process_context(&self, path: &str, target: &ProcessTarget, is_return: bool) -> ProbeContext {
        let function = match target {
            ProcessTarget::Function(f) if !has_wildcard(f) => f,
            _ => {
                return ProbeContext {
                    family: "process",
                    is_return,
                    needs_dwarf: true,
                    ..ProbeContext::default()
                };
            }
        };
        let point = format!(
            "process({}).function({})",
            quote_string(path),
            quote_string(function)
        );
        let fallback = "use int_arg(N)/pointer_arg(N) instead";
        match self.facts.user_function(path, function) {
            Ok(Some(proto)) => user_function_context(&proto, is_return, self.facts),
            Ok(None) => no_dwarf_context(
                is_return,
                format!("{point}: the binary has no DWARF debug info (build with -g); {fallback}"),
            ),
            Err(e) => no_dwarf_context(is_return, format!("{point}: {e}; {fallback}")),
        }
    }

    fn resolve_tracepoints(
        &mut self,
        spec: &str,
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let (system, name) = match spec.split_once(':') {
            Some((s, n)) => (Some(s), n),
            None => (None, spec),
        };
        let facts = self.facts;
        let mut matches: Vec<(Option<String>, String)> = Vec::new();
        if has_wildcard(spec) {
            let mut all = facts.tracepoint_names().map_err(|e| facts_error(e, span))?;
            all.sort();
            for (s, n) in all {
                if system.is_none_or(|sys| glob_match(sys, &s)) && glob_match(name, &n) {
                    matches.push((Some(s), n));
                }
            }
        } else {
            matches.push((system.map(str::to_string), name.to_string()));
        }
        let mut out = Vec::new();
        for (s, n) in matches {
            let tp = facts
                .tracepoint(s.as_deref(), &n)
                .map_err(|e| facts_error(e, span))?;
            if let Some(tp) = tp {
                let context = tracepoint_context(&tp, facts);
                let resolved = format!(
                    "kernel.trace({})",
                    quote_string(&format!("{}:{}", tp.system, tp.name))
                );
                let kind = ProbeKind::Tracepoint {
                    system: tp.system,
                    name: tp.name,
                    args: tp.args,
                };
                out.push(with_context(
                    plain(kind, "kernel.trace", resolved, span),
                    context,
                ));
            }
        }
        if out.is_empty() {
            let names = facts.tracepoint_names().unwrap_or_default();
            let candidates: Vec<String> = names
                .iter()
                .map(|(s, n)| {
                    if system.is_some() {
                        format!("{s}:{n}")
                    } else {
                        n.clone()
                    }
                })
                .collect();
            let what = if has_wildcard(spec) {
                "no tracepoint matches"
            } else {
                "unknown tracepoint"
            };
            return Err(Diagnostic::error(format!("{what} `{spec}`"))
                .at(span, "not a tracepoint of this kernel")
                .suggest(spec, candidates.iter().map(String::as_str)));
        }
        Ok(out)
    }

    fn resolve_functions(
        &mut self,
        module: Option<String>,
        spec: &str,
        is_return: bool,
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        if spec.contains('@') {
            return Err(needs_dwarf(
                format!("kernel.function(\"{spec}\"): source file and line selectors").as_str(),
                span,
            ));
        }
        let facts = self.facts;
        let names: Vec<String> = if has_wildcard(spec) {
            let mut all = facts.function_names().map_err(|e| facts_error(e, span))?;
            all.sort();
            all.retain(|n| glob_match(spec, n));
            all
        } else {
            vec![spec.to_string()]
        };
        let mut protos = Vec::new();
        for n in &names {
            if let Some(proto) = facts.function(n).map_err(|e| facts_error(e, span))?
                && (module.is_none() || proto.module == module)
            {
                protos.push(proto);
            }
        }
        if protos.is_empty() {
            let all = facts.function_names().unwrap_or_default();
            let what = if has_wildcard(spec) {
                "no kernel function matches"
            } else {
                "unknown kernel function"
            };
            let place = module
                .as_deref()
                .map_or(String::new(), |m| format!(" in module `{m}`"));
            return Err(Diagnostic::error(format!("{what} `{spec}`{place}"))
                .at(
                    span,
                    "not a traceable function of this kernel (no BTF record)",
                )
                .suggest(spec, all.iter().map(String::as_str)));
        }
        let mechanism = self.function_mechanism(spec, is_return, span)?;
        let mut out = Vec::new();
        for proto in protos {
            let context = function_context(&proto, is_return, mechanism, facts);
            let resolved = format!(
                "{}function({}){}",
                proto
                    .module
                    .as_deref()
                    .map_or("kernel.".to_string(), |m| format!(
                        "module({}).",
                        quote_string(m)
                    )),
                quote_string(&proto.name),
                if is_return { ".return" } else { ".call" }
            );
            let kind = ProbeKind::KernelFunction {
                name: proto.name.clone(),
                is_return,
                module: proto.module.clone(),
                proto,
                mechanism,
            };
            out.push(with_context(
                plain(kind, "kernel.function", resolved, span),
                context,
            ));
        }
        Ok(out)
    }

    /// fentry/fexit or kprobes for a kernel.function probe, as
    /// `--kernel-probes` asks and the kernel allows.
    fn function_mechanism(
        &self,
        spec: &str,
        is_return: bool,
        span: Span,
    ) -> Result<FunctionMechanism, Diagnostic> {
        let facts = self.facts;
        let mechanisms = facts.mechanisms();
        let suffix = if is_return { ".return" } else { "" };
        let point = format!("kernel.function(\"{spec}\"){suffix}");
        let fentry_reason = || {
            facts
                .unavailable_reason(Mechanism::Fentry)
                .unwrap_or_else(|| "refused by this kernel".to_string())
        };
        let kprobe_reason = || {
            facts
                .unavailable_reason(Mechanism::Kprobes)
                .unwrap_or_else(|| "not available on this kernel".to_string())
        };
        let forced = |name: &str, option: &str, reason: String| {
            Diagnostic::error(format!(
                "{point} cannot use {name} (--kernel-probes={option}): {reason}"
            ))
            .at(span, format!("needs {name}"))
            .note("help: `--kernel-probes=auto` picks what this kernel has")
        };
        match self.kernel_probes {
            KernelProbes::Fentry if mechanisms.fentry => Ok(FunctionMechanism::Fentry),
            KernelProbes::Fentry => Err(forced("fentry/fexit", "fentry", fentry_reason())),
            KernelProbes::Kprobe if mechanisms.kprobes => Ok(FunctionMechanism::Kprobe),
            KernelProbes::Kprobe => Err(forced("kprobes", "kprobe", kprobe_reason())),
            KernelProbes::Auto if mechanisms.fentry => Ok(FunctionMechanism::Fentry),
            KernelProbes::Auto if mechanisms.kprobes => Ok(FunctionMechanism::Kprobe),
            KernelProbes::Auto => Err(Diagnostic::error(format!(
                "{point} cannot be probed on this kernel"
            ))
            .at(span, "needs fentry/fexit or kprobes")
            .note(format!("fentry/fexit: {}", fentry_reason()))
            .note(format!("kprobes: {}", kprobe_reason()))
            .note("help: use a tracepoint (`kernel.trace(\"...\")`) instead, or add `?` to skip this probe")),
        }
    }

    /// `netfilter.hook("NAME").pf("PF")[.priority("N")]`, components in
    /// either order, through a BPF netfilter link.
    fn resolve_netfilter(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<ResolvedPoint<'a>, Diagnostic> {
        let usage = "expected `netfilter.hook(\"NF_INET_...\").pf(\"NF_INET\")[.priority(\"N\")]`";
        no_arg(&comps[0])?;
        let (mut hook, mut pf, mut priority) = (None, None, 0i32);
        for c in &comps[1..] {
            match c.name.as_str() {
                "hook" if hook.is_none() => {
                    let name = string_arg(c, "hook")?;
                    let Some(&(_, n)) = NETFILTER_HOOKS.iter().find(|(h, _)| *h == name) else {
                        return Err(
                            Diagnostic::error(format!("unknown netfilter hook `{name}`"))
                                .at(c.span, "unknown hook")
                                .suggest(name, NETFILTER_HOOKS.iter().map(|(h, _)| *h)),
                        );
                    };
                    hook = Some(n);
                }
                "pf" if pf.is_none() => {
                    let name = string_arg(c, "pf")?;
                    let Some(&(_, n)) = NETFILTER_PFS.iter().find(|(p, _)| *p == name) else {
                        return Err(Diagnostic::error(format!(
                            "unsupported netfilter protocol family `{name}`"
                        ))
                        .at(c.span, "BPF netfilter links take NF_INET or NF_INET6")
                        .suggest(name, NETFILTER_PFS.iter().map(|(p, _)| *p)));
                    };
                    pf = Some(n);
                }
                "priority" => priority = netfilter_priority(c)?,
                _ => {
                    return Err(Diagnostic::error(format!(
                        "unknown netfilter probe `{}`",
                        render(comps)
                    ))
                    .at(span, usage));
                }
            }
        }
        let (Some(hooknum), Some(pf)) = (hook, pf) else {
            return Err(Diagnostic::error(format!(
                "incomplete netfilter probe `{}`",
                render(comps)
            ))
            .at(span, usage));
        };
        let context = self.netfilter_context(hooknum, span)?;
        let kind = ProbeKind::Netfilter {
            pf,
            hooknum,
            priority,
        };
        Ok(with_context(
            plain(kind, "netfilter", render(comps), span),
            context,
        ))
    }

    /// `$skb`, `$hooknum`, `$indev`, `$outdev` of a netfilter probe, from
    /// `struct bpf_nf_ctx { state; skb; }`; an error names what the kernel
    /// lacks for BPF netfilter links.
    fn netfilter_context(&self, hooknum: u32, span: Span) -> Result<ProbeContext, Diagnostic> {
        let facts = self.facts;
        let unavailable = |why: String| {
            Diagnostic::error(format!(
                "netfilter probes are not available on this kernel: {why}"
            ))
            .at(span, "needs a BPF netfilter link")
            .note("help: add `?` to skip this probe")
        };
        let version = facts.version();
        if (version.major, version.minor) < (6, 4) {
            return Err(unavailable(format!(
                "BPF netfilter links need Linux 6.4 or later (this is {version})"
            )));
        }
        let lookup = |name: &str| {
            facts
                .find_type(name)
                .map_err(|e| unavailable(e.to_string()))?
                .ok_or_else(|| {
                    unavailable(format!(
                        "its BTF has no `{name}` (CONFIG_NETFILTER_BPF_LINK is not set?)"
                    ))
                })
        };
        let nf_ctx = lookup("struct bpf_nf_ctx")?;
        let state = lookup("struct nf_hook_state")?;
        let member = |ty: TypeId, name: &str| {
            crate::kernel::find_member(facts, ty, name)
                .ok_or_else(|| unavailable(format!("its BTF has no member `{name}`")))
        };
        let var = |name: &str, ty: TypeId, source: ContextSource| ContextVar {
            name: name.to_string(),
            ty,
            type_name: facts.type_name(ty),
            source,
        };
        let skb = member(nf_ctx, "skb")?;
        let hook = member(state, "hook")?;
        let mut vars = vec![
            var("skb", skb.ty, ContextSource::TracepointArg(1)),
            var(
                "hooknum",
                hook.ty,
                ContextSource::Constant(i64::from(hooknum)),
            ),
        ];
        for (name, field) in [("indev", "in"), ("outdev", "out")] {
            let m = member(state, field)?;
            let source = ContextSource::PointedField {
                index: 0,
                offset: m.bit_offset / 8,
            };
            vars.push(var(name, m.ty, source));
        }
        Ok(ProbeContext {
            family: "netfilter",
            vars,
            ..ProbeContext::default()
        })
    }

    fn resolve_perf(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<ResolvedPoint<'a>, Diagnostic> {
        const DEFAULT_PERIOD: u64 = 1_000_000;
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let (perf_type, config, event, rest) = match names.as_slice() {
            ["perf", "type", "config", rest @ ..] => {
                let t = number_arg(&comps[1], "perf.type")?;
                let c = number_arg(&comps[2], "config")?;
                (t as u32, c as u64, format!("type({t}).config({c})"), rest)
            }
            ["perf", class @ ("sw" | "hw"), event, rest @ ..] => {
                let table: &[&str] = if *class == "sw" { SW_EVENTS } else { HW_EVENTS };
                let Some(config) = table.iter().position(|e| e == event) else {
                    return Err(Diagnostic::error(format!(
                        "unknown perf event `perf.{class}.{event}`"
                    ))
                    .at(comps[2].span, "unknown event")
                    .suggest(event, table.iter().copied()));
                };
                let t = if *class == "sw" { 1 } else { 0 };
                (t, config as u64, format!("{class}.{event}"), rest)
            }
            _ => {
                return Err(
                    Diagnostic::error(format!("unknown perf probe `{}`", render(comps))).at(
                        span,
                        "expected `perf.sw.EVENT`, `perf.hw.EVENT` or `perf.type(T).config(C)`",
                    ),
                );
            }
        };
        let sample_period = match rest {
            [] => DEFAULT_PERIOD,
            ["sample"] => {
                let c = &comps[comps.len() - 1];
                positive(number_arg(c, "sample")?, c)?
            }
            _ => {
                return Err(Diagnostic::error(format!(
                    "unknown perf probe suffix in `{}`",
                    render(comps)
                ))
                .at(span, "expected `.sample(N)`"));
            }
        };
        let kind = ProbeKind::Perf {
            perf_type,
            config,
            sample_period,
            event,
        };
        Ok(plain(kind, "perf", render(comps), span))
    }
}

/// `netfilter.hook("NAME")` names, with their `NF_INET_*` numbers; stap
/// also takes the old `NF_IP_*` spellings.
const NETFILTER_HOOKS: &[(&str, u32)] = &[
    ("NF_INET_PRE_ROUTING", 0),
    ("NF_INET_LOCAL_IN", 1),
    ("NF_INET_FORWARD", 2),
    ("NF_INET_LOCAL_OUT", 3),
    ("NF_INET_POST_ROUTING", 4),
    ("NF_IP_PRE_ROUTING", 0),
    ("NF_IP_LOCAL_IN", 1),
    ("NF_IP_FORWARD", 2),
    ("NF_IP_LOCAL_OUT", 3),
    ("NF_IP_POST_ROUTING", 4),
];

/// `.priority("N")`: stap writes it as a string; a number is fine too.
fn netfilter_priority(c: &Component) -> Result<i32, Diagnostic> {
    let n = match &c.arg {
        Some(Literal::String(s)) => s.trim().parse::<i64>().ok(),
        Some(Literal::Number(n)) => Some(*n),
        None => None,
    };
    // The kernel reserves INT_MIN and INT_MAX.
    n.and_then(|n| i32::try_from(n).ok())
        .filter(|n| *n != i32::MIN && *n != i32::MAX)
        .ok_or_else(|| {
            Diagnostic::error(
                "a netfilter priority must be a number strictly between INT_MIN and INT_MAX",
            )
            .at(c.span, "expected `(\"N\")`")
        })
}

/// `.pf("NAME")` names with their `NFPROTO_*` numbers: the BPF netfilter
/// link takes IPv4 and IPv6 only.
const NETFILTER_PFS: &[(&str, u32)] = &[("NF_INET", 2), ("NF_INET6", 10)];

/// `PERF_COUNT_SW_*`, in config order.
const SW_EVENTS: &[&str] = &[
    "cpu_clock",
    "task_clock",
    "page_faults",
    "context_switches",
    "cpu_migrations",
    "page_faults_min",
    "page_faults_maj",
    "alignment_faults",
    "emulation_faults",
];

/// `PERF_COUNT_HW_*`, in config order.
const HW_EVENTS: &[&str] = &[
    "cpu_cycles",
    "instructions",
    "cache_references",
    "cache_misses",
    "branch_instructions",
    "branch_misses",
    "bus_cycles",
    "stalled_cycles_frontend",
    "stalled_cycles_backend",
    "ref_cpu_cycles",
];

/// How a timer unit turns `N` into nanoseconds.
enum TimerScale {
    /// Period = N * this.
    Multiple(u64),
    /// Period = this / N (`hz`).
    PerSecond,
}

impl TimerScale {
    fn period(&self, n: u64) -> u64 {
        match self {
            TimerScale::Multiple(ns) => n.saturating_mul(*ns),
            TimerScale::PerSecond => 1_000_000_000 / n,
        }
    }
}

fn timer_unit_ns(unit: &str, facts: &dyn crate::kernel::KernelFacts) -> Option<TimerScale> {
    Some(match unit {
        "s" | "sec" => TimerScale::Multiple(1_000_000_000),
        "ms" | "msec" => TimerScale::Multiple(1_000_000),
        "us" | "usec" => TimerScale::Multiple(1_000),
        "ns" | "nsec" => TimerScale::Multiple(1),
        "hz" => TimerScale::PerSecond,
        "jiffies" => {
            // A jiffy is 1/CONFIG_HZ seconds; 250 is the common default.
            let hz = facts
                .config("CONFIG_HZ")
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|hz| *hz > 0)
                .unwrap_or(250);
            TimerScale::Multiple(1_000_000_000 / hz)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::glob_match;
    use crate::diag::render_plain;
    use crate::kernel::{KernelFacts, Mechanisms};
    use crate::parse::parse_file;
    use crate::preprocess::PreprocessEnv;
    use crate::sema::{ElabOptions, FunctionMechanism, KernelProbes, ProbeKind, elaborate};
    use crate::source::SourceMap;
    use crate::testing::FakeKernel;

    /// The mechanism of the script's first probe, or the rendered errors.
    fn mechanism(
        script: &str,
        facts: &FakeKernel,
        kernel_probes: KernelProbes,
    ) -> Result<FunctionMechanism, String> {
        let env = PreprocessEnv {
            kernel: facts.version(),
            arch: "x86_64".into(),
            config: &|_| None,
            args: &[],
        };
        let mut map = SourceMap::new();
        let id = map.add("script.stp", script);
        let parsed = parse_file(&map, id, &env);
        let opts = ElabOptions {
            kernel_probes,
            ..ElabOptions::default()
        };
        let (program, diags) = elaborate(&[parsed.file], &[], facts, &opts);
        let program = program.ok_or_else(|| render_plain(&map, &diags))?;
        match &program.probes[0].kind {
            ProbeKind::KernelFunction { mechanism, .. } => Ok(*mechanism),
            other => Err(format!("not a kernel.function probe: {other:?}")),
        }
    }

    const SENDMSG: &str = r#"probe kernel.function("tcp_sendmsg") { }"#;

    #[test]
    fn kernel_probes_option_picks_the_mechanism() {
        let both = FakeKernel::new();
        let kprobes_only = FakeKernel::new().with_mechanisms(Mechanisms {
            fentry: false,
            ..both.mechanisms()
        });
        use FunctionMechanism::{Fentry, Kprobe};
        assert_eq!(mechanism(SENDMSG, &both, KernelProbes::Auto), Ok(Fentry));
        assert_eq!(mechanism(SENDMSG, &both, KernelProbes::Fentry), Ok(Fentry));
        assert_eq!(mechanism(SENDMSG, &both, KernelProbes::Kprobe), Ok(Kprobe));
        assert_eq!(
            mechanism(SENDMSG, &kprobes_only, KernelProbes::Auto),
            Ok(Kprobe)
        );
    }

    #[test]
    fn a_forced_mechanism_the_kernel_lacks_is_an_error() {
        let host = FakeKernel::like_this_host();
        let fentry = mechanism(SENDMSG, &host, KernelProbes::Fentry).unwrap_err();
        assert!(
            fentry.contains(
                "kernel.function(\"tcp_sendmsg\") cannot use fentry/fexit (--kernel-probes=fentry)"
            ),
            "{fentry}"
        );
        let kprobe = mechanism(SENDMSG, &host, KernelProbes::Kprobe).unwrap_err();
        assert!(
            kprobe.contains(
                "kernel.function(\"tcp_sendmsg\") cannot use kprobes (--kernel-probes=kprobe)"
            ),
            "{kprobe}"
        );
    }

    /// A kretprobe's argument registers are clobbered by the return.
    #[test]
    fn kretprobes_refuse_arguments_and_fexit_reads_them() {
        let facts = FakeKernel::new();
        let script = r#"probe kernel.function("tcp_recvmsg").return { println($len + $return) }"#;
        assert_eq!(
            mechanism(script, &facts, KernelProbes::Fentry),
            Ok(FunctionMechanism::Fentry)
        );
        let error = mechanism(script, &facts, KernelProbes::Kprobe).unwrap_err();
        assert!(
            error.contains("`$len` cannot be read in a kernel.function probe")
                && error.contains("a kretprobe sees the registers at the return"),
            "{error}"
        );
        let entry = r#"probe kernel.function("tcp_recvmsg").return { println($return) }"#;
        assert_eq!(
            mechanism(entry, &facts, KernelProbes::Kprobe),
            Ok(FunctionMechanism::Kprobe)
        );
    }

    /// The number of probes the script elaborates to, or the errors.
    fn probe_count(script: &str, facts: &FakeKernel) -> Result<usize, String> {
        let env = PreprocessEnv {
            kernel: facts.version(),
            arch: "x86_64".into(),
            config: &|_| None,
            args: &[],
        };
        let mut map = SourceMap::new();
        let id = map.add("script.stp", script);
        let parsed = parse_file(&map, id, &env);
        let (program, diags) = elaborate(&[parsed.file], &[], facts, &ElabOptions::default());
        program
            .map(|p| p.probes.len())
            .ok_or_else(|| render_plain(&map, &diags))
    }

    /// Without fentry or kprobes, a wildcard over aliases leaves out the
    /// function-only ones; naming one is still an error.
    #[test]
    fn wildcard_aliases_leave_out_the_ones_this_kernel_cannot_run() {
        let host = FakeKernel::like_this_host();
        let aliases = r#"probe my.trace = kernel.trace("kfree_skb") { }
                         probe my.func = kernel.function("tcp_sendmsg") { }
                      "#;
        assert_eq!(
            probe_count(&format!("{aliases} probe my.* {{ }}"), &host),
            Ok(1)
        );
        let named = probe_count(&format!("{aliases} probe my.func {{ }}"), &host).unwrap_err();
        assert!(
            named.contains("cannot be probed on this kernel")
                && named.contains("in probe alias `my.func`"),
            "{named}"
        );
        let none = format!("{aliases} probe my.f* {{ }}");
        let error = probe_count(&none, &host).unwrap_err();
        assert!(error.contains("in probe alias `my.func`"), "{error}");
        assert_eq!(probe_count(&none, &FakeKernel::new()), Ok(1));
    }

    #[test]
    fn globs() {
        assert!(glob_match("tcp_*", "tcp_sendmsg"));
        assert!(glob_match("*", "x"));
        assert!(glob_match("*skb", "kfree_skb"));
        assert!(glob_match("k?ree_*", "kfree_skb"));
        assert!(!glob_match("tcp_*", "udp_sendmsg"));
        assert!(glob_match("a*b*c", "aXbYc"));
        assert!(!glob_match("a*b*c", "aXbY"));
    }
}
