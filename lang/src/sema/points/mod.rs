//! Probe point resolution: brace sets, wildcards, aliases (with their
//! prologues and epilogues), `?` and `!`, and mechanism availability.
//! Each family's arguments and context variables are resolved in its own
//! file; adding a family is one file, its `NAMES` below and one arm in
//! `resolve_family`.

mod function;
mod kprobe;
mod lifecycle;
mod lsm;
mod netfilter;
mod perf;
mod process;
pub(super) mod procfs;
mod special;
mod syscall;
mod timer;
mod tracepoint;

use std::borrow::Cow;

use super::hir::{ContextVar, ProbeKind};
use super::symbols::Elaborator;
use crate::ast::{self, Literal, PointComponent};
use crate::ast_print::quote_string;
use crate::diag::Diagnostic;
use crate::kernel::FactsError;
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
    /// Kernel functions known only by their clones' symbols, with no BTF
    /// record: why `$name` cannot be read (`$$parms` is then empty).
    pub no_prototype: Option<String>,
    /// Parameters (or `return`) the function has but a uprobe cannot read
    /// from registers, with the reason.
    pub unreadable: Vec<(String, String)>,
    /// Kretprobes and uretprobes: the parameters, readable only inside `@entry(...)`
    /// (an entry probe saves the value; they are also in `unreadable`).
    pub entry_vars: Vec<ContextVar>,
    /// A point with no function entry of its own whose `@entry` values
    /// another event saves (a system call's exit event: its enter event),
    /// as that event's resolved text and kind; `entry_vars` are its fields.
    pub entry_event: Option<(String, ProbeKind)>,
    /// Raw tracepoints: the classic record's fields, which the probe reads
    /// instead of the raw arguments when it uses one of them (`vars` then
    /// also lists the fields whose names no argument has).
    pub classic_fields: Option<Vec<crate::kernel::ClassicField>>,
    /// SDT markers: `$$provider` and `$$name`; PLT stubs: `$$name` (the
    /// function; `$$provider` is empty).
    pub marker: Option<(String, String)>,
}

/// One concrete point a probe body gets attached to.
pub(crate) struct ResolvedPoint<'a> {
    pub written: String,
    pub resolved: String,
    pub alias_chain: Vec<String>,
    pub kind: ProbeKind,
    pub context: ProbeContext,
    /// Innermost alias first: they run in this order before the body.
    /// Owned for the prologues a family builds (the generic syscalls').
    pub prologues: Vec<Cow<'a, ast::Block>>,
    /// Outermost alias first: they run in this order after the body.
    pub epilogues: Vec<&'a ast::Block>,
    pub conditions: Vec<&'a ast::Expr>,
    /// `oneshot`: the body ends with `exit()`.
    pub oneshot: bool,
    pub span: Span,
    /// A wildcard argument this point resolved to one concrete name (the
    /// component, the name): `pn()` shows the name, as stap's "script-level
    /// point, including wild-card expansion effects" (`mark("*")` gives
    /// `mark("consts")` for that marker's probe).
    pub expanded: Option<(&'static str, String)>,
}

/// Every family's point names, for "did you mean" on an unknown point.
const FAMILIES: &[&[&str]] = &[
    special::NAMES,
    tracepoint::NAMES,
    function::NAMES,
    timer::NAMES,
    perf::NAMES,
    process::NAMES,
    lifecycle::NAMES,
    kprobe::NAMES,
    lsm::NAMES,
    netfilter::NAMES,
    procfs::NAMES,
    syscall::NAMES,
];

/// `fnmatch`-style matching with `*` and `?`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
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

