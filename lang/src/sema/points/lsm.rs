//! `kernel.lsm("HOOK")` and stap's `lsm.HOOK` aliases: BPF LSM programs
//! (`BPF_PROG_TYPE_LSM`, attached through the BTF of the kernel's
//! `bpf_lsm_HOOK`), whose return value can deny the operation under `-g`.
//! Not built yet: both forms are refused at the probe line, naming the
//! hook and, for a hook this kernel lacks, saying so first
//! (docs/compatibility.md).

use super::{Component, ResolvedPoint, render, string_arg};
use crate::diag::Diagnostic;
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &["kernel.lsm", "lsm"];

impl<'a> Elaborator<'a> {
    /// `kernel.lsm("HOOK")`, or `lsm.HOOK` where no alias of that name
    /// exists (stap's are in its tapset; a script may define its own).
    pub(super) fn resolve_lsm(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let written = render(comps);
        let hook = match comps {
            [kernel, lsm] if kernel.arg.is_none() && kernel.name == "kernel" => {
                string_arg(lsm, "kernel.lsm")?.to_string()
            }
            [lsm, hook] if lsm.arg.is_none() && hook.arg.is_none() => hook.name.clone(),
            _ => {
                return Err(Diagnostic::error(format!("unknown LSM probe `{written}`"))
                    .at(span, "expected `kernel.lsm(\"HOOK\")` or `lsm.HOOK`"));
            }
        };
        // The kernel's stub for each hook, the BPF attach target.
        let target = format!("bpf_lsm_{hook}");
        if let Ok(None) = self.facts.function(&target) {
            return Err(Diagnostic::error(format!("unknown LSM hook `{hook}`"))
                .at(span, "this kernel has no such hook")
                .note(format!(
                    "the kernel's BTF has no `{target}`, the function a BPF LSM program of this hook attaches to"
                )));
        }
        Err(Diagnostic::unsupported(
            format!("LSM probes (`{written}`): BPF LSM programs are not implemented"),
            span,
        )
        .note(format!(
            "stap's is a BPF_PROG_TYPE_LSM program attached to `{target}` through a BPF \
             trampoline, which needs CONFIG_BPF_LSM and `bpf` in the kernel's active LSM \
             list (/sys/kernel/security/lsm)"
        )))
    }
}
