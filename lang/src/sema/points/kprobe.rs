//! `kprobe.function("F")[.call|.return]` and
//! `kprobe.module("M").function("F")[.return]`: stap's DWARF-less kernel
//! probes. They always attach as kprobes/kretprobes, whatever
//! `--kernel-probes` says; the function must have a BTF prototype, which
//! also gives the body its parameters (stap offers none without DWARF).

use super::{Component, ResolvedPoint, no_arg, render, string_arg};
use crate::diag::Diagnostic;
use crate::kernel::Mechanism;
use crate::sema::KernelProbes;
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &[
    "kprobe.function",
    "kprobe.function.return",
    "kprobe.module.function",
];

impl<'a> Elaborator<'a> {
    pub(super) fn resolve_kprobe(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        no_arg(&comps[0])?;
        let (module, function, rest) = match names.as_slice() {
            ["kprobe", "function", rest @ ..] => (None, &comps[1], rest),
            ["kprobe", "module", "function", rest @ ..] => (
                Some(string_arg(&comps[1], "kprobe.module")?.to_string()),
                &comps[2],
                rest,
            ),
            _ => {
                return Err(Diagnostic::error(format!(
                    "unknown kprobe probe `{}`",
                    render(comps)
                ))
                .at(
                    span,
                    "expected `kprobe.function(\"f\")[.return]` or `kprobe.module(\"m\").function(\"f\")[.return]`",
                ));
            }
        };
        let is_return = match rest {
            [] | ["call"] => false,
            ["return"] => true,
            _ => {
                return Err(Diagnostic::error(format!(
                    "unknown suffix `.{}` on kprobe.function",
                    rest.join(".")
                ))
                .at(span, "expected `.call` or `.return`"));
            }
        };
        let spec = string_arg(function, "kprobe.function")?;
        if !self.facts.mechanisms().kprobes {
            let reason = self
                .facts
                .unavailable_reason(Mechanism::Kprobes)
                .unwrap_or_else(|| "not available on this kernel".to_string());
            return Err(
                Diagnostic::error(format!("{} needs kprobes", render(comps)))
                    .at(span, "no kprobes on this kernel")
                    .note(format!("kprobes: {reason}"))
                    .note("help: use a tracepoint (`kernel.trace(\"...\")`) instead, or add `?` to skip this probe"),
            );
        }
        let saved = self.kernel_probes;
        self.kernel_probes = KernelProbes::Kprobe;
        let points = self.resolve_functions(module, spec, is_return, function.span);
        self.kernel_probes = saved;
        points
    }
}
