//! `kernel.lsm("HOOK")` and stap's `lsm.HOOK` aliases: BPF LSM programs
//! (`BPF_PROG_TYPE_LSM`, attached through a trampoline to the kernel's
//! `bpf_lsm_HOOK` stub, whose BTF prototype is the hook's). The body sees
//! the hook's parameters by name, `$ctx` (the address of the argument
//! array, as stap gives it) and, under -g, sets the verdict with
//! `$return = -ERRNO` (see `sema::lower`).

use super::function::function_context;
use super::{Component, ResolvedPoint, plain, render, string_arg, with_context};
use crate::ast_print::quote_string;
use crate::diag::Diagnostic;
use crate::kernel::LSM_STUB_PREFIX;
use crate::sema::hir::{FunctionMechanism, ProbeKind};
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &["kernel.lsm", "lsm"];

impl<'a> Elaborator<'a> {
    /// `kernel.lsm("HOOK")`, or `lsm.HOOK` where no alias of that name
    /// exists (the stdlib defines stap's; a script may define its own).
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
        let target = format!("{LSM_STUB_PREFIX}{hook}");
        let proto = match self.facts.function(&target) {
            Ok(Some(proto)) => proto,
            Ok(None) => {
                return Err(Diagnostic::error(format!("unknown LSM hook `{hook}`"))
                    .at(span, "this kernel has no such hook")
                    .note(format!(
                        "the kernel's BTF has no `{target}`, the function a BPF LSM program of this hook attaches to"
                    )));
            }
            Err(e) => {
                return Err(Diagnostic::error(format!("{written}: {e}"))
                    .at(span, "the hook's prototype comes from the kernel's BTF"));
            }
        };
        // Trampolines are not asked for here: with no other way to run
        // the hook, a kernel that refuses them refuses the program's load,
        // and the run says so (`-p4` compiles anyway, as for stap).
        let context = function_context(&proto, false, FunctionMechanism::Lsm, self.facts);
        let kind = ProbeKind::KernelFunction {
            name: target,
            is_return: false,
            proto,
            module: None,
            mechanism: FunctionMechanism::Lsm,
            clones: Vec::new(),
            optional: false,
            offset: 0,
        };
        let resolved = format!("kernel.lsm({})", quote_string(&hook));
        let mut point = with_context(plain(kind, "kernel.lsm", resolved, span), context);
        point.context.family = "kernel.lsm";
        Ok(vec![point])
    }
}
