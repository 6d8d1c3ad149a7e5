//! `kernel.function("PATTERN")[.call|.return]` and
//! `module("M").function(...)`: BTF functions through fentry/fexit or
//! kprobes, with their parameters as context variables.

use super::{
    Component, ProbeContext, ResolvedPoint, facts_error, glob_match, has_wildcard, needs_dwarf,
    no_arg, plain, string_arg, with_context,
};
use crate::ast::Literal;
use crate::ast_print::quote_string;
use crate::diag::Diagnostic;
use crate::kernel::{
    FactsError, FunctionProto, KernelFacts, LineSelector, Mechanism, TypeId, TypeKind,
};
use crate::sema::KernelProbes;
use crate::sema::hir::{ContextSource, ContextVar, FunctionMechanism, ProbeKind, SkippedFunctions};
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// Why a wildcard leaves a function out.
const UNTRACEABLE: &str = "not in available_filter_functions (notrace, inlined or blacklisted)";

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &[
    "kernel.function",
    "kernel.function.return",
    "kernel.function.call",
    "module.function",
];

impl<'a> Elaborator<'a> {
    /// `kernel.function(...)`, `module(...).function(...)` and their
    /// suffixes; `.statement` and `.inline` need DWARF.
    pub(super) fn resolve_function(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        match names.as_slice() {
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
            }
            ["kernel", "statement"] => {
                no_arg(&comps[0])?;
                match &comps[1].arg {
                    Some(Literal::String(spec)) => self.resolve_statements(spec, comps[1].span),
                    _ => Err(Diagnostic::unsupported(
                        "kernel.statement(ADDRESS) probes (only \"FUNCTION@FILE:LINE\" is supported)",
                        comps[1].span,
                    )),
                }
            }
            ["module", "statement", ..] => Err(Diagnostic::unsupported(
                "module(...).statement probes (only the kernel's own DWARF is read)",
                span,
            )),
            _ => Err(Diagnostic::error(format!(
                "unknown suffix `.{}` on kernel.statement",
                names[2..].join(".")
            ))
            .at(span, "kernel.statement takes no suffix")),
        }
    }

    /// `kernel.statement("FUNC@FILE:LINES")`: a kprobe at the first
    /// instruction of each selected line (`N`, `N-M`, or `*` for every
    /// line) of each function FUNC matches, from the kernel's DWARF line
    /// table. Variables would need DWARF locations, which are not read.
    fn resolve_statements(
        &mut self,
        spec: &str,
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let shape = || {
            Diagnostic::error(format!(
                "kernel.statement(\"{spec}\") is not FUNCTION@FILE:LINE"
            ))
            .at(span, "expected `\"FUNCTION@FILE:LINE\"`, `:N-M` or `:*`")
        };
        let (function, place) = spec.split_once('@').ok_or_else(shape)?;
        let (file, lines) = place.rsplit_once(':').ok_or_else(shape)?;
        let selector = LineSelector::parse(lines).ok_or_else(shape)?;
        let point = format!("kernel.statement({})", quote_string(spec));
        let found = self
            .facts
            .kernel_lines(function, file, selector)
            .map_err(|e| needs_dwarf_because(&point, e, span))?;
        if found.is_empty() {
            return Err(Diagnostic::error(format!(
                "{point}: no line {lines} of a file matching `{file}` in a function matching `{function}`"
            ))
            .at(span, "not in the kernel's DWARF line table")
            .note("an inlined function has no lines of its own to probe"));
        }
        // After the lines: where the DWARF is missing too, that is what
        // to fix first.
        if !self.facts.mechanisms().kprobes {
            let reason = self
                .facts
                .unavailable_reason(Mechanism::Kprobes)
                .unwrap_or_else(|| "not available on this kernel".to_string());
            return Err(Diagnostic::error(format!("{point} needs kprobes"))
                .at(span, "no kprobes on this kernel")
                .note(format!("kprobes: {reason}")));
        }
        let mut out = Vec::new();
        for line in found {
            let resolved = format!(
                "kernel.statement({})",
                quote_string(&format!("{}@{}:{}", line.function, line.file, line.line))
            );
            let proto = FunctionProto {
                name: line.function.clone(),
                params: Vec::new(),
                ret: None,
                module: None,
            };
            let kind = ProbeKind::KernelFunction {
                name: line.function.clone(),
                is_return: false,
                proto,
                module: None,
                mechanism: FunctionMechanism::Kprobe,
                clones: Vec::new(),
                optional: false,
                offset: line.offset,
            };
            let context = ProbeContext {
                family: "kernel.statement",
                no_prototype: Some(format!(
                    "variables at {resolved} need their DWARF locations, which stap-rs \
                     does not evaluate yet"
                )),
                ..ProbeContext::default()
            };
            out.push(with_context(
                plain(kind, "kernel.statement", resolved, span),
                context,
            ));
        }
        Ok(out)
    }

    /// `kernel.function("F@FILE[:LINE]")`: the functions F matches that
    /// are declared in a file FILE matches (and at LINE, if given), from
    /// the kernel's DWARF.
    fn functions_by_source(
        &self,
        module: Option<&str>,
        spec: &str,
        span: Span,
    ) -> Result<Vec<String>, Diagnostic> {
        let point = format!("kernel.function({})", quote_string(spec));
        if module.is_some() {
            return Err(Diagnostic::unsupported(
                format!(
                    "module(...).function({}): a module's DWARF is not read (only the kernel's own)",
                    quote_string(spec)
                ),
                span,
            ));
        }
        let (function, place) = spec.split_once('@').unwrap_or((spec, "*"));
        let (file, line) = match place.rsplit_once(':') {
            Some((file, line)) => {
                let line: u64 = line.parse().map_err(|_| {
                    Diagnostic::error(format!("{point}: `{line}` is not a line number"))
                        .at(span, "expected `FUNCTION@FILE` or `FUNCTION@FILE:LINE`")
                })?;
                (file, Some(line))
            }
            None => (place, None),
        };
        let found = self
            .facts
            .kernel_source_functions(function, file)
            .map_err(|e| needs_dwarf_because(&point, e, span))?;
        let mut names: Vec<String> = found
            .into_iter()
            .filter(|f| line.is_none_or(|l| f.line == l))
            .map(|f| f.name)
            .collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Err(Diagnostic::error(format!(
                "{point}: no kernel function matching `{function}` is declared in a file matching `{file}`{}",
                line.map_or(String::new(), |l| format!(" at line {l}"))
            ))
            .at(span, "not in the kernel's DWARF"));
        }
        Ok(names)
    }

    pub(super) fn resolve_functions(
        &mut self,
        module: Option<String>,
        spec: &str,
        is_return: bool,
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let facts = self.facts;
        let by_source = spec.contains('@');
        let wildcard = has_wildcard(spec) || by_source;
        // A module that is not loaded is read from its file; ftrace's list
        // knows only loaded code, so it filters nothing there.
        let module_loaded = match &module {
            Some(m) => facts.open_module(m).map_err(|e| facts_error(e, span))?,
            None => true,
        };
        let traceable = facts.traceable_functions().filter(|_| module_loaded);
        let names: Vec<String> = if by_source {
            self.functions_by_source(module.as_deref(), spec, span)?
        } else if wildcard {
            let mut all = facts.function_names().map_err(|e| facts_error(e, span))?;
            // Functions known only by their clones (`NAME.isra.0`) match
            // under their source name, as stap's DWARF names them.
            if module.is_none() {
                all.extend(
                    traceable
                        .iter()
                        .flat_map(|t| t.clone_only_names().map(str::to_string)),
                );
            }
            all.sort();
            all.dedup();
            all.retain(|n| glob_match(spec, n));
            all
        } else {
            vec![spec.to_string()]
        };
        let suffix = if is_return { ".return" } else { ".call" };
        let place = module.as_ref().map_or("kernel.".to_string(), |m| {
            format!("module({}).", quote_string(m))
        });
        let mut skipped = SkippedFunctions {
            point: format!("{place}function({}){suffix}", quote_string(spec)),
            span,
            matched: names.len(),
            skipped: Vec::new(),
        };
        // Each function with the clone symbols that stand for it.
        let mut targets: Vec<(FunctionProto, Vec<String>)> = Vec::new();
        for n in &names {
            let proto = match &module {
                Some(m) => facts.module_function(m, n),
                None => facts.function(n),
            }
            .map_err(|e| facts_error(e, span))?;
            let clones = traceable.map_or(Vec::new(), |t| t.clones_of(n).to_vec());
            let proto = match proto {
                Some(proto) => Some(proto),
                // No BTF record: a clone's source name still probes it,
                // without parameters (nothing says where they are).
                None if module.is_none() && !clones.is_empty() => Some(FunctionProto {
                    name: n.clone(),
                    params: Vec::new(),
                    ret: None,
                    module: None,
                }),
                None => None,
            };
            let Some(proto) = proto else {
                skipped.matched -= 1;
                continue;
            };
            // An explicitly named function is left to the kernel, whose
            // refusal at attach names it; a wildcard keeps what ftrace
            // can hook.
            let hookable = traceable.is_none_or(|t| t.contains(n)) || !clones.is_empty();
            if wildcard && !hookable {
                skipped.skipped.push((n.clone(), UNTRACEABLE.to_string()));
                continue;
            }
            if !clones.is_empty()
                && let Err(error) = self.clone_mechanism(n, &clones, is_return, span)
            {
                if !wildcard {
                    return Err(error);
                }
                let why = format!(
                    "only its clone {} exists, and only kprobes reach it",
                    clones.join(", ")
                );
                skipped.skipped.push((n.clone(), why));
                continue;
            }
            targets.push((proto, clones));
        }
        if !skipped.skipped.is_empty() {
            self.skipped_functions.push(skipped);
        }
        if targets.is_empty() {
            // Every kernel and module function name: only worth reading
            // when the error will be shown.
            let all = match self.optional_depth {
                0 => facts.function_names().unwrap_or_default(),
                _ => Vec::new(),
            };
            let what = if wildcard {
                "no kernel function matches"
            } else {
                "unknown kernel function"
            };
            let place = module
                .as_deref()
                .map_or(String::new(), |m| format!(" in module `{m}`"));
            let why = if wildcard && !names.is_empty() {
                "no match can be probed (none is in ftrace's available_filter_functions)"
            } else {
                "not a traceable function of this kernel (no BTF record)"
            };
            return Err(Diagnostic::error(format!("{what} `{spec}`{place}"))
                .at(span, why)
                .suggest(spec, all.iter().map(String::as_str)));
        }
        let mut mechanism = self.function_mechanism(spec, is_return, span)?;
        if targets.len() > 1
            && self.kernel_probes == KernelProbes::Auto
            && facts.mechanisms().kprobes
        {
            // Many functions: one kprobe program attached to all of them
            // (one kprobe_multi link where the kernel has fprobe) instead
            // of loading and verifying one fentry program per function.
            mechanism = FunctionMechanism::Kprobe;
        }
        let mut out = Vec::new();
        for (proto, clones) in targets {
            // A clone has no fentry target of its own: kprobes (checked above).
            let mechanism = if !clones.is_empty() || self.takes_kprobe_after_refusal(&proto) {
                FunctionMechanism::Kprobe
            } else {
                mechanism
            };
            let mut context = function_context(&proto, is_return, mechanism, facts);
            if !clones.is_empty() && facts.function(&proto.name).ok().flatten().is_none() {
                context.no_prototype = Some(format!(
                    "kernel function `{}` has no BTF record (only its compiler clone {} \
                     exists), so where its parameters and return value are is unknown",
                    proto.name,
                    clones.join(", ")
                ));
            }
            // A kernel.function wildcard also matches module functions.
            let owner = proto.module.as_ref().map_or("kernel.".to_string(), |m| {
                format!("module({}).", quote_string(m))
            });
            let resolved = format!("{owner}function({}){suffix}", quote_string(&proto.name));
            let kind = ProbeKind::KernelFunction {
                name: proto.name.clone(),
                is_return,
                module: proto.module.clone(),
                proto,
                mechanism,
                clones,
                optional: false,
                offset: 0,
            };
            out.push(with_context(
                plain(kind, "kernel.function", resolved, span),
                context,
            ));
        }
        Ok(out)
    }

    /// In `auto`, a function that some probe reaches by kprobe (a wildcard,
    /// a clone) is reached by kprobes in every probe. Mixed, its fentry
    /// programs would run after every kprobe handler at the entry and
    /// before every kretprobe handler at the return, so a trigger probe
    /// (para-callgraph.stp's `$2`) would not enclose the traced calls of
    /// the trigger function itself. One mechanism keeps stap's order.
    pub(crate) fn one_mechanism_per_function<'p>(
        &self,
        points: impl Iterator<Item = &'p mut ResolvedPoint<'a>>,
    ) where
        'a: 'p,
    {
        if self.kernel_probes != KernelProbes::Auto {
            return;
        }
        let points: Vec<&mut ResolvedPoint<'a>> = points.collect();
        let by_kprobe: hashbrown::HashSet<(String, Option<String>)> = points
            .iter()
            .filter_map(|p| match &p.kind {
                ProbeKind::KernelFunction {
                    name,
                    module,
                    mechanism: FunctionMechanism::Kprobe,
                    ..
                } => Some((name.clone(), module.clone())),
                _ => None,
            })
            .collect();
        // Asked last: the answer probes fentry with a program load, which a
        // script without kprobes should not wait for.
        if by_kprobe.is_empty() || !self.facts.mechanisms().kprobes {
            return;
        }
        for point in points {
            let ProbeKind::KernelFunction {
                name,
                module,
                mechanism,
                proto,
                is_return,
                ..
            } = &mut point.kind
            else {
                continue;
            };
            if *mechanism == FunctionMechanism::Fentry
                && by_kprobe.contains(&(name.clone(), module.clone()))
            {
                *mechanism = FunctionMechanism::Kprobe;
                point.context = function_context(proto, *is_return, *mechanism, self.facts);
            }
        }
    }

    /// In `auto`, a function whose fentry/fexit program the kernel refused
    /// in an earlier try (6.1 refuses fexit on `tcp_v4_syn_recv_sock` with
    /// ENOTSUPP) is reached by kprobes, where the kernel has them. Its
    /// other probes follow (`one_mechanism_per_function`), so stap's
    /// nesting order holds on it.
    fn takes_kprobe_after_refusal(&self, proto: &FunctionProto) -> bool {
        self.kernel_probes == KernelProbes::Auto
            && self.facts.mechanisms().kprobes
            && self
                .fentry_refused
                .iter()
                .any(|(name, module)| *name == proto.name && *module == proto.module)
    }

    /// A function that exists only as compiler clones has no BTF record
    /// under the clones' symbols, hence no fentry trampoline: kprobes
    /// reach it, by symbol.
    fn clone_mechanism(
        &self,
        name: &str,
        clones: &[String],
        is_return: bool,
        span: Span,
    ) -> Result<FunctionMechanism, Diagnostic> {
        let mechanisms = self.facts.mechanisms();
        if self.kernel_probes != KernelProbes::Fentry && mechanisms.kprobes {
            return Ok(FunctionMechanism::Kprobe);
        }
        let suffix = if is_return { ".return" } else { "" };
        let why = if self.kernel_probes == KernelProbes::Fentry {
            "--kernel-probes=fentry".to_string()
        } else {
            self.facts
                .unavailable_reason(Mechanism::Kprobes)
                .unwrap_or_else(|| "kprobes are not available on this kernel".to_string())
        };
        Err(Diagnostic::error(format!(
            "kernel.function(\"{name}\"){suffix} exists only as its compiler clone {}, \
             which only kprobes can probe",
            clones.join(", ")
        ))
        .at(span, "needs kprobes")
        .note(format!("kprobes: {why}")))
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
}

