//! `kernel.trace("SYSTEM:NAME")`: tracepoints, with wildcards, and their
//! arguments as context variables (raw tracepoint BTF or tracefs fields).

use super::{
    Component, ProbeContext, ResolvedPoint, facts_error, glob_match, has_wildcard, no_arg, plain,
    string_arg, with_context,
};
use crate::ast_print::quote_string;
use crate::diag::Diagnostic;
use crate::kernel::{Tracepoint, TracepointArgs};
use crate::sema::hir::{ContextSource, ContextVar, ProbeKind};
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &["kernel.trace"];

impl<'a> Elaborator<'a> {
    /// `kernel.trace("SPEC")`.
    pub(super) fn resolve_trace(
        &mut self,
        comps: &[Component],
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        no_arg(&comps[0])?;
        let spec = string_arg(&comps[1], "kernel.trace")?;
        self.resolve_tracepoints(spec, comps[1].span)
    }

    pub(super) fn resolve_tracepoints(
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
                let mut context = tracepoint_context(&tp, facts);
                if let Some(entry) = syscall_entry_event(&tp, facts) {
                    context.entry_vars = entry.0;
                    context.entry_event = Some(entry.1);
                }
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
}

/// The event that saves `@entry` values: its resolved text and kind.
type EntryEvent = (String, ProbeKind);

/// A system call's exit event has no entry of its own: `@entry(...)` in
/// it is evaluated at the call's enter event (saved per thread), where the
/// call's arguments are the readable fields. `None` for other events.
fn syscall_entry_event(
    tp: &Tracepoint,
    facts: &dyn crate::kernel::KernelFacts,
) -> Option<(Vec<ContextVar>, EntryEvent)> {
    let call = tp.name.strip_prefix("sys_exit_")?;
    if tp.system != "syscalls" {
        return None;
    }
    let enter_name = format!("sys_enter_{call}");
    let enter = facts
        .tracepoint(Some("syscalls"), &enter_name)
        .ok()
        .flatten()?;
    let vars = tracepoint_context(&enter, facts)
        .vars
        .into_iter()
        .filter(|v| v.name != "__syscall_nr")
        .collect();
    let resolved = format!(
        "kernel.trace({})",
        quote_string(&format!("syscalls:{enter_name}"))
    );
    let kind = ProbeKind::Tracepoint {
        system: enter.system,
        name: enter.name,
        args: enter.args,
    };
    Some((vars, (resolved, kind)))
}

fn tracepoint_context(tp: &Tracepoint, facts: &dyn crate::kernel::KernelFacts) -> ProbeContext {
    let classic = |f: &crate::kernel::ClassicField| ContextVar {
        name: f.name.clone(),
        ty: f.ty,
        type_name: facts.type_name(f.ty),
        source: ContextSource::ClassicField {
            offset: f.offset,
            size: f.size,
        },
    };
    // A raw tracepoint also offers its classic record's fields that no
    // argument is named after, as stap's BPF backend does.
    let classic_fields = match &tp.args {
        TracepointArgs::Raw(_) if !tp.system.is_empty() => {
            facts.classic_fields(&tp.system, &tp.name).ok().flatten()
        }
        _ => None,
    };
    let mut vars: Vec<ContextVar> = match &tp.args {
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
        TracepointArgs::Classic(fields) => fields.iter().map(classic).collect(),
    };
    if let Some(fields) = &classic_fields {
        let extra: Vec<ContextVar> = fields
            .iter()
            .filter(|f| !vars.iter().any(|v| v.name == f.name))
            .map(classic)
            .collect();
        vars.extend(extra);
    }
    ProbeContext {
        family: "kernel.trace",
        vars,
        classic_fields,
        ..ProbeContext::default()
    }
}
