//! `kernel.function("PATTERN")[.call|.return]` and
//! `module("M").function(...)`: BTF functions through fentry/fexit or
//! kprobes, with their parameters as context variables.

use super::{
    Component, ProbeContext, ResolvedPoint, facts_error, glob_match, has_wildcard, needs_dwarf,
    no_arg, plain, string_arg, with_context,
};
use crate::ast_print::quote_string;
use crate::diag::Diagnostic;
use crate::kernel::{FunctionProto, KernelFacts, Mechanism, TypeId, TypeKind};
use crate::sema::KernelProbes;
use crate::sema::hir::{ContextSource, ContextVar, FunctionMechanism, ProbeKind};
use crate::sema::symbols::Elaborator;
use crate::source::Span;

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
            _ => Err(needs_dwarf("kernel.statement probes", span)),
        }
    }

    pub(super) fn resolve_functions(
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
        let mut mechanism = self.function_mechanism(spec, is_return, span)?;
        if protos.len() > 1
            && self.kernel_probes == KernelProbes::Auto
            && facts.mechanisms().kprobes
        {
            // Many functions: one kprobe program attached to all of them
            // (one kprobe_multi link where the kernel has fprobe) instead
            // of loading and verifying one fentry program per function.
            mechanism = FunctionMechanism::Kprobe;
        }
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