/// A source file or line selector the kernel's DWARF cannot answer: none
/// is installed (the message says where it was looked for) or it is
/// unreadable.
fn needs_dwarf_because(point: &str, error: FactsError, span: Span) -> Diagnostic {
    Diagnostic::error(format!("{point} needs the kernel's DWARF: {error}"))
        .at(span, "source files and lines come from DWARF")
        .note(format!(
            "help: set {KERNEL_DWARF_ENV} to the path of this kernel's vmlinux with debug info"
        ))
}

/// The environment variable naming the kernel's DWARF file (read by the
/// runtime's kernel facts).
const KERNEL_DWARF_ENV: &str = "STAP_RS_KERNEL_DWARF";

pub(super) fn function_context(
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

#[cfg(test)]
mod tests {
    use crate::kernel::KernelFacts;
    use crate::sema::{ElabOptions, FunctionMechanism, KernelProbes, ProbeKind, Program};
    use crate::testing::{FakeKernel, try_elaborate};

    fn elaborate_script(
        script: &str,
        facts: &FakeKernel,
        kernel_probes: KernelProbes,
    ) -> Result<Program, String> {
        let opts = ElabOptions {
            kernel_probes,
            ..ElabOptions::default()
        };
        try_elaborate(script, facts, &opts).map(|(program, _)| program)
    }

    fn run(script: &str, facts: &FakeKernel) -> Result<Program, String> {
        elaborate_script(script, facts, KernelProbes::Auto)
    }

    /// Every tcp_* function of the fake kernel as ftrace lists it, except
    /// `missing`, plus `extra` lines.
    fn tcp_traceable(missing: &[&str], extra: &[&'static str]) -> FakeKernel {
        let names = FakeKernel::new().function_names().expect("names");
        let mut lines: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| !missing.contains(n))
            .collect();
        lines.extend_from_slice(extra);
        FakeKernel::new().with_traceable(&lines)
    }

    fn probed(program: &Program) -> Vec<(String, Vec<String>)> {
        program
            .probes
            .iter()
            .filter_map(|p| match &p.kind {
                ProbeKind::KernelFunction { name, clones, .. } => {
                    Some((name.clone(), clones.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// A wildcard leaves out what ftrace cannot hook, and says which: the
    /// run is not refused for them (para-callgraph.stp over `tcp_*` with
    /// a handler per function).
    #[test]
    fn a_wildcard_skips_functions_the_kernel_cannot_probe_and_counts_them() {
        let facts = tcp_traceable(&["tcp_close", "tcp_connect"], &[]);
        let all = run(
            r#"probe kernel.function("tcp_*").call { print($$parms) }"#,
            &FakeKernel::new(),
        )
        .expect("elaborates");
        let program = run(
            r#"probe kernel.function("tcp_*").call { print($$parms) }"#,
            &facts,
        )
        .expect("elaborates");
        let names: Vec<String> = probed(&program).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), probed(&all).len() - 2);
        assert!(!names.iter().any(|n| n == "tcp_close" || n == "tcp_connect"));
        let [skipped] = program.skipped_functions.as_slice() else {
            panic!("one skipped set: {:?}", program.skipped_functions);
        };
        assert_eq!(skipped.point, r#"kernel.function("tcp_*").call"#);
        assert_eq!(skipped.matched, names.len() + 2);
        let which: Vec<&str> = skipped.skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(which, ["tcp_close", "tcp_connect"]);
        assert!(skipped.skipped[0].1.contains("available_filter_functions"));
        // Every match unprobeable: the error says why.
        let none = tcp_traceable(&["tcp_close"], &[]);
        let error = run(r#"probe kernel.function("tcp_clo*") { }"#, &none).unwrap_err();
        assert!(error.contains("no match can be probed"), "{error}");
    }

    /// A named function is left to the kernel (a kprobe may reach a
    /// `notrace` function), whose refusal at attach names it.
    #[test]
    fn a_named_function_is_not_filtered() {
        let facts = tcp_traceable(&["tcp_close"], &[]);
        let program = run(r#"probe kernel.function("tcp_close") { }"#, &facts).expect("elaborates");
        assert_eq!(probed(&program), [("tcp_close".to_string(), vec![])]);
        assert!(program.skipped_functions.is_empty());
    }

    /// stap names a function by its source name even when only a compiler
    /// clone has a symbol: the probe goes on the clone, by kprobe, reading
    /// the parameters of the function's BTF prototype.
    #[test]
    fn a_function_known_by_its_clone_probes_the_clone() {
        let facts = tcp_traceable(
            &["tcp_set_state"],
            &["tcp_set_state.isra.0", "tcp_set_state.part.0"],
        );
        let script = r#"probe kernel.function("tcp_set_state") { println($state, ppfunc()) }"#;
        let program = run(script, &facts).expect("elaborates");
        assert_eq!(
            probed(&program),
            [(
                "tcp_set_state".to_string(),
                vec!["tcp_set_state.isra.0".to_string()]
            )]
        );
        let ProbeKind::KernelFunction { mechanism, .. } = &program.probes[0].kind else {
            unreachable!()
        };
        assert_eq!(*mechanism, FunctionMechanism::Kprobe);
        assert!(
            program.probes[0]
                .kind
                .mechanism()
                .contains("tcp_set_state.isra.0")
        );
        // Once per function in a wildcard, under its source name.
        let wildcard =
            run(r#"probe kernel.function("tcp_set_*") { }"#, &facts).expect("elaborates");
        assert_eq!(probed(&wildcard).len(), 1);
        // fentry has no target in a clone.
        let forced = elaborate_script(script, &facts, KernelProbes::Fentry).unwrap_err();
        assert!(
            forced.contains("exists only as its compiler clone tcp_set_state.isra.0"),
            "{forced}"
        );
    }

    /// A clone whose function has no BTF record is probed without its
    /// parameters: `$name` is a clear error, `$$parms` is empty.
    #[test]
    fn a_clone_without_a_prototype_has_no_parameters() {
        let facts = tcp_traceable(
            &[],
            &[
                "tcp_options_write.constprop.0",
                "tcp_options_write.constprop.1",
            ],
        );
        let program = run(
            r#"probe kernel.function("tcp_opt*") { print($$parms) }"#,
            &facts,
        )
        .expect("elaborates");
        assert_eq!(
            probed(&program),
            [(
                "tcp_options_write".to_string(),
                vec![
                    "tcp_options_write.constprop.0".to_string(),
                    "tcp_options_write.constprop.1".to_string()
                ]
            )]
        );
        let error = run(
            r#"probe kernel.function("tcp_options_write") { print($opts) }"#,
            &facts,
        )
        .unwrap_err();
        assert!(
            error.contains("`tcp_options_write` has no BTF record")
                && error.contains("needs the function's BTF prototype"),
            "{error}"
        );
    }

    /// A function a wildcard reaches by kprobe is reached by kprobes in
    /// every probe (in `auto`): a trigger on fentry would run after the
    /// wildcard's kprobe at the entry and before its kretprobe at the
    /// return, not around them.
    #[test]
    fn probes_on_one_function_share_its_mechanism() {
        let script = r#"probe kernel.function("tcp_sendmsg").return { println($size) }
                        probe kernel.function("tcp_*").return { println(ppfunc()) }
                        probe kernel.function("udp_sendmsg") { }"#;
        let program = run(script, &FakeKernel::new()).expect("elaborates");
        let mechanism = |name: &str| {
            program.probes.iter().find_map(|p| match &p.kind {
                ProbeKind::KernelFunction {
                    name: n, mechanism, ..
                } if n == name => Some(*mechanism),
                _ => None,
            })
        };
        assert_eq!(mechanism("tcp_sendmsg"), Some(FunctionMechanism::Kprobe));
        assert_eq!(mechanism("udp_sendmsg"), Some(FunctionMechanism::Fentry));
        // A parameter in a kretprobe is read as at the entry.
        assert!(program.probes[0].kind.mechanism().contains("kretprobe"));
    }

    /// A function whose fentry/fexit the kernel refused in an earlier try
    /// is reached by kprobes in every probe on it (entry and return, so
    /// they nest as stap's); other functions keep fentry, and only `auto`
    /// falls back: an explicit `--kernel-probes fentry` keeps its choice.
    #[test]
    fn a_function_whose_fentry_was_refused_takes_kprobes_in_auto() {
        let script = r#"probe kernel.function("tcp_sendmsg").return { println($size) }
                        probe kernel.function("tcp_sendmsg") { }
                        probe kernel.function("udp_sendmsg") { }"#;
        let refused = |kernel_probes| ElabOptions {
            kernel_probes,
            fentry_refused: vec![("tcp_sendmsg".to_string(), None)],
            ..ElabOptions::default()
        };
        let mechanisms = |program: &Program| -> Vec<(String, FunctionMechanism)> {
            program
                .probes
                .iter()
                .filter_map(|p| match &p.kind {
                    ProbeKind::KernelFunction {
                        name, mechanism, ..
                    } => Some((name.clone(), *mechanism)),
                    _ => None,
                })
                .collect()
        };
        let (auto, _) =
            try_elaborate(script, &FakeKernel::new(), &refused(KernelProbes::Auto)).expect("auto");
        assert_eq!(
            mechanisms(&auto),
            [
                ("tcp_sendmsg".to_string(), FunctionMechanism::Kprobe),
                ("tcp_sendmsg".to_string(), FunctionMechanism::Kprobe),
                ("udp_sendmsg".to_string(), FunctionMechanism::Fentry),
            ]
        );
        // The return probe reads $size as a kretprobe does.
        assert!(auto.probes[0].kind.mechanism().contains("kretprobe"));
        let (forced, _) = try_elaborate(script, &FakeKernel::new(), &refused(KernelProbes::Fentry))
            .expect("fentry");
        assert!(
            mechanisms(&forced)
                .iter()
                .all(|(_, m)| *m == FunctionMechanism::Fentry)
        );
        // Without kprobes there is nothing to fall back to: fentry stays,
        // and the kernel's refusal is the error.
        let no_kprobes = FakeKernel::new().with_mechanisms(crate::kernel::Mechanisms {
            kprobes: false,
            ..FakeKernel::new().mechanisms()
        });
        let (kept, _) =
            try_elaborate(script, &no_kprobes, &refused(KernelProbes::Auto)).expect("no kprobes");
        assert!(
            mechanisms(&kept)
                .iter()
                .all(|(_, m)| *m == FunctionMechanism::Fentry)
        );
    }

    /// Statement probes: (resolved point, function, offset) of each.
    fn statements(program: &Program) -> Vec<(String, String, u64)> {
        program
            .probes
            .iter()
            .filter_map(|p| match &p.kind {
                ProbeKind::KernelFunction {
                    name,
                    offset,
                    mechanism,
                    ..
                } => {
                    assert_eq!(*mechanism, FunctionMechanism::Kprobe);
                    Some((p.resolved.clone(), name.clone(), *offset))
                }
                _ => None,
            })
            .collect()
    }

    /// `F@FILE` picks functions by their DWARF source file, as stap does:
    /// the file pattern also matches after leading directories.
    #[test]
    fn functions_by_source_file() {
        let facts = FakeKernel::new().with_dwarf();
        let names = |script: &str| -> Vec<String> {
            probed(&run(script, &facts).expect("elaborates"))
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        };
        assert_eq!(
            names(r#"probe kernel.function("*@net/ipv4/tcp.c") { }"#),
            ["tcp_recvmsg", "tcp_sendmsg"]
        );
        assert_eq!(
            names(r#"probe kernel.function("tcp_*@ipv4/*.c") { }"#),
            ["tcp_recvmsg", "tcp_sendmsg", "tcp_v4_connect"]
        );
        assert_eq!(
            names(r#"probe kernel.function("*@tcp.c:2900") { }"#),
            ["tcp_recvmsg"]
        );
        let none = run(r#"probe kernel.function("*@fs/proc*.c") { }"#, &facts).unwrap_err();
        assert!(
            none.contains(
                "no kernel function matching `*` is declared in a file matching `fs/proc*.c`"
            ),
            "{none}"
        );
    }

    /// `F@FILE:LINES` is a kprobe at each line's offset in the function.
    #[test]
    fn statements_are_kprobes_at_line_offsets() {
        let facts = FakeKernel::new().with_dwarf();
        let program = run(
            r#"probe kernel.statement("tcp_sendmsg@net/ipv4/tcp.c:*") { print(pp()) }"#,
            &facts,
        )
        .expect("elaborates");
        let point = |line: u64| format!("kernel.statement(\"tcp_sendmsg@net/ipv4/tcp.c:{line}\")");
        assert_eq!(
            statements(&program),
            [
                (point(1360), "tcp_sendmsg".to_string(), 0),
                (point(1364), "tcp_sendmsg".to_string(), 0x12),
                (point(1365), "tcp_sendmsg".to_string(), 0x2c),
            ]
        );
        let one =
            run(r#"probe kernel.statement("*@tcp.c:1364-1365") { }"#, &facts).expect("elaborates");
        assert_eq!(statements(&one).len(), 2);
        let missing = run(
            r#"probe kernel.statement("tcp_sendmsg@net/ipv4/tcp.c:1") { }"#,
            &facts,
        )
        .unwrap_err();
        assert!(
            missing.contains("no line 1 of a file matching"),
            "{missing}"
        );
        let shape = run(r#"probe kernel.statement("tcp_sendmsg") { }"#, &facts).unwrap_err();
        assert!(shape.contains("is not FUNCTION@FILE:LINE"), "{shape}");
        let var = run(
            r#"probe kernel.statement("tcp_sendmsg@net/ipv4/tcp.c:1364") { print($size) }"#,
            &facts,
        )
        .unwrap_err();
        assert!(var.contains("need their DWARF locations"), "{var}");
    }

    /// Without the kernel's DWARF, the error says that is what is missing.
    #[test]
    fn source_files_and_lines_need_the_kernels_dwarf() {
        let facts = FakeKernel::new();
        for script in [
            r#"probe kernel.function("*@fs/proc*.c") { }"#,
            r#"probe kernel.statement("do_sys_open@fs/open.c:*") { }"#,
        ] {
            let error = run(script, &facts).unwrap_err();
            assert!(
                error.contains("needs the kernel's DWARF: no DWARF"),
                "{error}"
            );
            assert!(error.contains("STAP_RS_KERNEL_DWARF"), "{error}");
        }
    }
}