/// `components` with the wildcard argument of component `expanded.0`
/// replaced by the concrete name it resolved to.
fn with_expansion(
    components: &[Component],
    expanded: &Option<(&'static str, String)>,
) -> Vec<Component> {
    let mut out = components.to_vec();
    if let Some((name, value)) = expanded
        && let Some(c) = out.iter_mut().rev().find(|c| c.name == *name)
        && matches!(&c.arg, Some(Literal::String(s)) if has_wildcard(s))
    {
        c.arg = Some(Literal::String(value.clone()));
    }
    out
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
        expanded: None,
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
        let (resolved, errors) = self.resolve_list(points, &[], &mut chain, true);
        self.diags.extend(errors);
        resolved
    }

    /// Resolves a list of points in order, honouring `?` and `!`.
    /// `suffix` is appended to every point (an alias used with a suffix,
    /// `myalias.return`). `top` records the written text of each point on
    /// its results.
    fn resolve_list(
        &mut self,
        points: &'a [ast::ProbePoint],
        suffix: &[Component],
        chain: &mut Vec<String>,
        top: bool,
    ) -> (Vec<ResolvedPoint<'a>>, Vec<Diagnostic>) {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for point in points {
            let optional = point.optional || point.sufficient;
            let mut found = Vec::new();
            for mut alternative in expand(&point.components) {
                alternative.extend_from_slice(suffix);
                self.optional_depth += usize::from(optional);
                let result = self.resolve_one(&alternative, point.span, chain);
                self.optional_depth -= usize::from(optional);
                match result {
                    Ok(mut resolved) => {
                        for r in &mut resolved {
                            if top {
                                r.written = render(&with_expansion(&alternative, &r.expanded));
                            }
                            if let ProbeKind::KernelFunction { optional: o, .. } = &mut r.kind {
                                *o |= optional;
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
        let comps = &*syscall::unalias(comps);
        if let Some(syscalls) = self.resolve_syscalls(comps, span, chain)? {
            return Ok(syscalls);
        }
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
                return self.expand_aliases(aliases, &[], wildcard, span, chain);
            }
            if let Some(found) = self.resolve_alias_suffix(comps, span, chain) {
                return found;
            }
        }
        if comps.len() == 2 && comps[0].name == "lsm" {
            return self.resolve_lsm(comps, span);
        }
        let written = render(comps);
        let dotted: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let dotted = dotted.join(".");
        let mut candidates: Vec<String> = FAMILIES
            .iter()
            .flat_map(|f| f.iter())
            .map(|s| s.to_string())
            .collect();
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
        suffix: &[Component],
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
            let (resolved, errors) = self.resolve_list(&alias.points, suffix, chain, false);
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
                    r.prologues.push(Cow::Borrowed(&alias.body));
                }
                if let Some(after) = &alias.after {
                    r.epilogues.insert(0, after);
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

    /// stap's alias suffixes: `myalias.return` where only `myalias` is an
    /// alias resolves the alias's points with `.return` appended to each
    /// (its body still runs as the prologue). The longest alias name that
    /// is a prefix of the point wins; `None`: no alias is one.
    fn resolve_alias_suffix(
        &mut self,
        comps: &[Component],
        span: Span,
        chain: &mut Vec<String>,
    ) -> Option<Result<Vec<ResolvedPoint<'a>>, Diagnostic>> {
        for split in (1..comps.len()).rev() {
            let (head, suffix) = comps.split_at(split);
            if head.iter().any(|c| has_wildcard(&c.name)) {
                continue;
            }
            let name: Vec<&str> = head.iter().map(|c| c.name.as_str()).collect();
            let name = name.join(".");
            self.pull_aliases(|n| n == name);
            let aliases: Vec<(String, &'a ast::ProbeAlias)> = self
                .aliases
                .iter()
                .filter(|a| a.name == name)
                .map(|a| (a.name.clone(), a.ast))
                .collect();
            if !aliases.is_empty() {
                return Some(self.expand_aliases(aliases, suffix, false, span, chain));
            }
        }
        None
    }

    /// The built-in families. `Ok(None)`: not one of them (maybe an alias).
    fn resolve_family(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<Option<Vec<ResolvedPoint<'a>>>, Diagnostic> {
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let one = |p: ResolvedPoint<'a>| Some(vec![p]);
        match names.as_slice() {
            ["begin" | "init" | "oneshot" | "end" | "error" | "never"] => {
                special::resolve(comps, span).map(one)
            }
            ["kernel", "trace"] => self.resolve_trace(comps).map(Some),
            ["kernel" | "module", "function" | "statement", ..] => {
                self.resolve_function(comps, span).map(Some)
            }
            ["kprobe", ..] => self.resolve_kprobe(comps, span).map(Some),
            ["kernel", "lsm"] => self.resolve_lsm(comps, span).map(Some),
            ["timer", ..] => Ok(timer::resolve(comps, span, self.facts)?.and_then(one)),
            ["perf", ..] => self.resolve_perf(comps, span).map(one),
            ["netfilter", "hook" | "pf", ..] => self.resolve_netfilter(comps, span).map(one),
            ["process", ..] => match self.resolve_lifecycle(comps, span)? {
                Some(points) => Ok(Some(points)),
                None => self.resolve_process(comps, span).map(Some),
            },
            ["procfs", ..] => procfs::resolve(comps, span).map(one),
            ["python2" | "python3", "module", ..] => Err(process::python_module(comps, span)),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;
    use crate::kernel::{KernelFacts, Mechanisms};
    use crate::sema::{ElabOptions, FunctionMechanism, KernelProbes, ProbeKind};
    use crate::testing::{FakeKernel, try_elaborate};

    /// The mechanism of the script's first probe, or the rendered errors.
    fn mechanism(
        script: &str,
        facts: &FakeKernel,
        kernel_probes: KernelProbes,
    ) -> Result<FunctionMechanism, String> {
        let opts = ElabOptions {
            kernel_probes,
            ..ElabOptions::default()
        };
        let (program, _) = try_elaborate(script, facts, &opts)?;
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

    /// A kretprobe's argument registers are clobbered by the return, so as
    /// in stap a parameter in a return probe is its value at the entry,
    /// saved there; fexit reads it directly.
    #[test]
    fn return_probes_read_parameters_as_at_the_entry() {
        let facts = FakeKernel::new();
        let script = r#"probe kernel.function("tcp_recvmsg").return { println($len + $return) }"#;
        assert_eq!(
            mechanism(script, &facts, KernelProbes::Fentry),
            Ok(FunctionMechanism::Fentry)
        );
        assert_eq!(
            mechanism(script, &facts, KernelProbes::Kprobe),
            Ok(FunctionMechanism::Kprobe)
        );
    }

    /// A wildcard over many functions attaches one kprobe program to all
    /// of them in `auto`; one function keeps fentry; a forced choice holds.
    #[test]
    fn wildcards_over_many_functions_use_kprobes() {
        let facts = FakeKernel::new();
        let wildcard = r#"probe kernel.function("tcp_*") { }"#;
        assert_eq!(
            mechanism(wildcard, &facts, KernelProbes::Auto),
            Ok(FunctionMechanism::Kprobe)
        );
        assert_eq!(
            mechanism(wildcard, &facts, KernelProbes::Fentry),
            Ok(FunctionMechanism::Fentry)
        );
        assert_eq!(
            mechanism(SENDMSG, &facts, KernelProbes::Auto),
            Ok(FunctionMechanism::Fentry)
        );
    }

    /// The number of probes the script elaborates to, or the errors.
    fn probe_count(script: &str, facts: &FakeKernel) -> Result<usize, String> {
        try_elaborate(script, facts, &ElabOptions::default()).map(|(p, _)| p.probes.len())
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
